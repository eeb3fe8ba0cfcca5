"""The harness: the matching suite over the stdio protocol, run against real matcher programs —
a3fast itself, the literal reference matcher, and deliberately wrong variants of it."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.harness.checks import CHECKS
from a3fast.harness.client import MatcherFailure, MatcherProcess
from a3fast.harness.shrink import minimise
from a3fast.harness.worlds import random_world

ROOT = Path(__file__).resolve().parents[2]
LITERAL = ROOT / "examples" / "matchers" / "literal.py"
A3FAST = f"{sys.executable} -m a3fast serve --stdio"


def literal(wrong: str | None = None) -> str:
    return f"{sys.executable} {LITERAL}" + (f" --wrong {wrong}" if wrong else "")


def conformance(*args: str):
    return CliRunner().invoke(main, ["conformance", "--suite", "matching", *args])


def test_a3fast_over_the_protocol_passes_the_matching_suite():
    result = conformance("--matcher", A3FAST, "--worlds", "30")
    assert result.exit_code == 0, result.output
    assert re.search(r"^43 passed, 0 failed$", result.output, re.M)


def test_the_literal_reference_matcher_passes_the_matching_suite():
    result = conformance("--matcher", literal(), "--worlds", "30", "--seed", "7")
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output


def test_the_literal_matcher_imports_nothing_of_a3fast():
    source = LITERAL.read_text()
    assert "a3fast" not in "\n".join(l for l in source.splitlines() if l.startswith(("import", "from")))


@pytest.mark.parametrize("wrong, check", [
    ("order", "filters_failed"),       # clearances before capabilities: another first failure
    ("residency", "filters_failed"),   # residency ignored
    ("passed", "filters_passed"),      # a predicate left out of filters_passed
    ("stale", "candidates"),           # removed agents still candidates
    ("choice", "choice"),              # the worst-scored agent chosen
    ("scores", "choice"),              # the worst chosen, with scores for it alone
    ("reason", "reason"),              # a rejection's reason names a predicate no candidate failed
    ("twice", "candidates"),           # every candidate listed twice (and its failures)
])
def test_a_wrong_matcher_fails_and_the_first_wrong_placement_is_named_and_shrunk(wrong, check):
    result = conformance("--matcher", literal(wrong), "--worlds", "12")
    assert result.exit_code == 1, result.output
    first = next(line for line in result.output.splitlines() if line.startswith("FAIL "))
    assert re.match(r"FAIL .+, placement \d+ \(step \d+\): ", first), first
    assert f" {check}: " in result.output
    # a random world's failure is shown shrunk, as a world a reader can replay
    shrunk = re.search(r"^  shrunk to (\d+) agent\(s\), (\d+) step\(s\), 1 placement\(s\)", result.output, re.M)
    assert shrunk, result.output
    world = next(line for line in result.output.splitlines() if line.startswith("  world: "))
    steps = orjson.loads(world[len("  world: "):])
    assert steps[-1]["op"] == "place" and len(steps) == int(shrunk.group(2))


def test_scores_that_leave_out_an_eligible_candidate_fail_the_choice():
    """Scores for the chosen agent alone would make any eligible choice look best."""
    result = conformance("--matcher", literal("scores"), "--worlds", "4")
    assert result.exit_code == 1, result.output
    assert "choice: scores must hold every eligible candidate and no other (§6): missing " in result.output
    # shrunk to the smallest world with a choice to make: two eligible agents, one placement
    assert re.search(r"^  shrunk to 2 agent\(s\), 2 step\(s\), 1 placement\(s\)", result.output, re.M), result.output


def test_the_verifier_check_fails_for_records_that_do_not_verify():
    result = conformance("--matcher", literal("passed"), "--worlds", "3")
    assert "verifier: E_EXPLANATION" in result.output


def test_shrinking_keeps_the_smallest_world_that_shows_the_difference():
    result = conformance("--matcher", literal("residency"), "--worlds", "8")
    world = next(line for line in result.output.splitlines() if line.startswith("  world: "))
    steps = orjson.loads(world[len("  world: "):])
    # one agent without the label, one placement that asks for a residency and nothing else
    assert [s["op"] for s in steps] == ["put", "place"]
    assert len(steps[0]["declarations"]) == 1
    assert set(steps[1]["requirements"]) <= {"v", "residency"}


@pytest.mark.slow
def test_a_matcher_that_hangs_is_stopped_at_the_timeout():
    result = conformance("--matcher", literal("hang"), "--worlds", "1", "--timeout", "1")
    assert result.exit_code == 1
    assert "timeout: no answer to a place request within 1 s" in result.output
    # three placements timed out (a vector's world each): the other vectors and the random world left
    assert re.search(r"^\d+ not run \(vectors: \d+, random worlds: 1\): the matcher crashed or hung 3 times$",
                     result.output, re.M), result.output


def test_a_matcher_that_answers_garbage_is_reported_as_malformed():
    result = conformance("--matcher", literal("garbage"), "--worlds", "1")
    assert result.exit_code == 1
    assert "malformed: the answer to a place request is not JSON" in result.output


def test_a_matcher_that_crashes_is_reported_with_its_exit_code():
    result = conformance("--matcher", literal("crash"), "--worlds", "1")
    assert result.exit_code == 1
    assert "crashed: the matcher exited with code 70" in result.output


def test_a_matcher_that_cannot_be_started_is_bad_input():
    result = conformance("--matcher", "/nonexistent/matcher --serve")
    assert result.exit_code == 2
    assert "cannot start" in result.output


def test_a_malformed_matcher_command_is_bad_input():
    result = conformance("--matcher", "'unbalanced")
    assert result.exit_code == 2
    assert "--matcher" in result.output


def test_matcher_needs_the_matching_suite():
    result = CliRunner().invoke(main, ["conformance", "--matcher", literal()])
    assert result.exit_code == 2
    assert "--suite matching" in result.output


def test_one_thousand_random_placements_over_the_protocol_for_a3fast_is_a_default_run():
    result = conformance("--matcher", A3FAST)
    assert result.exit_code == 0, result.output
    placements = int(re.search(r"^(\d+) placements checked", result.output, re.M).group(1))
    assert placements >= 1000


def test_worlds_are_the_same_for_the_same_seed_and_vary_in_size():
    assert random_world(3, 5).steps == random_world(3, 5).steps
    sizes = {len(random_world(i, 0).steps[0][1]) for i in range(30)}
    assert min(sizes) <= 3 and max(sizes) >= 10
    kinds = {kind for i in range(10) for kind, _ in random_world(i, 0).steps}
    assert kinds == {"put", "delete", "place"}


def test_minimise_finds_a_one_minimal_failing_subset():
    assert minimise(list(range(20)), lambda kept: {3, 11} <= set(kept)) == [3, 11]
    assert minimise([1, 2], lambda kept: True) == []


def test_the_client_requires_answers_to_echo_the_request_id(tmp_path):
    script = tmp_path / "echo_wrong_id.py"
    script.write_text("import sys\nfor line in sys.stdin:\n    print('{\"id\": 999, \"ok\": true}', flush=True)\n")
    with MatcherProcess(f"{sys.executable} {script}", timeout=5) as m:
        with pytest.raises(MatcherFailure) as caught:
            m.request("place", requirements={})
    assert caught.value.kind == "malformed" and "echo the request's id" in caught.value.message


def test_an_id_of_true_is_not_the_echo_of_request_1_and_a_float_of_its_number_is(tmp_path):
    # Python's `true == 1` took `true` for request 1's id (and for no other); JSON reads 1.0 as 1
    script = tmp_path / "echo_id_as.py"
    script.write_text("import json, sys\nfor line in sys.stdin:\n    rid = json.loads(line)['id']\n"
                      "    rid = True if sys.argv[1] == 'true' else float(rid)\n"
                      "    print(json.dumps({'id': rid, 'ok': True}), flush=True)\n")
    with MatcherProcess(f"{sys.executable} {script} true", timeout=5) as m:
        with pytest.raises(MatcherFailure) as caught:
            m.request("list_agents")
    assert caught.value.kind == "malformed" and "carries id True" in caught.value.message
    with MatcherProcess(f"{sys.executable} {script} float", timeout=5) as m:
        assert m.request("list_agents")["id"] == 1.0 and m.request("list_agents")["id"] == 2.0


def test_every_check_is_exercised_by_some_wrong_matcher():
    """The checks a wrong matcher trips, over the modes the tests above use."""
    seen = set()
    for wrong in ("order", "passed", "stale", "choice", "residency", "reason"):
        seen |= set(re.findall(r"[;:] (\w+): ", conformance("--matcher", literal(wrong), "--worlds", "6").output))
    assert {"candidates", "filters_passed", "filters_failed", "eligible", "reason", "verifier", "choice"} <= seen
    assert set(CHECKS) - seen <= {"records"}


def test_bench_prints_the_side_by_side_table_and_pytest_benchmark_json(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--matcher", literal(), "--sizes", "200", "--tasks", "20",
                                       "--seconds", "5", "-o", str(out)])
    assert result.exit_code == 0, result.output
    for subject in ("a3fast (in process)", "a3fast (stdio protocol)", literal()):
        assert subject in result.output
    assert "the protocol's cost for a3fast" in result.output
    data = orjson.loads(out.read_bytes())
    names = [b["name"] for b in data["benchmarks"]]
    assert f"place[{literal()}]" in names and len(names) == 3
    assert all(b["stats"]["rounds"] == 20 for b in data["benchmarks"])


def test_bench_holds_every_decision_to_the_hard_filter_and_names_a_matcher_that_breaks_it(tmp_path):
    # residency ignored binds agents outside the task's residency; the worst-scored choice and
    # another first-failed order are still decisions the hard filter allows (scores are opaque, §5)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--matcher", literal("residency"), "--matcher", literal("choice"),
                                       "--matcher", literal("order"), "--sizes", "200", "--tasks", "60",
                                       "--seconds", "10", "--window", "1", "-o", str(out)])
    assert result.exit_code == 1, result.output      # a subject broke the hard filter: the table, then 1
    wrong = [line for line in result.output.splitlines() if ": WRONG: " in line]
    assert len(wrong) == 1 and wrong[0].startswith(literal("residency") + ": WRONG: ")
    assert re.search(r"\(§5; first: task \d+: bound to 'agent-\d+', which does not pass every predicate\)", wrong[0])
    held = next(line for line in result.output.splitlines() if line.startswith("decisions held to the hard filter"))
    for subject in ("a3fast (stdio protocol)", literal("choice"), literal("order")):
        assert f"{subject} 70" in held      # the 60 timed and the 10 before them
    extra = {b["extra_info"]["command"]: b["extra_info"] for b in orjson.loads(out.read_bytes())["benchmarks"]}
    assert extra[literal("residency")]["decisions_wrong"] >= 1
    assert extra[literal("choice")]["decisions_checked"] == 70 and extra[literal("choice")]["decisions_wrong"] == 0


def test_bench_reports_a_matcher_that_fails_without_stopping_the_others():
    result = CliRunner().invoke(main, ["bench", "--matcher", literal("crash"), "--sizes", "100", "--tasks", "5",
                                       "--seconds", "2"])
    assert result.exit_code == 1, result.output      # every subject's row, then 1 for the one stopped
    assert "stopped: the matcher exited with code 70" in result.output
    assert "a3fast (stdio protocol)" in result.output


def test_stdio_answers_a_batch_in_order_with_413_for_a_long_line():
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import serve_stdio_sync

    state = ServiceState(None)
    state.open()
    try:
        out = io.BytesIO()
        lines = [b'{"op": "list_agents", "id": 1}', b"x" * 200, b'{"op": "list_agents", "id": 2}',
                 b'{"op": "nope", "id": 3}']
        serve_stdio_sync(Operations(state), io.BytesIO(b"\n".join(lines)), out, max_line=100)
    finally:
        state.close()
    answers = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(a["id"], a["ok"], a.get("status")) for a in answers] == [
        (1, True, None), (None, False, 413), (2, True, None), (3, False, 400)]


def test_stdio_request_response_client_is_never_stalled():
    """One request, one answer, before the next is sent: the answer is flushed at once."""
    with MatcherProcess(A3FAST, timeout=10) as m:
        for k in range(5):
            assert m.request("list_agents")["names"] == []


def test_the_client_waits_out_a_timeout_longer_than_the_system_can_wait_at_once(tmp_path):
    """A timeout of years is waited in slices: one wait that long overflows (OverflowError)."""
    script = tmp_path / "echo_ok.py"
    script.write_text("import json, sys\nfor line in sys.stdin:\n"
                      "    print(json.dumps({'id': json.loads(line)['id'], 'ok': True}), flush=True)\n")
    with MatcherProcess(f"{sys.executable} {script}", timeout=1e9) as m:
        assert m.request("list_agents")["ok"] is True
    with pytest.raises(ValueError, match="timeout"):
        MatcherProcess(f"{sys.executable} {script}", timeout=float("nan"))


FUSSY_MATCHER = """
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r["op"] != "place":
        a = {"id": r["id"], "ok": True, "count": len(r.get("declarations", []))}
    elif "record" in r:
        a = {"id": r["id"], "ok": False, "status": 400,
             "problems": [{"path": "$.record", "expected": "no record field", "found": r["record"]}]}
    else:
        decisions = [{"seq": 1, "kind": "task.rejected", "content": {}}] * DECISIONS
        a = {"id": r["id"], "ok": True, "records": [{"seq": 0, "kind": "task.submitted", "content": {}}] + decisions}
    print(json.dumps(a), flush=True)
"""


def fussy(tmp_path, decisions: int) -> str:
    script = tmp_path / f"fussy{decisions}.py"
    script.write_text(FUSSY_MATCHER.replace("DECISIONS", str(decisions)))
    return f"{sys.executable} {script}"


def test_bench_asks_for_compact_records_and_asks_again_without_when_a_matcher_refuses_the_form(tmp_path):
    out = tmp_path / "bench.json"
    command = fussy(tmp_path, 1)
    result = CliRunner().invoke(main, ["bench", "--matcher", command, "--sizes", "100", "--tasks", "15",
                                       "--seconds", "5", "-o", str(out)])
    assert result.exit_code == 1, result.output      # it rejects every task: wrong, and said so
    assert "compact records asked for" in result.output and "stopped" not in result.output
    data = orjson.loads(out.read_bytes())
    assert {b["params"]["record"] for b in data["benchmarks"]} == {"compact"}
    assert all(b["stats"]["rounds"] == 15 for b in data["benchmarks"])


def test_bench_record_spec_asks_every_subject_for_spec_records():
    result = CliRunner().invoke(main, ["bench", "--matcher", literal(), "--sizes", "100", "--tasks", "5",
                                       "--seconds", "2", "--record", "spec"])
    assert result.exit_code == 0, result.output
    assert "spec records asked for" in result.output and "stopped" not in result.output


def test_bench_stops_a_matcher_whose_place_answer_holds_two_decisions(tmp_path):
    result = CliRunner().invoke(main, ["bench", "--matcher", fussy(tmp_path, 2), "--sizes", "100", "--tasks", "5",
                                       "--seconds", "2"])
    assert result.exit_code == 1, result.output
    assert "stopped: a place answer with 2 task.bound or task.rejected records (expected one)" in result.output


def _rejected(candidates, failed, reason):
    return [{"seq": 1, "kind": "task.submitted", "content": {"requirements": {"v": "1.0"}}},
            {"seq": 2, "kind": "task.rejected", "content": {
                "code": "unschedulable", "reason": reason, "requirements": {"v": "1.0"}, "candidates": candidates,
                "filters_failed": [{"candidate": c, "predicate": p} for c, p in failed]}}]


@pytest.mark.parametrize("reason, problem", [
    ("no eligible agent among 2 candidates: clearance:x.y failed by a, b", None),
    ("no eligible agent: clearance:x.y failed by a, b; tool:t failed by c", None),
    ("No eligible agent. clearance:x.y: failed by a and b.", None),
    ("ns/a, ns/b failed clearance:x.y", None),
    ("clearance:x.y:a,b", None),
    ("a:clearance:x.y; b:clearance:x.y", None),
    ("a/clearance:x.y, b/clearance:x.y", None),
    ("no eligible agent: capability:nothing.at-all/9", "the reason names no failed predicate"),
    ("no eligible agent: clearance:x.y failed by a", "the reason names no failed predicate"),
    ("no eligible agent: clearance:x.y failed by a, ab", "the reason names no failed predicate"),
    ("no eligible agent: clearance:x.y.z failed by a, b", "the reason names no failed predicate"),
    (None, "task.rejected has no reason text"),
])
def test_a_rejections_reason_names_a_failed_predicate_with_its_candidates(reason, problem):
    from a3fast.harness.checks import Expected, check_placement

    failed = [("a", "clearance:x.y"), ("b", "clearance:x.y"), ("c", "tool:t")]
    expected = Expected(frozenset({"clearance:x.y", "tool:t"}), frozenset(failed), frozenset())
    if reason is not None and "tool:t" not in reason:
        failed = failed[:2]
        expected = Expected(expected.predicates, frozenset(failed), frozenset())
    found = check_placement(_rejected([c for c, _ in failed], failed, reason), {c for c, _ in failed}, expected)
    assert [check for check, _ in found if check != "verifier"] == ([] if problem is None else ["reason"])
    assert problem is None or problem in dict(found)["reason"]


def test_a_candidate_or_a_failure_listed_twice_is_wrong():
    from a3fast.harness.checks import Expected, check_placement

    failed = [("a", "tool:t"), ("b", "tool:t")]
    expected = Expected(frozenset({"tool:t"}), frozenset(failed), frozenset())
    reason = "no eligible agent: tool:t failed by a, b"
    assert check_placement(_rejected(["a", "b"], failed, reason), {"a", "b"}, expected) == []
    twice = dict(check_placement(_rejected(["a", "b", "a"], failed + failed[:1], reason), {"a", "b"}, expected))
    assert twice["candidates"] == "a listed more than once"
    assert twice["filters_failed"] == "'a' failing 'tool:t' listed more than once"


# -- a matcher is another program: what it leaves running, writes and reads is bounded ---------------
def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _gone(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:       # a zombie left to init is gone too
        return stat.read().split(") ")[-1].startswith("Z")


def test_a_matcher_stopped_at_its_timeout_takes_what_it_started_with_it(tmp_path):
    # only the matcher itself was killed: its children ran on, one writing into its standard error
    import time

    marker = tmp_path / "child.pid"
    command = _script(tmp_path, "hangs.sh", f"sleep 300 &\necho $! > '{marker}'\nyes spam >&2 &\nsleep 301\n")
    m = MatcherProcess(command, timeout=1)
    with pytest.raises(MatcherFailure) as failed:
        m.request("place", requirements={})
    assert failed.value.kind == "timeout"
    m.close()
    child = int(marker.read_text())
    for _ in range(100):
        if _gone(child):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the matcher's child {child} runs on")
    assert len(m._stderr) <= 64 << 10          # its standard error's end only, not gigabytes


def test_a_matcher_that_does_not_read_its_input_is_stopped_at_the_timeout(tmp_path):
    # a write past the pipe's buffer waited without end
    m = MatcherProcess(_script(tmp_path, "deaf.sh", "sleep 300\n"), timeout=1)
    with pytest.raises(MatcherFailure) as failed:
        m.request("put_agents", declarations=[{"agent": {"name": "x" * 1000}}] * 1000)
    assert failed.value.kind == "timeout" and "could not send a put_agents request within 1 s" in failed.value.message
    m.close()


def test_a_matcher_that_closes_its_output_and_runs_on_is_a_crash_not_an_internal_error(tmp_path):
    m = MatcherProcess(_script(tmp_path, "closes.sh", "exec >&-\nsleep 300\n"), timeout=1)
    with pytest.raises(MatcherFailure) as failed:
        m.request("place", requirements={})
    assert failed.value.kind == "crashed" and "closed its output" in failed.value.message
    m.close()


def test_an_answer_without_end_is_malformed_in_bounded_memory(tmp_path, monkeypatch):
    from a3fast.harness import client

    monkeypatch.setattr(client, "MAX_ANSWER_BYTES", 4 << 20)
    m = MatcherProcess("cat /dev/zero", timeout=30)
    with pytest.raises(MatcherFailure) as failed:
        m.request("place", requirements={})
    assert failed.value.kind == "malformed" and f"longer than {4 << 20} bytes" in failed.value.message
    m.close()


def test_a_matcher_that_dies_after_a_worlds_last_answer_fails_that_world(tmp_path):
    # a crash right after answering was not seen, or was blamed on the next world
    proxy = tmp_path / "dies_after_place.py"
    proxy.write_text(f"""
import json, os, signal, subprocess, sys
inner = subprocess.Popen([{sys.executable!r}, "-m", "a3fast", "serve", "--stdio"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
for line in sys.stdin.buffer:
    inner.stdin.write(line); inner.stdin.flush()
    sys.stdout.buffer.write(inner.stdout.readline()); sys.stdout.buffer.flush()
    if json.loads(line).get("op") == "place":
        inner.kill(); os.kill(os.getpid(), signal.SIGSEGV)
""")
    result = conformance("--matcher", f"{sys.executable} {proxy}", "--worlds", "0", "-v", "--timeout", "20")
    assert result.exit_code == 1, result.output
    assert "ok " not in result.output
    assert "crashed: the matcher was ended by signal 11" in result.output


def test_a3fast_as_a_matcher_is_one_command_from_an_interpreter_whose_path_holds_a_space(monkeypatch):
    # split into words by the harness, "/my venv/bin/python -m a3fast ..." could not be started
    import shlex
    from a3fast.bench import matchers

    monkeypatch.setattr(matchers.sys, "executable", "/opt/my venv's/bin/python")
    assert shlex.split(matchers.a3fast_command()) == ["/opt/my venv's/bin/python", "-m", "a3fast", "serve", "--stdio"]


def test_an_interrupted_matcher_bench_stops_every_matcher_it_started(monkeypatch):
    # Ctrl-C reaches no matcher (each runs in a session of its own), and nothing closed them: a
    # matcher that does not end at its input's end ran on
    from a3fast.bench import matchers as bench_matchers

    started: list[MatcherProcess] = []
    original = MatcherProcess.__init__

    def recorded(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(MatcherProcess, "__init__", recorded)

    def interrupt(text: str) -> None:
        if text.startswith("placing"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench_matchers.run_matcher_bench([literal("hang")], agents=50, tasks=5, progress=interrupt)
    assert len(started) == 2 and all(m.proc.returncode is not None for m in started)
