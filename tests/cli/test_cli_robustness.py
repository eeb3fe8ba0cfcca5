"""Every CLI command is crash-proof, all-or-nothing in its outputs, and spelled one way.

Exit codes: 0 success, 1 a negative answer, 2 bad input, 3 an internal error (never an answer).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.authority import parse_connection, verify_engagement
from a3fast.cli import main
from a3fast.cli.common import BadInput, atomic_outputs
from a3fast.files import TEMP_MARK, remove_stale_temps
from a3fast.errors import SchemaError
from a3fast.interop.supply import Supplied

REPO = Path(__file__).resolve().parents[2]
LISTING = REPO / "tests" / "data" / "interop" / "listings" / "page1.json"
CARD = {"name": "order-analyst", "url": "https://o.example/", "skills": [{"id": "order.investigate"}]}
MANIFEST = REPO / "tests" / "data" / "interop" / "manifests" / "fleet.yaml"
AUTHORITY = REPO / "examples" / "authority"


def run(*args, input=None, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input, env=env, catch_exceptions=False)


def bad_input(result, *fragments):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr


@pytest.fixture
def fleet_file(tmp_path):
    path = tmp_path / "fleet.jsonl"
    assert run("gen-fleet", "--agents", 20, "-o", path).exit_code == 0
    return path


# -- crash classes, each fixed where it came from -------------------------------------------------
@pytest.mark.parametrize("content, where", [
    (b"[1]", "$[0]: expected an object"),
    (b'[{"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": "x", "clearances": []}]',
     "$[0].capabilities"),
    (b'{"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": [1]}\n',
     "line 1: $.clearances[0]"),
])
def test_gen_tasks_checks_its_fleet_as_place_does(tmp_path, content, where):
    fleet = tmp_path / "fleet.json"
    fleet.write_bytes(content)
    bad_input(run("gen-tasks", "--fleet", fleet, "--tasks", 3), f"{fleet}: {where}")
    bad_input(run("place", "--fleet", fleet, "--requirements", fleet), f"{fleet}: {where}")


def _declaration(name, namespace, capability):
    return json.dumps({"v": "1.0", "agent": {"name": name, "namespace": namespace},
                       "capabilities": [{"name": capability, "version": 1}], "clearances": []})


def test_gen_tasks_refuses_a_name_in_two_namespaces_as_place_does(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_text(_declaration("a", "support", "x.y") + "\n" + _declaration("a", "billing", "x.y") + "\n")
    where = f"{fleet}: line 2: $.agent.namespace: expected namespace 'support'"
    bad_input(run("place", "--fleet", fleet, "--requirements", fleet), where)
    bad_input(run("gen-tasks", "--fleet", fleet, "--tasks", 3), where)


def test_gen_tasks_draws_from_the_declaration_the_fleet_keeps(tmp_path):
    """A name declared twice in one namespace is replaced by its later declaration, as in `place`:
    the tasks ask for what the kept one offers, never the replaced one's capabilities."""
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_text(_declaration("a", "s", "old.cap") + "\n" + _declaration("a", "s", "new.cap") + "\n")
    result = run("gen-tasks", "--fleet", fleet, "--tasks", 20)
    assert result.exit_code == 0, result.output
    wanted = {c["name"] for line in result.stdout.splitlines() for c in json.loads(line).get("capabilities", [])}
    assert wanted == {"new.cap"}


def test_gen_tasks_draws_from_a_model_without_a_latency_class(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_text(json.dumps({"v": "1.0", "agent": {"name": "a", "namespace": "n"},
                                 "capabilities": [{"name": "a.b", "version": 1}], "clearances": [],
                                 "model": {"cost_ceiling_usd": "0.5"}}))
    result = run("gen-tasks", "--fleet", fleet, "--tasks", 30)
    assert result.exit_code == 0
    assert all("model" not in json.loads(line) for line in result.stdout.splitlines())


@pytest.mark.parametrize("command", [("gen-fleet", "--agents", 2), ("demo", "--agents", 2, "--tasks", 1)])
@pytest.mark.parametrize("seed", ["-1", str(2**63), "x"])
def test_seeds_out_of_range_are_bad_input(command, seed, tmp_path):
    bad_input(run(*command, "--seed", seed, "-o", tmp_path / "out.jsonl"), "--seed")
    assert list(tmp_path.iterdir()) == []


def test_workload_refuses_a_negative_seed_with_a_value_error():
    from a3fast.workload import generate_fleet, generate_tasks

    with pytest.raises(ValueError, match="seed"):
        generate_fleet(2, -1)
    with pytest.raises(ValueError, match="n_tasks"):
        generate_tasks([], -1, 0)


@pytest.mark.parametrize("args, message", [
    (("--verifier", ""), "naming a program"),
    (("--verifier", "   "), "naming a program"),
    (("--verifier", 'echo "x'), "no closing quotation"),
    (("--verifier", "echo x\\"), "no escaped character"),
    (("--timeout", "nan"), "--timeout"),
    (("--timeout", "inf"), "--timeout"),
    (("--timeout", "0"), "--timeout"),
    (("--timeout", "-3"), "--timeout"),
    (("--timeout", "3601"), "up to 3600"),             # the system's wait overflows near 25 days
    (("--timeout", "1e9"), "up to 3600"),
    (("--verifier", "true", "--timeout", "1e9"), "up to 3600"),
    (("--suite", "matching", "--matcher", "true", "--timeout", "1e9"), "up to 3600"),
])
def test_conformance_refuses_a_verifier_it_cannot_run(args, message):
    bad_input(run("conformance", *args), message)


def test_run_command_raises_value_error_for_what_it_cannot_run():
    from a3fast.conformance import run_command

    for command, timeout in [("", 1.0), ([], 1.0), ('echo "x', 1.0), ("true", float("nan")), ("true", 0),
                             ("true", 3601), ("true", 1e9)]:
        with pytest.raises(ValueError):
            run_command(command, timeout)


@pytest.mark.parametrize("fields", [
    {"clearances": None}, {"grants": None}, {"grants": {"a": "x.y"}}, {"grants": {1: ["x.y"]}},
    {"capabilities": None}, {"capabilities": [("a.b", 1, 2)]}, {"residency": "eu"},
    {"skill_versions": [1]}, {"skill_versions": {1: 1}}, {"skill_domain": 3}, {"normalise": "yes"},
    {"namespace": 3}, {"latency_class": []}, {"cost_ceiling_usd": 1},
])
def test_supplied_check_raises_schema_error_for_any_wrong_type(fields):
    with pytest.raises(SchemaError):
        Supplied(**fields).check()


@pytest.mark.parametrize("kwargs", [{"now": 12345}, {"now": b"2026"}, {"now": []},
                                    {"skew_seconds": "30"}, {"skew_seconds": -1}, {"skew_seconds": None}])
def test_verify_engagement_raises_value_error_for_a_callers_mistake(kwargs):
    connection = parse_connection(json.loads((AUTHORITY / "connection.json").read_text()))
    descriptor = json.loads((AUTHORITY / "engagement.json").read_text())
    with pytest.raises(ValueError):
        verify_engagement(descriptor, connection, **kwargs)


def test_resolver_raises_value_error_for_a_now_of_the_wrong_type():
    from a3fast.authority import resolve

    docs = {name: json.loads((AUTHORITY / f"{name}.json").read_text())
            for name in ("contracts", "mappings", "skills", "connection", "engagement", "policy")}
    with pytest.raises(ValueError):
        resolve(docs["contracts"], docs["mappings"], docs["skills"], docs["connection"],
                docs["engagement"], docs["policy"], now=12345)


# -- the last-resort handler ------------------------------------------------------------------------
def _explode(*args, **kwargs):
    raise RuntimeError("generator broke\non two lines")


def test_an_unexpected_exception_is_an_internal_error_with_exit_3(monkeypatch):
    import a3fast.cli.workload_cmd as workload_cmd

    monkeypatch.setattr(workload_cmd, "generate_fleet", _explode)
    result = run("gen-fleet", "--agents", 1)
    assert result.exit_code == 3
    assert result.stderr == "a3fast: internal error: RuntimeError: generator broke on two lines (please report)\n"
    assert result.stdout == "" and "Traceback" not in result.output


def test_a3fast_debug_shows_the_internal_errors_traceback_and_still_exits_3(monkeypatch):
    import a3fast.cli.workload_cmd as workload_cmd

    monkeypatch.setattr(workload_cmd, "generate_fleet", _explode)
    result = run("gen-fleet", "--agents", 1, env={"A3FAST_DEBUG": "1"})
    # exit 1 would read as an answer ("unschedulable"): an internal error is 3 however it is shown
    assert result.exit_code == 3
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert result.stderr.endswith("RuntimeError: generator broke\non two lines\n") and result.stdout == ""


#: `a3fast gen-fleet --agents 1` (its output the script's first argument, else standard output) whose
#: generator raises, run as the installed command runs
_BROKEN_GEN_FLEET = ("import sys, a3fast.cli.workload_cmd as w\n"
                     "def boom(*a, **k): raise KeyError('agents')\n"
                     "w.generate_fleet = boom\n"
                     "from a3fast.cli import main\n"
                     "out = ['-o', sys.argv[1]] if len(sys.argv) > 1 else []\n"
                     "sys.argv = ['a3fast', 'gen-fleet', '--agents', '1', *out]\n"
                     "main()\n")


def test_an_internal_error_exits_3_from_the_installed_command():
    env = {k: v for k, v in os.environ.items() if k != "A3FAST_DEBUG"}
    done = subprocess.run([sys.executable, "-c", _BROKEN_GEN_FLEET], capture_output=True, timeout=60, env=env)
    assert done.returncode == 3
    assert done.stderr == b"a3fast: internal error: KeyError: 'agents' (please report)\n"


def test_a3fast_debug_exits_3_from_the_installed_command():
    done = subprocess.run([sys.executable, "-c", _BROKEN_GEN_FLEET], capture_output=True, timeout=60,
                          env={**os.environ, "A3FAST_DEBUG": "1"})
    assert done.returncode == 3
    assert b"Traceback (most recent call last)" in done.stderr and done.stderr.endswith(b"KeyError: 'agents'\n")


def test_a3fast_debug_with_standard_error_closed_writes_nothing_to_standard_output(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(_BROKEN_GEN_FLEET)
    # the traceback's writer falls back to standard output when standard error is closed
    done = subprocess.run(["sh", "-c", f'"{sys.executable}" "{script}" "{tmp_path / "fleet.jsonl"}" 2>&-'],
                          capture_output=True, timeout=60, env={**os.environ, "A3FAST_DEBUG": "1"})
    assert done.returncode == 3 and done.stdout == b""


def test_usage_errors_keep_exit_2():
    assert run("place").exit_code == 2
    assert run("no-such-command").exit_code == 2
    assert run("gen-fleet", "--agents", "many").exit_code == 2


def test_main_help_documents_exit_code_3():
    assert "3 an internal error" in run("--help").stdout


# -- outputs: all or nothing ----------------------------------------------------------------------
@pytest.fixture
def card_file(tmp_path):
    path = tmp_path / "card.json"
    path.write_text(json.dumps(CARD))
    return path


def _keep(path: Path) -> bytes:
    path.write_bytes(b"previous contents\n")
    return path.read_bytes()


def test_import_mcp_replaces_nothing_when_one_output_is_a_directory(tmp_path):
    out = tmp_path / "out.jsonl"
    before = _keep(out)
    (tmp_path / "some-dir").mkdir()
    result = run("import", "mcp", LISTING, "--bind", "a", "--namespace", "n", "--server", "orders",
                 "-o", out, "--mappings", tmp_path / "some-dir")
    bad_input(result, "some-dir: cannot write")
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "some-dir"]


def test_import_mcp_replaces_nothing_when_contracts_go_to_a_missing_directory(tmp_path):
    out, mappings = tmp_path / "out.jsonl", tmp_path / "mappings.jsonl"
    before, before_mappings = _keep(out), _keep(mappings)
    result = run("import", "mcp", LISTING, "--bind", "a", "--namespace", "n", "--server", "orders",
                 "-o", out, "--mappings", mappings, "--contracts", tmp_path / "missing" / "c.jsonl")
    bad_input(result, "c.jsonl: cannot write: No such file or directory")
    assert out.read_bytes() == before and mappings.read_bytes() == before_mappings
    assert result.stdout == ""


def test_import_a2a_replaces_nothing_when_the_report_goes_to_a_missing_directory(tmp_path, card_file):
    out = tmp_path / "fleet.jsonl"
    before = _keep(out)
    result = run("import", "a2a", card_file, "--namespace", "n", "--capability-version", "1",
                 "-o", out, "--report", tmp_path / "missing" / "report.json")
    bad_input(result, "report.json: cannot write")
    assert out.read_bytes() == before


def test_import_k8s_replaces_nothing_when_the_report_names_a_directory(tmp_path):
    out = tmp_path / "fleet.jsonl"
    before = _keep(out)
    result = run("import", "k8s", MANIFEST, "-o", out, "--report", tmp_path)
    bad_input(result, "cannot write: Is a directory")
    assert out.read_bytes() == before


def test_import_refuses_two_outputs_to_one_file(tmp_path, card_file):
    out = tmp_path / "fleet.jsonl"
    result = run("import", "a2a", card_file, "--namespace", "n", "--capability-version", "1",
                 "-o", out, "--report", out)
    bad_input(result, "named for two outputs")
    assert not out.exists()


def test_import_writes_every_output_when_all_succeed(tmp_path):
    out, contracts, mappings, report = (tmp_path / n for n in ("o.jsonl", "c.jsonl", "m.jsonl", "r.json"))
    result = run("import", "mcp", LISTING, "--bind", "a", "--namespace", "n", "--server", "orders",
                 "-o", out, "--contracts", contracts, "--mappings", mappings, "--report", report)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes() and contracts.read_bytes() and mappings.read_bytes()
    assert json.loads(report.read_text())
    assert not [p for p in tmp_path.iterdir() if TEMP_MARK in p.name]


def test_atomic_outputs_leave_every_target_untouched_when_writing_fails(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    before = _keep(a)
    with pytest.raises(ZeroDivisionError):
        with atomic_outputs([str(a), str(b)]) as (fa, fb):
            fa.write(b"new a\n")
            fb.write(b"new b\n")
            1 / 0
    assert a.read_bytes() == before and not b.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_atomic_outputs_check_every_target_before_making_any_temp_file(tmp_path):
    a = tmp_path / "a.txt"
    with pytest.raises(BadInput):
        with atomic_outputs([str(a), str(tmp_path / "nope" / "b.txt")]):
            pytest.fail("nothing may be written when an output cannot be")
    assert list(tmp_path.iterdir()) == []


def test_atomic_outputs_hold_standard_output_until_the_files_are_in_place(tmp_path, capsysbinary):
    with pytest.raises(ZeroDivisionError):
        with atomic_outputs([None, str(tmp_path / "a.txt")]) as (out, fa):
            out.write(b"printed only on success\n")
            1 / 0
    assert capsysbinary.readouterr().out == b""
    with atomic_outputs([None, str(tmp_path / "a.txt")]) as (out, fa):
        out.write(b"printed\n")
        fa.write(b"file\n")
    assert capsysbinary.readouterr().out == b"printed\n"


# -- temp files left by a killed writer ---------------------------------------------------------
WRITER = """
import sys, time
from a3fast.cli.common import atomic_output
with atomic_output(sys.argv[1]) as out:
    out.write(b"x" * 65536)
    out.flush()
    print("writing", flush=True)
    time.sleep(60)
"""


def test_a_writer_killed_mid_write_leaves_a_recognisable_temp_file_that_the_next_run_removes(tmp_path):
    target = tmp_path / "trace.jsonl"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline() == b"writing\n"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    [left] = [p for p in tmp_path.iterdir()]
    assert left.name.startswith(f".trace.jsonl{TEMP_MARK}{writer.pid}.") and left.stat().st_size == 65536
    assert not target.exists()
    # a temp file of a process that still runs (this one) is not touched
    live = tmp_path / f".other.jsonl{TEMP_MARK}{os.getpid()}.abcdefgh"
    live.write_bytes(b"in progress")
    assert run("gen-fleet", "--agents", 1, "-o", tmp_path / "fleet.jsonl").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "fleet.jsonl"]


def test_remove_stale_temps_ignores_files_it_did_not_name(tmp_path):
    for name in (".trace.jsonl.x1y2z3", "notes.a3fast-tmp.1.txt", ".a.a3fast-tmp.notapid.abc"):
        (tmp_path / name).write_bytes(b"keep")
    assert remove_stale_temps(tmp_path) == []
    assert len(list(tmp_path.iterdir())) == 3


# -- one convention -------------------------------------------------------------------------------
def test_output_is_dash_o_everywhere_and_old_spellings_still_work(tmp_path, fleet_file):
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"v": "1.0"}))
    for spelling in ("-o", "--output", "--out"):
        out = tmp_path / f"trace{spelling}.jsonl"
        assert run("place", "--fleet", fleet_file, "--requirements", req, spelling, out).exit_code == 0
        assert out.read_bytes()
        tasks = tmp_path / f"tasks{spelling}.jsonl"
        assert run("gen-tasks", "--fleet", fleet_file, "--tasks", 2, spelling, tasks).exit_code == 0
        encoded = tmp_path / f"encoded{spelling}.jsonl"
        assert run("encode", out, spelling, encoded).exit_code == 0
        decoded = tmp_path / f"decoded{spelling}.jsonl"
        assert run("decode", encoded, spelling, decoded).exit_code == 0
        assert decoded.read_bytes() == out.read_bytes()
    for spelling in ("-o", "--trace"):
        trace = tmp_path / f"demo{spelling}.jsonl"
        assert run("demo", "--agents", 20, "--tasks", 3, spelling, trace).exit_code == 0 and trace.exists()


@pytest.mark.parametrize("command, hidden", [("place", "--out"), ("gen-fleet", "--out"), ("gen-tasks", "--out"),
                                             ("encode", "--out"), ("decode", "--out"), ("demo", "--trace")])
def test_old_spellings_are_hidden_from_help(command, hidden):
    text = run(command, "--help").stdout
    assert "-o, --output FILE" in text and not re.search(re.escape(hidden) + r"\b(?!put)", text)


def test_bench_json_flag_and_its_older_file_form_are_both_read(tmp_path):
    # both are checked before any measuring: a directory is refused at once, whichever spelling
    bad_input(run("bench", "--json", tmp_path), "cannot write: Is a directory")
    bad_input(run("bench", "-o", tmp_path), "cannot write: Is a directory")
    bad_input(run("bench", "--json", "--sizes", "1"), "--sizes")  # --json alone takes no value


@pytest.mark.parametrize("args, message", [
    (("--sizes", "99999999999999999999"), "--sizes: 99999999999999999999 is not in the range 2<=x<=10000000"),
    (("--sizes", "1000,10000001"), "--sizes: 10000001 is not in the range 2<=x<=10000000"),
    # with --sizes 1 after it: without the cap, the run would be refused for --sizes instead
    (("--tasks", "10000001", "--sizes", "1"), "'--tasks': 10000001 is not in the range 1<=x<=10000000"),
    (("--distributed", "10000001", "--sizes", "1"), "'--distributed': 10000001 is not in the range"),
])
def test_bench_counts_are_capped_as_gen_fleet_caps_them(args, message):
    """Past 10,000,000 the workload does not fit in memory (MemoryError, numpy's ValueError): refused
    before anything is generated."""
    bad_input(run("bench", *args), message)


@pytest.mark.parametrize("option", ["--timeout", "--seconds"])
def test_bench_refuses_nan_seconds_before_starting_a_matcher(option):
    # NaN passes click's range check (every comparison with it is false); --sizes 1 after it
    # would be the refusal otherwise
    result = run("bench", "--matcher", "true", option, "nan", "--sizes", "1")
    assert result.exit_code == 2 and f"'{option}': 'nan' is not a finite number of seconds" in result.output


@pytest.mark.parametrize("args", [
    ("serve", "--stdio", "--keep-alive", "nan"), ("serve", "--stdio", "--header-timeout", "inf"),
    ("serve", "--stdio", "--watch-interval", "nan"), ("import", "a2a", "card.json", "--timeout", "nan"),
    ("import", "mcp", "listing.json", "--timeout", "nan"),
    ("serve", "--stdio", "--keep-alive", "1e308"),      # finite, and past any clock a wait can set
])
def test_every_number_of_seconds_is_finite(args):
    # NaN, and infinity where no upper bound refuses it, would reach a wait as never or crash it
    result = run(*args)
    assert result.exit_code == 2
    assert "is not a finite number of seconds" in result.output or "is not in the range" in result.output


@pytest.mark.parametrize("command", ["/nonexistent/matcher", "no-such-matcher-command --flag"])
def test_bench_refuses_a_matcher_that_cannot_start(command):
    # a bad option (exit 2), as conformance --matcher says it, not a row of a matcher that stopped
    bad_input(run("bench", "--matcher", command, "--sizes", "100", "--tasks", "5"),
              f"--matcher: cannot start {command!r}")


def test_bench_refuses_a_matcher_that_exists_and_cannot_start(tmp_path):
    script = tmp_path / "matcher"
    script.write_text("#!/nonexistent/python3\nprint(1)\n")
    script.chmod(0o755)
    bad_input(run("bench", "--matcher", str(script), "--sizes", "100", "--tasks", "5"),
              f"--matcher: cannot start {str(script)!r}")


def test_explain_json_has_one_object_per_placement(tmp_path, fleet_file):
    trace = tmp_path / "trace.jsonl"
    assert run("demo", "--agents", 30, "--tasks", 4, "-o", trace).exit_code == 0
    result = run("explain", trace, "--json")
    assert result.exit_code == 0
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 4
    for obj in objects:
        assert set(obj) == {"seq", "kind", "summary", "candidates", "eligible", "chosen", "predicates", "reason"}
        assert obj["candidates"] == 30
        assert obj["eligible"] == obj["candidates"] - sum(p["removed"] for p in obj["predicates"])
    first = objects[0]["seq"]
    [detail] = [json.loads(line) for line in run("explain", trace, "--json", "--seq", first).stdout.splitlines()]
    assert "scores" in detail and len(detail["scores"]) == detail["eligible"]


def test_explain_json_all_failed_lists_every_failure(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    assert run("gen-fleet", "--agents", 30, "-o", fleet).exit_code == 0
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"v": "1.0", "clearances": ["no.such"], "residency": "nowhere"}))
    trace = tmp_path / "trace.jsonl"
    assert run("place", "--fleet", fleet, "--requirements", req, "-o", trace).exit_code == 1
    [obj] = [json.loads(line) for line in
             run("explain", trace, "--json", "--seq", 2, "--all-failed", "--fleet", fleet).stdout.splitlines()]
    assert len(obj["all_failed"]) == 30
    assert all(p == ["clearance:no.such", "residency:nowhere"] for p in obj["all_failed"].values())


def test_import_json_prints_declarations_and_report_as_one_object(card_file, tmp_path):
    result = run("import", "a2a", card_file, "--namespace", "n", "--capability-version", "1", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    whole = json.loads(result.stdout)
    assert set(whole) == {"declarations", "report"}
    assert [d["agent"]["name"] for d in whole["declarations"]] == ["order-analyst"]
    out = tmp_path / "fleet.jsonl"
    result = run("import", "mcp", LISTING, "--bind", "a", "--namespace", "n", "--server", "orders",
                 "--json", "-o", out, "--contracts", tmp_path / "c.jsonl")
    whole = json.loads(result.stdout)
    assert set(whole) == {"declarations", "report", "contracts", "mappings"}
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == whole["declarations"]


# -- progress on a terminal only --------------------------------------------------------------------
def test_progress_is_not_drawn_when_standard_error_is_not_a_terminal(tmp_path):
    result = run("gen-fleet", "--agents", 2500, "-o", tmp_path / "fleet.jsonl")
    assert result.exit_code == 0 and result.stderr == ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_is_drawn_on_a_terminal(tmp_path):
    master, slave = os.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "a3fast", "gen-fleet", "--agents", "3000",
                               "-o", str(tmp_path / "fleet.jsonl")], stderr=slave, timeout=120)
        os.close(slave)
        drawn = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
            if b"100%" in drawn:
                break
    finally:
        os.close(master)
    assert done.returncode == 0
    assert b"generating agents" in drawn and b"100%" in drawn


QUICKSTART = REPO / "examples" / "quickstart"


@pytest.mark.parametrize("args, closed, said", [
    (["place", "--fleet", "-", "--requirements", str(QUICKSTART / "req.json")], 0,
     "a3fast: standard input: cannot read: standard input is closed"),
    (["explain"], 0, "a3fast: standard input: cannot read: standard input is closed"),
    (["serve", "--stdio"], 0, "a3fast: --stdio: the requests come on standard input, which cannot be read: "
                              "standard input is closed"),
    (["serve", "--stdio"], 1, "a3fast: --stdio: the answers go to standard output, which is closed"),
    (["place", "--fleet", str(QUICKSTART / "fleet.jsonl"), "--requirements", str(QUICKSTART / "req.json")], 1,
     "a3fast: output: cannot write: standard output is closed (>/dev/null discards what a3fast prints)"),
    (["verify", str(REPO / "examples" / "replay" / "cluster-trace.jsonl")], 1,
     "a3fast: output: cannot write: standard output is closed"),
])
def test_a_closed_standard_stream_is_bad_input_naming_it(args, closed, said):
    # a process started with descriptor 0 or 1 closed has sys.stdin or sys.stdout None: that was an
    # internal error (AttributeError), or every verdict silently lost with exit 0
    done = subprocess.run([sys.executable, "-m", "a3fast", *args], capture_output=closed == 0,
                          stderr=subprocess.PIPE if closed == 1 else None, timeout=60,
                          preexec_fn=lambda: os.close(closed))
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().startswith(said), done.stderr
    assert b"Exception ignored" not in done.stderr


def test_a_command_that_writes_nothing_to_a_closed_standard_output_still_runs(tmp_path):
    out = tmp_path / "fleet.jsonl"
    done = subprocess.run([sys.executable, "-m", "a3fast", "gen-fleet", "--agents", "5", "-o", str(out)],
                          stderr=subprocess.PIPE, timeout=60, preexec_fn=lambda: os.close(1))
    assert done.returncode == 0, done.stderr
    assert len(out.read_bytes().splitlines()) == 5


def test_an_input_that_never_ends_is_bad_input_not_an_internal_error():
    # /dev/zero read whole under a bound on the address space: MemoryError was exit 3
    import resource

    def bounded():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    done = subprocess.run([sys.executable, "-m", "a3fast", "place", "--fleet", str(QUICKSTART / "fleet.jsonl"),
                           "--requirements", "/dev/zero"], capture_output=True, timeout=120, preexec_fn=bounded)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(b"a3fast: out of memory: the input or the work asked for is larger than this "
                                  b"process can hold")
