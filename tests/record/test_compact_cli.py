"""`a3fast encode`, `decode` and `explain` on hostile traces: one line per problem naming the line,
the seq and the member, exit 2, no traceback, and an existing output file left as it was."""
import copy
import subprocess
import sys

import msgspec
import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.record.compact import KEY

from test_compact_hostile import COMPACT, SPEC

OLD_OUTPUT = b"an earlier output, to be left alone\n"


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)


def write_trace(path, records):
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    return path


def first(records, kind):
    """The index of the first spec record of `kind` with something in its lists."""
    return next(i for i, r in enumerate(records)
                if r["kind"] == kind and (kind == "task.bound" or r["content"].get("filters_failed")))


def compact_with(select, change):
    """The compact trace with one change to the compact member of the first record `select` takes;
    that record's seq and line."""
    records = copy.deepcopy(COMPACT)
    index = next(i for i, r in enumerate(records) if KEY in r["content"] and select(r))
    change(records[index]["content"][KEY])
    return records, records[index]["seq"], index + 1


def bound(record):
    return record["kind"] == "task.bound"


def rejected(record):
    return record["kind"] == "task.rejected"


def first_snapshot(record):
    fleet = record["content"][KEY]["fleet"]
    return isinstance(fleet, dict) and "names" in fleet


def based_snapshot(record):
    fleet = record["content"][KEY]["fleet"]
    return isinstance(fleet, dict) and "base" in fleet


def set_columns(member, value):
    member["scores"]["columns"] = value


def refused(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


BROKEN_COMPACT = {
    "rest-string": (bound, lambda m: m.update(rest="x"), ".rest", "found string 'x'"),
    "rest-huge-float": (bound, lambda m: m.update(rest=1e308), ".rest", "found 1e+308"),
    "columns-float": (bound, lambda m: set_columns(m, 1.5), ".scores.columns", "found 1.5"),
    "column-short": (bound, lambda m: m["scores"]["columns"][0].__setitem__(2, "AAAA"),
                     ".scores.columns[0][2]", "8-byte values"),
    "format-true": (bound, lambda m: m.update(format=True), ".format", "unknown compact format true"),
    "names-added-string": (based_snapshot, lambda m: m["fleet"].update(names_added="abc"),
                           ".fleet.names_added", "expected an array of agent names"),
    "name-number": (first_snapshot, lambda m: m["fleet"]["names"].__setitem__(1, 7), ".fleet.names[1]",
                    "expected an agent name"),
    "failed-number": (rejected, lambda m: m["failed"].__setitem__(0, 5), ".failed[0]", "found 5"),
    "unknown-member": (rejected, lambda m: m.update(scores={}), ".scores", "not a member"),
}


@pytest.fixture(params=sorted(BROKEN_COMPACT))
def broken_compact(request, tmp_path):
    select, change, member, what = BROKEN_COMPACT[request.param]
    records, seq, line = compact_with(select, change)
    return write_trace(tmp_path / "broken.jsonl", records), seq, line, member, what


def test_decode_names_the_line_seq_and_member_of_a_broken_compact_record(broken_compact, tmp_path):
    trace, seq, line, member, what = broken_compact
    out = tmp_path / "out.jsonl"
    out.write_bytes(OLD_OUTPUT)
    result = run("decode", trace, "--out", out)
    refused(result, f"{trace}: line {line}: seq {seq}: $.content['a3fast.compact']{member}", what)
    assert out.read_bytes() == OLD_OUTPUT


def test_explain_names_the_line_seq_and_member_of_a_broken_compact_record(broken_compact):
    trace, seq, line, member, what = broken_compact
    refused(run("explain", trace), f"{trace}: line {line}: seq {seq}: $.content['a3fast.compact']{member}", what)


BROKEN_SPEC = {
    "candidates-string": ("task.bound", lambda c: c["scheduling"].update(candidates="x"),
                          "$.content.scheduling.candidates", "expected an array of agent names"),
    "predicate-number": ("task.rejected", lambda c: c["filters_failed"][0].update(predicate=5),
                         "$.content.filters_failed[0].predicate", "expected a string, found 5"),
    "score-entry-number": ("task.bound", lambda c: c["scheduling"]["scores"].update(x=5),
                           "$.content.scheduling.scores.x", "found 5"),
    "chosen-name-missing": ("task.bound", lambda c: c["scheduling"]["declaration"]["agent"].pop("name"),
                            "$.content.scheduling.declaration.agent.name", "found null"),
    "scheduling-list": ("task.bound", lambda c: c.update(scheduling=[]),
                        "$.content.scheduling", "expected the scheduling object"),
    "reason-number": ("task.rejected", lambda c: c.update(reason=1e308), "$.content.reason", "found 1e+308"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_SPEC))
def test_explain_names_the_seq_and_member_of_a_spec_record_it_cannot_read(case, tmp_path):
    kind, change, member, what = BROKEN_SPEC[case]
    records = copy.deepcopy(SPEC)
    index = first(records, kind)
    change(records[index]["content"])
    trace = write_trace(tmp_path / "spec.jsonl", records)
    refused(run("explain", trace), f"{trace}: seq {records[index]['seq']}: {member}", what)


def test_explain_refuses_a_score_beyond_the_document_rule(tmp_path):
    records = copy.deepcopy(SPEC)
    index = first(records, "task.bound")
    scheduling = records[index]["content"]["scheduling"]
    chosen = scheduling["declaration"]["agent"]["name"]
    scheduling["scores"][chosen]["total"] = 10**400  # a JSON integer beyond the rule's 64 bits
    trace = write_trace(tmp_path / "spec.jsonl", records)
    result = run("explain", trace, "--seq", records[index]["seq"])
    refused(result, f"{trace}: line {index + 1}: the record breaks the document rule")


def test_explain_all_failed_names_requirements_that_do_not_parse(tmp_path):
    records = copy.deepcopy(SPEC)
    index = first(records, "task.bound")
    records[index]["content"]["scheduling"]["requirements"] = {"capabilities": 5}
    trace = write_trace(tmp_path / "spec.jsonl", records)
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(orjson.dumps(records[index]["content"]["scheduling"]["declaration"]) + b"\n")
    result = run("explain", trace, "--seq", records[index]["seq"], "--all-failed", "--fleet", fleet)
    refused(result, f"{trace}: seq {records[index]['seq']}: $.content.scheduling.requirements.capabilities")


def test_encode_keeps_a_rejection_with_a_predicate_that_is_not_a_string_verbatim(tmp_path):
    records = copy.deepcopy(SPEC)
    index = first(records, "task.rejected")
    records[index]["content"]["filters_failed"][0]["predicate"] = {"not": "a string"}
    trace = write_trace(tmp_path / "spec.jsonl", records)
    result = run("encode", trace)
    assert result.exit_code == 0, result.output
    lines = result.stdout_bytes.splitlines()
    assert lines[index] == orjson.dumps(records[index])
    assert sum(KEY.encode() in line for line in lines) >= 1  # the other placements are still encoded


def test_encode_then_decode_keeps_extra_record_members_in_order(tmp_path):
    records = [{"trace": "t1", **r, "at": r["seq"] * 0.5} for r in copy.deepcopy(SPEC)]
    trace = write_trace(tmp_path / "spec.jsonl", records)
    compact, decoded = tmp_path / "compact.jsonl", tmp_path / "decoded.jsonl"
    assert run("encode", trace, "--out", compact).exit_code == 0
    assert all(list(r) == ["trace", "seq", "kind", "content", "at"]
               for r in map(orjson.loads, compact.read_bytes().splitlines()))
    assert KEY.encode() in compact.read_bytes()
    assert run("decode", compact, "--out", decoded).exit_code == 0
    assert decoded.read_bytes() == trace.read_bytes()


@pytest.mark.parametrize("command", ["encode", "decode"])
def test_an_integer_beyond_64_bits_is_refused_by_the_document_rule(command):
    line = b'{"seq":1,"kind":"task.submitted","content":{"x":18446744073709551616}}\n'
    refused(run(command, "-", input=line), "-: line 1: the record breaks the document rule")


def test_encode_from_standard_input_in_a_real_process_has_no_traceback():
    line = b'{"seq":1,"kind":"task.submitted","content":{"x":18446744073709551616},"extra":true}\n'
    done = subprocess.run([sys.executable, "-m", "a3fast", "encode", "-"], input=line, capture_output=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.count(b"\n") == 1 and b"document rule" in done.stderr and b"Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["encode", "decode"])
def test_a_trace_that_breaks_its_format_is_refused_and_nothing_is_replaced(command, tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(b'{"seq": 2, "kind": "task.submitted", "content": {}}\n'
                      b'{"seq": 1, "kind": "task.submitted", "content": {}}\n'
                      b'{"seq": 3, "kind": 5, "content": {}}\n'
                      b"not json\n")
    out = tmp_path / "out.jsonl"
    out.write_bytes(OLD_OUTPUT)
    result = run(command, trace, "--out", out)
    refused(result, f"{trace}: line 2: seq 1 does not increase", f"{trace}: line 3: the record's kind must be a string",
            f"{trace}: line 4: not JSON")
    assert out.read_bytes() == OLD_OUTPUT


@pytest.mark.parametrize("command", ["encode", "decode"])
def test_a_traces_problems_are_listed_in_the_order_of_its_lines(command, tmp_path):
    # a line that is not JSON is found while the lines are framed, before the records are read:
    # it was listed first, wherever it was
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(b'{"seq": 1, "kind": "task.submitted", "content": {}}\n{"seq": "x"}\nnot json\n'
                      b'{"seq": 4, "kind": 5, "content": {}}\n')
    result = run(command, trace)
    refused(result)
    assert [line.split(": ")[2] for line in result.stderr.splitlines()] == ["line 2", "line 3", "line 4"]


@pytest.mark.parametrize("command", ["encode", "decode"])
def test_a_lone_surrogate_is_named_as_such(command, tmp_path):
    # never "Input data was truncated" for a whole line, as the JSON library first reading it says
    trace = tmp_path / "sur.jsonl"
    trace.write_bytes(b'{"seq": 1, "kind": "task.submitted", "content": {"goal": "\\ud800x"}}\n')
    result = run(command, trace)
    refused(result, f"{trace}: line 1: not JSON: no low surrogate in string: column")
    assert "truncated" not in result.stderr


def test_decode_reads_a_json_array_of_records(tmp_path):
    trace = tmp_path / "array.json"
    trace.write_bytes(orjson.dumps(COMPACT))
    result = run("decode", trace)
    assert result.exit_code == 0
    assert [orjson.loads(x) for x in result.stdout_bytes.splitlines()] == SPEC
    trace.write_bytes(b'[{"seq": 1, "kind": "task.submitted", "content": 5}]')
    refused(run("decode", trace), f"{trace}: record 1: the record's content must be an object")
