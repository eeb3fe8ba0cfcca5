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
