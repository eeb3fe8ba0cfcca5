"""The conformance runner (§9): reading another verifier's answer and saying why a vector failed."""
from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.conformance import CommandNotStarted, Vector, run_a3fast, run_command, trace_bytes

VECTOR = Vector(file="t.json", description="a capability not declared",
                trace=[{"seq": 1, "kind": "task.note", "content": {}}], valid=False,
                errors=frozenset({("E_CAPABILITY_UNMET", 3)}))


def answer(text: str):
    """A verifier that prints `text` whatever it reads."""
    return run_command([sys.executable, "-c", f"import sys; sys.stdin.read(); print({text!r})"])


def test_a_list_trace_is_written_as_json_lines_and_a_string_as_is():
    assert trace_bytes([{"seq": 1}, 42]) == b'{"seq":1}\n42\n'
    assert trace_bytes("{not json\n") == b"{not json\n"


def test_an_answer_with_the_expected_errors_passes():
    outcome = answer('{"valid": false, "errors": [{"code": "E_CAPABILITY_UNMET", "seq": 3, "message": "m"}]}')(VECTOR)
    assert outcome.passed and outcome.explain() == ""


def test_a_failure_names_what_was_missing_and_what_was_unexpected():
    outcome = answer('{"valid": false, "errors": [{"code": "E_EXPLANATION", "seq": 3}]}')(VECTOR)
    assert not outcome.passed
    assert outcome.explain() == "missing E_CAPABILITY_UNMET@3; unexpected E_EXPLANATION@3"


@pytest.mark.parametrize("printed, words", [
    ("nothing useful", "printed no JSON object"),
    ('{"valid": "no", "errors": []}', "lacks a boolean valid"),
    ('{"valid": false, "errors": [{"seq": 3}]}', "lacks a code"),
    ('{"valid": false, "errors": [{"code": "E_X", "seq": "3"}]}', "not an integer"),
])
def test_an_answer_that_cannot_be_read_is_a_failure_that_says_why(printed, words):
    outcome = answer(printed)(VECTOR)
    assert not outcome.passed and words in outcome.explain()


def test_a_verifier_that_cannot_be_started_is_not_a_failed_vector(tmp_path):
    with pytest.raises(CommandNotStarted, match="cannot start .*no-such-verifier"):
        run_command(str(tmp_path / "no-such-verifier"))(VECTOR)


def test_conformance_with_a_verifier_that_cannot_be_started_is_bad_input(tmp_path):
    result = CliRunner().invoke(main, ["conformance", "--verifier", str(tmp_path / "no-such-verifier")])
    assert result.exit_code == 2, result.output
    assert "--verifier: cannot start" in result.output and "no-such-verifier" in result.output
    assert "failed" not in result.output and "Traceback" not in result.output


def test_a3fast_reports_its_own_findings_for_a_vector():
    outcome = run_a3fast(VECTOR)
    assert outcome.valid is True and not outcome.passed
    assert outcome.explain() == "valid: expected false, got true; missing E_CAPABILITY_UNMET@3"


PASSING = '{"valid": false, "errors": [{"code": "E_CAPABILITY_UNMET", "seq": 3}]}'


def shell_verifier(tmp_path, body: str) -> str:
    """A verifier script in a folder whose name holds a space and shell characters."""
    folder = tmp_path / "a verifier's; $(folder)"
    folder.mkdir(exist_ok=True)
    script = folder / "verify.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\n" + body)
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("ending, said", [
    ("kill -SEGV $$\n", "the verifier was ended by signal 11, not 0, 1 or 2"),
    ("exit 3\n", "the verifier exited 3, not 0, 1 or 2"),
])
def test_a_result_a_verifier_did_not_end_well_after_fails_its_vector(tmp_path, ending, said):
    # the result was read whatever became of the verifier: one that crashed after printing passed
    script = shell_verifier(tmp_path, f"echo '{PASSING}'\n{ending}")
    outcome = run_command([script])(VECTOR)
    assert not outcome.passed and said in outcome.explain()
    for status in (0, 1, 2):           # `a3fast verify`'s own exits keep their result
        script = shell_verifier(tmp_path, f"echo '{PASSING}'\nexit {status}\n")
        assert run_command([script])(VECTOR).passed


def test_a_verifier_that_prints_without_end_fails_its_vector_in_bounded_memory(tmp_path):
    import resource

    script = shell_verifier(tmp_path, "yes 0123456789abcdef\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = run_command([script], timeout=60)(VECTOR)
    assert not outcome.passed and f"printed more than {16 << 20} bytes" in outcome.explain()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000       # KiB


def test_a_verifier_past_its_time_is_ended_with_what_it_started(tmp_path):
    import os
    import time

    marker = tmp_path / "child.pid"
    script = shell_verifier(tmp_path, f"sleep 300 &\necho $! > '{marker}'\nwait\n")
    started = time.monotonic()
    outcome = run_command([script], timeout=1)(VECTOR)
    assert not outcome.passed and "ran past the timeout of 1 s" in outcome.explain()
    assert time.monotonic() - started < 30
    child = int(marker.read_text())
    for _ in range(100):               # SIGKILL is delivered at once; the reaping may lag a little
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as stat:      # a zombie waiting for init is gone too
            if stat.read().split(") ")[-1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the verifier's child {child} runs on")
