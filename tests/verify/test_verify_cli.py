"""`a3fast verify` and `a3fast conformance`: results, the --json form, exit codes 0 / 1 / 2."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main

from factories import section_10_order_analyst, section_10_requirements, section_10_summariser

REQ = section_10_requirements()
ANALYST = section_10_order_analyst()
SUMMARISER = section_10_summariser()


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def jsonl(*records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


@pytest.fixture
def placed(tmp_path):
    """The trace `a3fast place` writes for a task the fleet can take."""
    fleet, req = tmp_path / "fleet.jsonl", tmp_path / "req.json"
    fleet.write_bytes(jsonl(ANALYST, SUMMARISER))
    req.write_bytes(orjson.dumps(REQ))
    result = run("place", "--fleet", str(fleet), "--requirements", str(req))
    assert result.exit_code == 0
    return result.stdout_bytes


def broken(trace: bytes) -> bytes:
    """The same trace with the chosen agent's clearances taken away."""
    records = [orjson.loads(line) for line in trace.splitlines()]
    records[-1]["content"]["scheduling"]["declaration"]["clearances"] = []
    return jsonl(*records)


def test_a_placed_trace_piped_into_verify_passes(placed):
    result = run("verify", "-", input=placed)
    assert result.exit_code == 0
    assert "valid" in result.output and "invalid" not in result.output


def test_an_unschedulable_trace_verifies_clean(tmp_path):
    fleet, req = tmp_path / "fleet.jsonl", tmp_path / "req.json"
    fleet.write_bytes(jsonl(SUMMARISER))
    req.write_bytes(orjson.dumps(REQ))
    placed = run("place", "--fleet", str(fleet), "--requirements", str(req))
    assert placed.exit_code == 1
    assert run("verify", input=placed.stdout_bytes).exit_code == 0


def test_an_invalid_trace_exits_1_and_names_each_error(placed):
    result = run("verify", "-", input=broken(placed))
    assert result.exit_code == 1
    assert "E_CLEARANCE_UNMET" in result.output and "clearance:orders.read" in result.output


def test_json_output_is_one_object_per_trace_per_line(tmp_path, placed):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_bytes(placed)
    bad.write_bytes(broken(placed))
    result = run("verify", "--json", str(good), str(bad))
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(o["path"], o["valid"]) for o in lines] == [(str(good), True), (str(bad), False)]
    [error] = lines[1]["errors"]
    assert error["code"] == "E_CLEARANCE_UNMET" and error["seq"] == 3 and error["line"] == 3
    assert error["message"]


def test_unreadable_input_exits_2_with_one_line_and_goes_on(tmp_path, placed):
    good = tmp_path / "good.jsonl"
    good.write_bytes(placed)
    result = CliRunner().invoke(main, ["verify", "--json", str(tmp_path / "missing.jsonl"), str(good)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "missing.jsonl: cannot read" in result.stderr
    missing, read = map(json.loads, result.stdout.splitlines())
    assert missing["valid"] is False and missing["records"] == 0 and read["valid"] is True


def test_a_trace_with_records_and_lines_that_break_the_format_is_invalid_not_unreadable():
    result = run("verify", "--json", input=b'{"seq": 1, "kind": "task.started", "content": {}}\nnot json\n')
    assert result.exit_code == 1
    assert [e["code"] for e in json.loads(result.output)["errors"]] == ["E_TRACE"]


@pytest.mark.parametrize("space", [b"\x0b", b"\x0c", b" \x0c "])
def test_a_line_of_vertical_tabs_or_form_feeds_is_not_json_and_no_blank_line(placed, space):
    lines = placed.splitlines(keepends=True)
    result = run("verify", "--json", input=b"".join(lines[:1]) + space + b"\n" + b"".join(lines[1:]))
    assert result.exit_code == 1
    assert [e["code"] for e in json.loads(result.output)["errors"]] == ["E_TRACE"]


@pytest.mark.parametrize("data", [b"not json\n", b"[1, 2]\n", b'{"a": 1}\n', b"[" * 1000 + b"]" * 1000])
def test_input_in_which_nothing_reads_as_a_record_is_unreadable(data):
    result = run("verify", input=data)
    assert result.exit_code == 2
    assert "unreadable: no records" in result.stderr and "valid" not in result.stdout


@pytest.mark.parametrize("data", [b"", b"\n\n"])
def test_an_empty_trace_says_no_records_and_is_unreadable(data):
    result = run("verify", "-", input=data)
    assert result.exit_code == 2
    assert "no records" in result.stderr and "valid" not in result.stdout


def test_an_empty_trace_still_gets_its_json_result_with_a_count_of_no_records():
    result = run("verify", "--json", input=b"")
    assert result.exit_code == 2
    # valid as §7 reads an empty trace (the conformance vector), and said to be unreadable
    assert json.loads(result.stdout) == {"path": "-", "valid": True, "records": 0, "errors": [], "warnings": [],
                                         "unreadable": "standard input: unreadable: no records (the input is empty)"}


def test_a_trace_that_cannot_be_read_gets_its_json_result_too(tmp_path, placed):
    # one result per trace named, in order, so a machine reading them can tell which one failed
    good = tmp_path / "t.jsonl"
    good.write_bytes(placed)
    result = run("verify", "--json", str(tmp_path / "absent.jsonl"), str(tmp_path), str(good))
    assert result.exit_code == 2
    absent, folder, read = map(json.loads, result.stdout.splitlines())
    assert absent == {"path": str(tmp_path / "absent.jsonl"), "valid": False, "records": 0, "errors": [],
                      "warnings": [], "unreadable": f"{tmp_path / 'absent.jsonl'}: cannot read: No such file or directory"}
    assert folder["valid"] is False and folder["unreadable"].endswith("cannot read: Is a directory")
    assert read["valid"] is True and read["records"] == 3 and "unreadable" not in read


def test_what_a_trace_quotes_cannot_redraw_the_terminal(tmp_path, placed):
    # a forged predicate holding control characters would erase the verdict and print another
    records = [orjson.loads(line) for line in placed.splitlines()]
    bound = next(r for r in records if r["kind"] == "task.bound")
    forged = "\r\x1b[2K\x1b[1A\r\x1b[2Kt.jsonl: valid: every check of §7 passed\u202e\x1b[8m"
    bound["content"]["scheduling"]["filters_passed"].append(forged)
    path = tmp_path / "t.jsonl"
    path.write_bytes(jsonl(*records))
    result = run("verify", str(path))
    assert result.exit_code == 1
    assert result.stdout.startswith(f"{path}: invalid: 1 error\n")
    assert not any(ch in result.stdout for ch in "\r\x1b\u202e")
    assert "\\r\\x1b[2K\\x1b[1A" in result.stdout and "\\u202e" in result.stdout
    assert len(result.stdout.splitlines()) == 2
    explained = run("explain", str(path))
    assert explained.exit_code == 0 and "\x1b" not in explained.stdout


def test_a_large_trace_on_a_terminal_gets_a_progress_bar(tmp_path, monkeypatch, placed):
    from a3fast.cli import verify_cmd

    path = tmp_path / "t.jsonl"
    path.write_bytes(placed)
    monkeypatch.setattr(verify_cmd, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with open(path, "rb") as fh:
        assert verify_cmd._verify_with_progress(fh, str(path)) == ([], 3)


# -- conformance -----------------------------------------------------------------------------------

VECTORS = str(Path(__file__).parents[2] / "vectors")


def test_conformance_on_a3fast_passes_every_vector():
    result = run("conformance", "--vectors", VECTORS)
    assert result.exit_code == 0
    passed, failed = result.output.strip().splitlines()[-1].split(", ")
    assert failed == "0 failed" and int(passed.split()[0]) >= 90


def test_conformance_runs_another_verifier_given_as_a_command(tmp_path):
    # a3fast itself, run as an outside program, through the --json form (one topic keeps it quick).
    suite = tmp_path / "capability-schema"
    suite.mkdir()
    for name in ("schema.json", "initial.json"):
        (suite / name).write_bytes((Path(VECTORS) / "capability-schema" / name).read_bytes())
    command = f"{sys.executable} -c 'from a3fast.cli import main; main()' verify --json -"
    result = run("conformance", "--vectors", str(tmp_path), "--verifier", command)
    assert result.output.strip().splitlines()[-1] == "9 passed, 0 failed", result.output


def test_conformance_names_the_failures_of_a_verifier_that_says_valid_to_everything():
    command = """echo '{"valid": true, "errors": []}'"""
    result = run("conformance", "--vectors", VECTORS, "--verifier", command)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert "FAIL initial.json:a capability not declared: valid: expected false, got true; " \
           "missing E_CAPABILITY_UNMET@3" in lines
    passed, failed = lines[-1].split(", ")
    assert int(failed.split()[0]) > 0 and int(passed.split()[0]) > 0


def test_conformance_without_vectors_is_bad_input(tmp_path):
    result = CliRunner().invoke(main, ["conformance", "--vectors", str(tmp_path)])
    assert result.exit_code == 2 and "no capability-schema/ vectors" in result.output


def test_conformance_without_its_schema_file_says_so_in_the_systems_words(tmp_path):
    (tmp_path / "capability-schema").mkdir()
    result = CliRunner().invoke(main, ["conformance", "--vectors", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output == (f"a3fast: {tmp_path / 'capability-schema' / 'schema.json'}: cannot read: "
                             f"No such file or directory\n")


def test_conformance_runs_the_matching_vectors_on_the_fleet(engine):
    result = run("conformance", "--vectors", VECTORS, "--suite", "matching", "--engine", engine)
    assert result.exit_code == 0 and result.output.strip().endswith(", 0 failed")


def test_the_demo_report_ends_with_the_verification_of_its_trace(tmp_path):
    from a3fast.verify import verify_file

    trace = tmp_path / "demo.jsonl"
    result = run("demo", "--agents", "60", "--tasks", "25", "--trace", str(trace))
    assert result.exit_code == 0
    assert result.output.strip().splitlines()[-1].startswith("valid")
    assert verify_file(trace) == []


def test_a_file_name_that_is_not_utf8_is_shown_escaped_in_every_answer(tmp_path, placed):
    # the byte, \xff, as other messages show it; never a crash of the JSON writer (exit 3)
    empty = os.fsdecode(bytes(tmp_path) + b"/empty\xff.jsonl")
    good = os.fsdecode(bytes(tmp_path) + b"/v\xff.jsonl")
    Path(empty).write_bytes(b"")
    Path(good).write_bytes(placed)
    result = run("verify", "--json", empty, good)
    assert result.exit_code == 2
    first, second = map(json.loads, result.stdout.splitlines())
    assert first["path"].endswith("empty\\xff.jsonl") and first["unreadable"].endswith(
        "empty\\xff.jsonl: unreadable: no records (the input is empty)")
    assert second["valid"] is True
    text = run("verify", good)
    assert text.exit_code == 0 and text.stdout.startswith(f"{tmp_path}/v\\xff.jsonl: valid")
    explained = run("explain", empty)
    assert explained.exit_code == 2 and "empty\\xff.jsonl" in explained.stderr


def test_a_file_name_holding_control_characters_stays_one_escaped_line(tmp_path):
    empty = tmp_path / "bad\nname\x1b[31m.jsonl"
    empty.write_bytes(b"")
    result = run("verify", str(empty))
    assert result.exit_code == 2
    assert result.stderr == f"a3fast: {tmp_path}/bad\\nname\\x1b[31m.jsonl: unreadable: no records (the input is empty)\n"

