"""Where the command line meets its surroundings: standard output closed or full, names that are not
UTF-8, standard input named twice, outputs checked before any is written, and inputs whose
defects must be named for what they are. Each answers with its documented exit code and one line
that says what is wrong, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main


def a3(*args: str | bytes, cwd: Path, stdout=subprocess.PIPE, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=cwd, stdout=stdout, stderr=subprocess.PIPE,
                          input=input, timeout=120)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A small trace (with its page), the fleet it was placed on, and a task."""
    folder = tmp_path_factory.mktemp("edges")
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--agents", "5", "--tasks", "4", "-o", str(folder / "t.jsonl")]).exit_code == 0
    assert runner.invoke(main, ["gen-fleet", "--agents", "5", "-o", str(folder / "fleet.jsonl")]).exit_code == 0
    (folder / "task.json").write_text('{"v": "1.0", "capabilities": []}')
    return folder


def _placement_seq(trace: Path) -> int:
    for line in trace.read_bytes().splitlines():
        record = orjson.loads(line)
        if record["kind"] in ("task.bound", "task.rejected"):
            return record["seq"]
    raise AssertionError("the demo's trace holds no placement")


# -- standard output -------------------------------------------------------------------------------
COMMANDS_THAT_PRINT = [("verify", "t.jsonl"), ("verify", "--json", "t.jsonl"), ("schema",), ("explain", "t.jsonl"),
                       ("explain", "--json", "t.jsonl"), ("gen-fleet", "--agents", "3")]


@pytest.mark.parametrize("args", COMMANDS_THAT_PRINT, ids=" ".join)
def test_standard_output_closed_by_its_reader_ends_with_141_never_an_answers_code(made, args):
    # 1 would say "invalid" or "unschedulable"; 3 would blame a3fast: a reader that went away is neither
    reader = subprocess.Popen([sys.executable, "-m", "a3fast", *args], cwd=made, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    reader.stdout.close()          # the reader of the pipe is gone before anything was written
    _, err = reader.communicate(timeout=120)
    assert reader.returncode == 141, err
    assert err == b""


@pytest.mark.parametrize("args", [("explain", "nowhere.jsonl"), ("replay", "nowhere.jsonl", "--fleet", "fleet.jsonl"),
                                  ("decode", "nowhere.jsonl", "-o", "x.jsonl"), ("verify", "--no-such-option")],
                         ids=" ".join)
def test_a_message_to_a_standard_error_closed_by_its_reader_keeps_its_exit_code_never_an_answers(made, args):
    # `2>&1 | head` with its reader gone: the bad input's line cannot be shown, and its exit code
    # still says bad input, where 1 would read as "unschedulable" or "beyond a threshold"
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=made, stdout=write, stderr=write,
                              timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 2
    assert not (made / "x.jsonl").exists()


def _closed_pipe_run(args: list[str], cwd: Path, *, stdout_too: bool = True, env=None) -> int:
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=cwd, stderr=write, timeout=120, env=env,
                              stdout=write if stdout_too else subprocess.DEVNULL).returncode
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["schema", "--help"]], ids=" ".join)
def test_help_and_version_to_a_standard_output_closed_by_its_reader_end_with_141(made, args):
    assert _closed_pipe_run(args, made) == 141


def test_an_internal_error_whose_line_cannot_be_shown_still_exits_3(made, tmp_path):
    # a command that fails in a3fast's code: gen-fleet with its workload module made to raise
    (tmp_path / "sitecustomize.py").write_text(
        "import a3fast.workload\n"
        "def broken(*args, **kwargs):\n    raise RuntimeError('broken on purpose')\n"
        "a3fast.workload.generate_fleet = broken\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "a3fast", "gen-fleet", "--agents", "3"], cwd=made, env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 3 and b"internal error: RuntimeError: broken on purpose" in done.stderr
    assert _closed_pipe_run(["gen-fleet", "--agents", "3"], made, env=env) == 3


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
@pytest.mark.parametrize("args", COMMANDS_THAT_PRINT, ids=" ".join)
def test_standard_output_that_cannot_be_written_is_an_output_that_cannot_be_written(made, args):
    with open("/dev/full", "wb") as full:
        done = a3(*args, cwd=made, stdout=full)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().strip() == "a3fast: output: cannot write: No space left on device"


# -- names that are not UTF-8 ----------------------------------------------------------------------
def test_a_file_name_that_is_not_utf8_is_written_escaped_in_a_json_answer(made, tmp_path):
    name = b"t\xff.jsonl"
    (tmp_path / os.fsdecode(name)).write_bytes((made / "t.jsonl").read_bytes())
    done = a3("verify", "--json", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"path": "t\\xff.jsonl", "valid": True, "records": json.loads(done.stdout)["records"],
                                       "errors": [], "warnings": []}


def test_report_and_demo_pages_name_a_file_that_is_not_utf8_escaped(made, tmp_path):
    from a3fast.report import write_report

    trace = tmp_path / os.fsdecode(b"t\xffx.jsonl")
    trace.write_bytes((made / "t.jsonl").read_bytes())
    done = CliRunner().invoke(main, ["report", str(trace)])
    assert done.exit_code == 0, done.output
    page = tmp_path / os.fsdecode(b"t\xffx.html")
    assert "t\\xffx.jsonl" in page.read_text() and "t\\xffx.html: report of t\\xffx.jsonl" in done.output
    page.unlink()
    assert write_report(trace) == page and "t\\xffx.jsonl" in page.read_text()
    folder = tmp_path / "u8"
    done = CliRunner().invoke(main, ["demo", "--agents", "3", "--tasks", "2", "-o", str(folder / os.fsdecode(b"\xff.jsonl"))])
    assert done.exit_code == 0, done.output
    assert sorted(os.listdir(os.fsencode(folder))) == [b"\xff.html", b"\xff.jsonl"]
    assert "u8/\\xff.html (one self-contained page" in done.output


def test_a_replay_names_a_trace_and_a_fleet_that_are_not_utf8_escaped_in_its_page_json_and_changes(made, tmp_path):
    trace, fleet = os.fsdecode(b"t\xff.jsonl"), os.fsdecode(b"f\xff.jsonl")
    (tmp_path / trace).write_bytes((made / "t.jsonl").read_bytes())
    (tmp_path / "u.jsonl").write_bytes((made / "t.jsonl").read_bytes())    # a second trace: changes name theirs
    # one agent of the five the trace was placed on: its other placements are changes the -o file lists
    (tmp_path / fleet).write_bytes((made / "fleet.jsonl").read_bytes().splitlines(keepends=True)[0])
    done = a3("replay", trace, "u.jsonl", "--fleet", fleet, "--report", "page.html", "-o", "changes.jsonl", "--json",
              cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)        # no lone surrogate: readable by any JSON reader
    assert (answer["traces"], answer["fleet"]) == (["t\\xff.jsonl", "u.jsonl"], "f\\xff.jsonl")
    assert [part["trace"] for part in answer["files"]] == ["t\\xff.jsonl", "u.jsonl"]
    page = (tmp_path / "page.html").read_text()
    assert "t\\xff.jsonl" in page and "f\\xff.jsonl" in page
    changes = [orjson.loads(line) for line in (tmp_path / "changes.jsonl").read_bytes().splitlines()]
    assert changes and {change["trace"] for change in changes} == {"t\\xff.jsonl", "u.jsonl"}


def test_an_import_report_names_a_file_that_is_not_utf8_escaped(tmp_path):
    card = {"name": "x", "description": "d", "url": "https://agents.example.com/x", "version": "1",
            "capabilities": {}, "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
            "skills": [{"id": "s", "name": "s", "description": "d", "tags": ["t"]}]}
    name = b"c\xff.json"
    (tmp_path / os.fsdecode(name)).write_bytes(orjson.dumps(card))
    done = a3("import", "a2a", name, "--namespace", "n", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["report"]
    assert report["sources"] == ["c\\xff.json"] and report["agents"][0]["source"] == "c\\xff.json"


@pytest.mark.parametrize("session, words", [(os.fsdecode(b"s\xff"), "found 's\\xff'"), ("", "found ''"),
                                            ("a\nb", "found 'a\nb'"), ("x" * 1025, "found 'xxx")])
def test_a_session_that_no_record_can_carry_is_a_bad_option(made, session, words):
    done = CliRunner().invoke(main, ["place", "--fleet", str(made / "fleet.jsonl"), "--requirements",
                                     str(made / "task.json"), "--session", session])
    assert done.exit_code == 2, done.output
    assert "Invalid value for '--session': expected a non-empty UTF-8 text of at most 1024 characters" in done.output
    assert words in done.output


# -- standard input --------------------------------------------------------------------------------
def test_standard_input_named_twice_is_refused_rather_than_read_as_empty(made):
    trace = (made / "t.jsonl").read_bytes()
    seq = str(_placement_seq(made / "t.jsonl"))
    done = a3("explain", "-", "--seq", seq, "--all-failed", "--fleet", "-", cwd=made, input=trace)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == ("a3fast: standard input is read once: give the trace or the fleet "
                                            "(--fleet) as a file")
    done = a3("place", "--fleet", "-", "--requirements", "-", cwd=made, input=b'{"v": "1.0"}')
    assert done.returncode == 2
    assert "standard input is read once" in done.stderr.decode()


def test_every_failed_predicate_of_an_empty_fleet_is_not_an_answer(made):
    seq = str(_placement_seq(made / "t.jsonl"))
    done = CliRunner().invoke(main, ["explain", str(made / "t.jsonl"), "--seq", seq, "--all-failed",
                                     "--fleet", os.devnull])
    assert done.exit_code == 2
    assert "is empty: expected declarations" in done.output


# -- outputs checked before any is written ---------------------------------------------------------
def test_the_demo_writes_nothing_when_its_page_cannot_be_written(tmp_path):
    (tmp_path / "trace.html").mkdir()            # where the page would go
    (tmp_path / "trace.jsonl").write_text("old\n")
    done = CliRunner().invoke(main, ["demo", "--agents", "3", "--tasks", "2", "-o", str(tmp_path / "trace.jsonl")])
    assert done.exit_code == 2
    assert "trace.html: cannot write" in done.output
    assert (tmp_path / "trace.jsonl").read_text() == "old\n"     # the trace is not replaced
    assert "placed" not in done.output                            # refused before any work


@pytest.mark.parametrize("output", [".", "", "newdir/", "sub/..", "new/../existing"])
def test_the_demo_refuses_a_directory_for_its_trace_and_makes_none(tmp_path, monkeypatch, output):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    done = CliRunner().invoke(main, ["demo", "--agents", "3", "--tasks", "2", "-o", output])
    assert done.exit_code == 2, done.output
    assert "names a directory" in done.output or "Is a directory" in done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]


def test_the_demo_leaves_no_directory_when_making_its_directories_fails_part_way(tmp_path, monkeypatch):
    # newA is made, a name too long for the system is not: newA goes too
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, ["demo", "--agents", "3", "--tasks", "2", "-o", f"newA/{'x' * 300}/t.jsonl"])
    assert done.exit_code == 2, done.output
    assert "cannot make the trace's directory" in done.output
    assert list(tmp_path.iterdir()) == []


def test_the_demo_says_a_tie_was_broken_by_the_name_not_by_a_component():
    from a3fast.cli.demo_cmd import explain_in_words

    class Tied:
        agent = "a"
        scheduling = {"filters_passed": ["capability:x.y/1"], "scores": {
            "b": {"total": 0.5, "affinity": 1.0, "cost": 0.0}, "a": {"total": 0.5, "affinity": 0.0, "cost": 1.0}}}

        def summary(self):
            return "2/2 eligible; chose a"

    assert explain_in_words(Tied()).splitlines()[-1] == "  a won over b on an equal total and the smaller name."


# -- inputs named for what is wrong with them ------------------------------------------------------
def test_a_lone_surrogate_in_a_trace_is_named_not_called_truncated(tmp_path):
    (tmp_path / "t.jsonl").write_bytes(b'{"seq":1,"kind":"task.submitted","content":{"requirements":'
                                       b'{"v":"1.0","x":"\\ud800"}}}\n')
    done = CliRunner().invoke(main, ["verify", str(tmp_path / "t.jsonl")])
    assert done.exit_code == 2
    assert "no low surrogate in string" in done.output and "truncated" not in done.output


def test_a_route_that_adds_what_no_route_may_is_blamed_on_the_route(made, tmp_path):
    route = tmp_path / "route.json"
    route.write_text('{"name": "r", "adds": {"v": "1.0"}}')
    done = CliRunner().invoke(main, ["replay", str(made / "t.jsonl"), "--fleet", str(made / "fleet.jsonl"),
                                     "--route", str(route)])
    assert done.exit_code == 2
    assert done.output.strip() == (f"a3fast: {route}: route 'r': cannot add 'v'; a route adds capabilities, "
                                   "clearances, tools, exclude, residency, model or agentRef")


@pytest.mark.parametrize("route, said", [
    (b"null", '$: expected a route {"name", "adds"}, found null'),
    (b"[1, 2, 3]", '$: expected a route {"name", "adds"}, found array of 3'),
    (b"{}", "$.name: expected the route's name (a non-empty string), found nothing"),
    (b'{"name": ["%b"]}' % (b"b" * 100_000), "$.name: expected the route's name (a non-empty string), found array of 1"),
    (b'{"name": "r", "adds": ["%b"]}' % (b"a" * 100_000),
     "$.adds: expected an object of requirements the route adds, found array of 1"),
    (b'{"name": "r", "%b": 1}' % (b"k" * 1000), "$: expected only 'name' and 'adds' in a route, found member "
                                                 f"{'k' * 60!r}…"),
    (b'{"name": "%b", "adds": {"x": 1}}' % (b"n" * 1000), f"route {'n' * 60!r}…: cannot add 'x'; a route adds "
                                                          "capabilities, clearances, tools, exclude, residency, "
                                                          "model or agentRef"),
])
def test_a_route_file_is_refused_in_one_short_line_whatever_it_holds(made, tmp_path, route, said):
    # the file's values were quoted whole (a million bytes on one line) and in Python's type names
    path = tmp_path / "route.json"
    path.write_bytes(route)
    done = CliRunner().invoke(main, ["replay", str(made / "t.jsonl"), "--fleet", str(made / "fleet.jsonl"),
                                     "--route", str(path)])
    assert done.exit_code == 2
    assert done.output == f"a3fast: {path}: {said}\n"


def test_a_snapshot_cut_short_after_its_mark_is_called_cut_short(made, tmp_path):
    from a3fast.snapshot import MAGIC

    (tmp_path / "fleet.a3snap").write_bytes(MAGIC)
    done = CliRunner().invoke(main, ["replay", str(made / "t.jsonl"), "--fleet", str(tmp_path / "fleet.a3snap")])
    assert done.exit_code == 2
    assert "cut short" in done.output and "does not start with" not in done.output


def test_a_suite_without_its_schema_names_the_file_once(tmp_path):
    pytest.importorskip("jsonschema")
    suite = tmp_path / "vectors" / "capability-schema"
    suite.mkdir(parents=True)
    (suite / "cases.json").write_text("[]")
    done = CliRunner().invoke(main, ["conformance", "--vectors", str(tmp_path / "vectors")])
    assert done.exit_code == 2, done.output
    assert f"{suite}/schema.json:" in done.output and f"{suite}/{suite}" not in done.output


@pytest.mark.parametrize("url, why", [("https://[::1/", "its IPv6 address has an unbalanced bracket"),
                                      ("https://[zz]/", "'zz' does not appear to be an IPv4 or IPv6 address")])
def test_a_card_url_that_cannot_be_read_gives_no_namespace_and_no_crash(tmp_path, url, why):
    card = {"name": "x", "description": "d", "url": url, "version": "1", "capabilities": {},
            "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
            "skills": [{"id": "s", "name": "s", "description": "d", "tags": ["t"]}]}
    (tmp_path / "card.json").write_bytes(orjson.dumps(card))
    done = CliRunner().invoke(main, ["import", "a2a", str(tmp_path / "card.json")])
    assert done.exit_code == 2, done.output
    assert "no namespace: an Agent Card has none, the card names no URL with a host" in done.output
    # and as the URL of an agent to fetch the card of: not a URL of an agent, said before any request
    done = CliRunner().invoke(main, ["import", "a2a", url, "--namespace", "n"])
    assert done.exit_code == 2, done.output
    assert f"{url}: $: expected an http:// or https:// URL of an agent" in done.output and why in done.output


def test_binding_tools_to_agents_none_of_which_can_be_made_is_nothing_usable(tmp_path):
    (tmp_path / "tools.json").write_text('{"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}')
    out = tmp_path / "fleet.jsonl"
    done = CliRunner().invoke(main, ["import", "mcp", str(tmp_path / "tools.json"), "--bind", "", "--namespace", "n",
                                     "-o", str(out)])
    assert done.exit_code == 2, done.output
    assert "nothing usable was read; no output written" in done.output and not out.exists()
    done = CliRunner().invoke(main, ["import", "mcp", str(tmp_path / "tools.json"), "--bind", "ok", "--namespace", "n",
                                     "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert orjson.loads(out.read_bytes())["tools"] == ["t"]


@pytest.mark.parametrize("option", ["--fleet", "--baseline", "--route"])
def test_replay_reads_standard_input_only_for_a_trace(made, option):
    args = ["replay", str(made / "t.jsonl"), "--fleet", str(made / "fleet.jsonl")]
    args += [option, "-"] if option != "--fleet" else []
    if option == "--fleet":
        args[3] = "-"
    done = CliRunner().invoke(main, args, input=(made / "fleet.jsonl").read_bytes())
    assert done.exit_code == 2, done.output
    assert done.output.strip() == f"a3fast: {option}: a file (standard input is read only for a trace)"


def test_a_command_started_without_a_standard_output_still_does_its_work(tmp_path):
    # `a3fast ... >&-`: Python then has no sys.stdout at all, and nothing is left to flush
    done = subprocess.run([sys.executable, "-m", "a3fast", "gen-fleet", "--agents", "3", "-o", str(tmp_path / "f.jsonl")],
                          stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1), timeout=120)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "f.jsonl").read_bytes().splitlines()) == 3


def test_no_command_prints_the_help_and_exits_as_bad_input():
    done = CliRunner().invoke(main, [])
    assert done.exit_code == 2
    assert "Usage:" in done.output and "Exit codes:" in done.output



@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
def test_an_output_device_that_refuses_its_write_is_the_one_named_and_the_files_are_left_unwritten(made, tmp_path):
    done = a3("replay", str(made / "t.jsonl"), "--fleet", str(made / "fleet.jsonl"), "-o", "changes.jsonl",
              "--report", "/dev/full", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.decode() == "a3fast: /dev/full: cannot write: No space left on device\n"
    assert not (tmp_path / "changes.jsonl").exists()


def _run_with_stderr(args: list[str], cwd: Path, stderr) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=stderr,
                          timeout=120)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
@pytest.mark.parametrize("args", [("verify", "missing.jsonl"), ("place", "--fleet", "fleet.jsonl", "--requirements",
                                                                  "missing.json"),
                                  ("explain", "missing.jsonl"), ("schema", "nosuch"), ("place", "--bogus"),
                                  ("serve", "--stdio", "--fleet", "task.json")], ids=" ".join)
def test_bad_input_with_standard_error_on_a_full_disk_still_exits_2_never_1(made, args):
    # the message is lost; the code is what a caller reads, and 1 would be an answer ("invalid")
    with open("/dev/full", "wb") as full:
        assert _run_with_stderr(list(args), made, full).returncode == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_or_version_onto_a_full_disk_is_exit_2_without_a_traceback(made, flag):
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "a3fast", flag], cwd=made, stdout=full, stderr=subprocess.PIPE,
                              timeout=120)
    assert done.returncode == 2 and b"Traceback" not in done.stderr


def test_started_without_standard_error_nothing_meant_for_it_lands_in_the_output(made, tmp_path):
    # 2>&-: a message of bad input, or a placement's "unschedulable", must not join the trace
    task = tmp_path / "never.json"
    task.write_text('{"v": "1.0", "capabilities": [{"name": "no.such", "version": 1}]}')
    cases = [(["place", "--fleet", "fleet.jsonl", "--requirements", str(task)], 1, 2),
             (["place", "--fleet", "missing.jsonl", "--requirements", "task.json"], 2, 0),
             (["gen-fleet", "--agents", "3"], 0, 3), (["encode", "t.jsonl", "-o", str(tmp_path / "c.jsonl")], 0, 0)]
    for args, code, lines in cases:
        run = subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=made, stdout=subprocess.PIPE,
                             stderr=None, timeout=120, preexec_fn=lambda: os.close(2))
        assert (run.returncode, len(run.stdout.splitlines())) == (code, lines), (args, run.returncode, run.stdout)
        assert b"a3fast:" not in run.stdout


@pytest.mark.parametrize("command, output, read", [
    (["place", "--fleet", "{d}/fleet.jsonl", "--requirements", "{d}/task.json"], "{d}/fleet.jsonl", "--fleet"),
    (["place", "--fleet", "{d}/fleet.jsonl", "--requirements", "{d}/task.json"], "{d}/task.json", "--requirements"),
    (["gen-tasks", "--fleet", "{d}/fleet.jsonl", "--tasks", "3"], "{d}/fleet.jsonl", "--fleet"),
    (["replay", "{d}/t.jsonl", "--fleet", "{d}/fleet.jsonl"], "{d}/fleet.jsonl", "--fleet"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v[:1]))
def test_an_output_that_is_a_file_the_command_reads_is_refused_and_the_file_kept(made, tmp_path, command, output, read):
    import shutil

    d = tmp_path / "d"
    shutil.copytree(made, d)
    target = output.format(d=d)
    before = Path(target).read_bytes()
    done = CliRunner().invoke(main, [a.format(d=d) for a in command] + ["-o", target])
    assert done.exit_code == 2
    assert done.stderr == f"a3fast: {target}: an output must not replace the file of {read}, which this command reads\n"
    assert Path(target).read_bytes() == before


def test_a_demo_trace_onto_a_device_or_pipe_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    page_before = os.path.exists("/dev/null.html")
    for target in ("/dev/null", str(fifo)):
        done = CliRunner().invoke(main, ["demo", "--agents", "5", "--tasks", "3", "-o", target])
        assert done.exit_code == 2 and "not a regular file" in done.stderr
    assert os.path.exists("/dev/null.html") == page_before       # no page written beside a device
    assert not (tmp_path / "pipe.html").exists()
