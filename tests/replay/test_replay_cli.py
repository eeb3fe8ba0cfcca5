"""`a3fast replay` as a user runs it: the demo's trace against its own fleet and a revoked one, exit
codes for CI thresholds, every output written whole or not at all, and bad input named in one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import a3fast
from a3fast.workload import generate_fleet

AGENTS, TASKS = 300, 150


def a3(*args, cwd, input=None):
    return subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=cwd, capture_output=True,
                          input=input, timeout=300)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's trace (spec and compact), its fleet, and the fleet with orders.issue revoked."""
    work = tmp_path_factory.mktemp("demo")
    assert a3("demo", "--agents", str(AGENTS), "--tasks", str(TASKS), "-o", "a3fast-demo.jsonl",
              cwd=work).returncode == 0
    assert a3("encode", "a3fast-demo.jsonl", "-o", "compact.jsonl", cwd=work).returncode == 0
    assert a3("gen-fleet", "--agents", str(AGENTS), "-o", "fleet.jsonl", cwd=work).returncode == 0
    docs = generate_fleet(AGENTS, 0)
    revoked = [{**d, "clearances": [c for c in d["clearances"] if c != "orders.issue"]} for d in docs]
    (work / "revoked.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in revoked))
    (work / "revoked.json").write_bytes(orjson.dumps(revoked))
    return work


def test_the_demo_trace_against_its_own_fleet_changes_nothing(demo):
    for trace in ("a3fast-demo.jsonl", "compact.jsonl"):
        done = a3("replay", trace, "--fleet", "fleet.jsonl", "--fail-on", "changed>0", "--json", cwd=demo)
        assert done.returncode == 0, done.stderr
        summary = orjson.loads(done.stdout)["summary"]
        assert (summary["placements"], summary["changed"]) == (TASKS, 0)


def test_a_revoked_clearance_makes_placements_unschedulable_and_says_which_predicate(demo):
    done = a3("replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl", "--json", "--show", "3", cwd=demo)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    summary = answer["summary"]
    assert summary["changed"] > 0 and summary["kinds"]["unschedulable"] > 0
    assert summary["predicates"][0]["predicate"] == "clearance:orders.issue"
    first = answer["changes"][0]
    assert first["before_fails"] == "clearance:orders.issue"
    assert [c["predicate"] for c in first["funnel_after"]["predicates"]] == \
        [c["predicate"] for c in first["funnel_before"]["predicates"]]
    assert len(answer["changes"]) == min(3, summary["changed"])


def test_fail_on_exits_1_beyond_a_threshold_and_0_within(demo):
    beyond = a3("replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl", "--fail-on", "moved>1%,unschedulable>0", cwd=demo)
    assert beyond.returncode == 1
    assert b"fail-on unschedulable>0:" in beyond.stdout and b", beyond" in beyond.stdout
    within = a3("replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl", "--fail-on", "changed>50%", cwd=demo)
    assert within.returncode == 0 and b"within" in within.stdout


def test_outputs_hold_every_change_and_the_page(demo):
    done = a3("replay", "compact.jsonl", "--fleet", "revoked.json", "-o", "changes.jsonl", "--report", "changes.html",
              "--show", "1", cwd=demo)
    assert done.returncode == 0, done.stderr
    lines = (demo / "changes.jsonl").read_bytes().splitlines()
    headline = next(line for line in done.stdout.splitlines() if line.startswith(b"replayed "))
    changed = int(headline.rsplit(b": ", 1)[1].split()[0].replace(b",", b""))
    assert len(lines) == changed > 1
    assert {orjson.loads(line)["kind"] for line in lines} <= {"moved", "unschedulable", "schedulable"}
    page = (demo / "changes.html").read_text()
    assert "clearance:orders.issue" in page and "<script" not in page


def test_a_snapshot_fleet_replays_with_its_outcomes_and_sessions(demo, tmp_path):
    fleet = a3fast.Fleet.load_jsonl(demo / "fleet.jsonl")
    fleet.save(tmp_path / "fleet.snapshot")
    done = a3("replay", str(demo / "a3fast-demo.jsonl"), "--fleet", str(tmp_path / "fleet.snapshot"), "--json", cwd=tmp_path)
    assert done.returncode == 0 and orjson.loads(done.stdout)["summary"]["changed"] == 0


def test_a_snapshot_with_a_declaration_that_fails_its_check_is_bad_input_naming_the_file(demo, tmp_path):
    # a snapshot's declarations are checked when first read: the replay reads them all, and a bad
    # one is told as the file's (exit 2), never an internal error
    import crafted_snapshots

    fleet = a3fast.Fleet.load_jsonl(demo / "fleet.jsonl")
    fleet.save(tmp_path / "good.snapshot")
    version, header, sections = crafted_snapshots.split((tmp_path / "good.snapshot").read_bytes())
    decls = sections["declarations"]
    swapped = decls.replace(b'"name":"agent-000000"', b'"name":"agent-000001"', 1)
    assert swapped != decls and len(swapped) == len(decls)
    bad = tmp_path / "bad.snapshot"
    bad.write_bytes(crafted_snapshots.encoded(version, header, {**sections, "declarations": swapped}))
    for option in ("--fleet", "--baseline"):
        args = ["--fleet", str(tmp_path / "good.snapshot")] if option == "--baseline" else []
        done = a3("replay", str(demo / "a3fast-demo.jsonl"), *args, option, str(bad), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.decode().startswith(f"a3fast: {bad}: section declarations: agent id 0")


def test_weights_and_a_route_are_applied(demo, tmp_path):
    (tmp_path / "route.json").write_bytes(orjson.dumps({"name": "audit", "adds": {"clearances": ["orders.audit"]}}))
    done = a3("replay", str(demo / "a3fast-demo.jsonl"), "--fleet", str(demo / "fleet.jsonl"), "--route",
              str(tmp_path / "route.json"), "--weights", "cost=1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    assert answer["summary"]["changed"] > 0
    assert all(c["route"] == "audit" for c in answer["changes"])


# -- bad input: exit 2, one line each, nothing written ------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--fleet", "missing.jsonl"], "missing.jsonl: cannot read"),
    (["--fleet", "fleet.jsonl", "--fail-on", "moved>>1"], "--fail-on: 'moved>>1'"),
    (["--fleet", "fleet.jsonl", "--weights", "1,2"], "weights: expected 4 numbers"),
    (["--fleet", "fleet.jsonl", "--route", "route.json"], "route.json: $.adds: expected an object"),
    (["--fleet", "bad-fleet.jsonl"], "bad-fleet.jsonl: line 2: $.agent"),
    (["--fleet", "fleet.jsonl", "--report", "-"], "--report needs a file"),
])
def test_bad_input_exits_2_with_one_line_naming_it(demo, tmp_path, args, words):
    (tmp_path / "route.json").write_bytes(b'{"name": "r", "adds": []}')
    lines = (demo / "fleet.jsonl").read_bytes().splitlines()
    (tmp_path / "bad-fleet.jsonl").write_bytes(lines[0] + b"\n" + b'{"v": "1.0", "agent": 3}\n')
    os.symlink(demo / "fleet.jsonl", tmp_path / "fleet.jsonl")
    done = a3("replay", str(demo / "a3fast-demo.jsonl"), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr.decode()
    assert b"Traceback" not in done.stderr


def test_a_broken_trace_exits_2_naming_its_line_and_writes_nothing(demo, tmp_path):
    trace = (demo / "a3fast-demo.jsonl").read_bytes() + b'{"seq": 99999, "kind": "task.rejected", "content": {}}\n'
    (tmp_path / "t.jsonl").write_bytes(trace)
    line = trace.count(b"\n")
    done = a3("replay", "t.jsonl", "--fleet", str(demo / "revoked.jsonl"), "-o", "changes.jsonl", "--report", "p.html",
              cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (f"a3fast: t.jsonl: line {line}: seq 99999: $.content.requirements: "
                                            "expected the task's requirements, found none")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "replay"


@pytest.mark.parametrize("spoil, words", [
    # a snapshot based on one that is not in the trace: a trace cut from its start reads so too
    (lambda c: c["fleet"].__setitem__("base", 999999),
     "$.content['a3fast.compact'].fleet.base: fleet snapshot 999999 is not earlier in the trace"),
    (lambda c: c.__setitem__("candidates", "not base64!"), "$.content['a3fast.compact'].candidates"),
])
def test_a_compact_member_that_cannot_be_read_is_bad_input_never_a_replay_over_the_whole_fleet(tmp_path, spoil,
                                                                                               words):
    # replayed over every agent rather than the ones it was offered, the placement could be reported as
    # a change on an unchanged fleet
    lines = (EXAMPLES / "cluster-trace.jsonl").read_bytes().splitlines()
    at = next(i for i, line in enumerate(lines) if b'"base"' in line and b'"task.bound"' in line)
    record = orjson.loads(lines[at])
    spoil(record["content"]["a3fast.compact"])
    lines[at] = orjson.dumps(record)
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    done = a3("replay", "t.jsonl", "--fleet", str(EXAMPLES / "cluster-fleet.jsonl"), "-o", "changes.jsonl",
              cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    message = done.stderr.decode()
    assert message.startswith(f"a3fast: t.jsonl: line {at + 1}: seq {record['seq']}: ") and words in message
    assert message.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize("spoil, words", [
    (lambda line: line.replace(b'"namespace"', b'"n\xffamespace"', 1), "not JSON: text that is not UTF-8"),
    (lambda line: line.replace(b'"seq":', b'"seq":18446744073709551616,"was":', 1),
     "$.seq: expected an integer from -2^63 to 2^64-1, found 18446744073709551616"),
])
def test_a_line_a_typed_reader_takes_is_still_held_to_utf8_and_a_seqs_bounds(tmp_path, spoil, words):
    lines = (EXAMPLES / "cluster-trace.jsonl").read_bytes().splitlines()
    at = next(i for i, line in enumerate(lines) if b'"task.admitted"' in line)
    lines[at] = spoil(lines[at])
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    done = a3("replay", "t.jsonl", "--fleet", str(EXAMPLES / "cluster-fleet.jsonl"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    message = done.stderr.decode()
    assert message.startswith(f"a3fast: t.jsonl: line {at + 1}: ") and words in message, message


def test_a_trace_on_standard_input_is_replayed(demo):
    done = a3("replay", "-", "--fleet", "fleet.jsonl", "--json", cwd=demo,
              input=(demo / "compact.jsonl").read_bytes())
    assert done.returncode == 0 and orjson.loads(done.stdout)["summary"]["placements"] == TASKS


def test_both_engines_replay_the_demo_trace_alike(demo):
    answers = []
    for engine in ("native", "pure"):
        done = a3("replay", "compact.jsonl", "--fleet", "revoked.jsonl", "--engine", engine, "--json", "--show", "1000",
                  cwd=demo)
        assert done.returncode == 0, done.stderr
        answers.append(orjson.loads(done.stdout))
    assert answers[0]["summary"] == answers[1]["summary"]
    assert answers[0]["changes"] == answers[1]["changes"]


# -- baseline mode, empty inputs, a closed pipe ---------------------------------------------------

def test_baseline_mode_reports_the_fleet_change_and_only_decisions_that_differ(demo):
    same = a3("replay", "compact.jsonl", "--fleet", "fleet.jsonl", "--baseline", "fleet.jsonl", "--json", cwd=demo)
    assert same.returncode == 0, same.stderr
    summary = orjson.loads(same.stdout)["summary"]
    assert (summary["placements"], summary["changed"]) == (TASKS, 0)
    assert summary["fleet"]["digest"] == summary["fleet"]["baseline_digest"]
    done = a3("replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--show", "3",
              cwd=demo)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode().splitlines()
    assert out[0].startswith("fleet under test: revoked.jsonl sha256:")
    assert out[1].startswith("baseline: fleet.jsonl sha256:")
    assert "agents changed" in out[2] and "(clearances)" in out[2]
    # the demo's trace was recorded on fleet.jsonl, so both modes find the same changes
    recorded = a3("replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl", "--json", cwd=demo)
    baseline = a3("replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json",
                  cwd=demo)
    assert orjson.loads(recorded.stdout)["summary"]["kinds"] == orjson.loads(baseline.stdout)["summary"]["kinds"]


def test_place_with_a_session_writes_a_trace_that_replays_unchanged(demo, tmp_path):
    (tmp_path / "task.json").write_bytes(orjson.dumps({"v": "1.0", "capabilities": [], "clearances": []}))
    placed = a3("place", "--fleet", str(demo / "fleet.jsonl"), "--requirements", "task.json", "--session", "s-1",
                "-o", "t.jsonl", cwd=tmp_path)
    assert placed.returncode == 0, placed.stderr
    assert b'"a3fast.session":"s-1"' in (tmp_path / "t.jsonl").read_bytes()
    assert a3("verify", "t.jsonl", cwd=tmp_path).returncode == 0
    done = a3("replay", "t.jsonl", "--fleet", str(demo / "fleet.jsonl"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)["summary"]
    assert (answer["placements"], answer["changed"]) == (1, 0)


def test_an_empty_trace_or_fleet_exits_2_unless_allowed(demo, tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "no-agents.json").write_bytes(b"[]")
    only_submitted = (demo / "a3fast-demo.jsonl").read_bytes().splitlines()[0] + b"\n"
    (tmp_path / "submitted.jsonl").write_bytes(only_submitted)
    for trace, fleet, words in (("empty.jsonl", demo / "fleet.jsonl", "holds no placement"),
                                ("submitted.jsonl", demo / "fleet.jsonl", "holds no placement"),
                                (str(demo / "a3fast-demo.jsonl"), tmp_path / "no-agents.json", "has no agents")):
        done = a3("replay", trace, "--fleet", str(fleet), "--fail-on", "changed>0", cwd=tmp_path)
        assert done.returncode == 2 and words in done.stderr.decode(), done.stderr
        assert b"Traceback" not in done.stderr
        allowed = a3("replay", trace, "--fleet", str(fleet), "--allow-empty", "--json", cwd=tmp_path)
        assert allowed.returncode in (0, 1), allowed.stderr


def test_a_closed_output_pipe_ends_quietly_never_with_the_thresholds_exit(demo):
    reader = subprocess.Popen([sys.executable, "-m", "a3fast", "replay", "a3fast-demo.jsonl", "--fleet", "revoked.jsonl",
                               "--show", "1000", "--fail-on", "changed>0"], cwd=demo, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    reader.stdout.close()          # the reader of the pipe is gone before anything was written
    _, err = reader.communicate(timeout=300)
    assert reader.returncode == 141, err
    assert err == b""
