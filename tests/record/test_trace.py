"""Traces (docs/design.md, reading 7): the append-only writer and the streaming reader."""
from __future__ import annotations

import io
import os

import msgspec
import orjson
import pytest

import a3fast

from a3fast.trace import (TraceContentError, TraceProblem, TraceRecord, TraceWriter, read_lines,
                          read_trace, read_values)


def problems(items):
    return [i for i in items if isinstance(i, TraceProblem)]


def records(items):
    return [i for i in items if isinstance(i, TraceRecord)]


# -- writing --------------------------------------------------------------------------------------

def test_writer_appends_one_record_per_line_with_increasing_seq(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        assert w.append("task.submitted", {"requirements": {}}) == 1
        assert w.append("task.admitted", content_json=b'{"agent":{"name":"a","namespace":"n"}}') == 2
    lines = path.read_bytes().splitlines()
    assert [orjson.loads(line)["seq"] for line in lines] == [1, 2]
    assert orjson.loads(lines[1])["content"]["agent"]["name"] == "a"


def test_writer_flushes_each_record_before_returning(tmp_path):
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path)
    w.append("task.submitted", {})
    assert path.read_bytes().count(b"\n") == 1  # readable while the writer is still open
    w.close()


def test_writer_appends_to_an_existing_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.append("a", {})
    with TraceWriter(path, start_seq=2) as w:
        w.append("b", {})
    assert [r.seq for r in records(read_trace(path))] == [1, 2]


def test_writer_fsyncs_each_record_when_asked(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    with TraceWriter(tmp_path / "t.jsonl", fsync=True) as w:
        w.append("a", {})
        w.append("b", {})
    assert len(synced) == 2


def test_writer_on_a_caller_stream_leaves_it_open():
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        w.append("a", {"x": 1})
    assert not buf.closed and buf.getvalue().endswith(b"\n")


# -- reading --------------------------------------------------------------------------------------

def test_reader_reads_json_lines_and_skips_blank_lines():
    data = b'{"seq":1,"kind":"a","content":{}}\n\n  \n{"seq":2,"kind":"b","content":{"x":[1]}}\n'
    items = list(read_trace(data))
    assert [(r.seq, r.kind, r.line) for r in items] == [(1, "a", 1), (2, "b", 4)]
    assert items[1].content == {"x": [1]}


def test_reader_reads_a_json_array_of_records():
    data = b'\n [{"seq":1,"kind":"a","content":{}}, {"seq":2,"kind":"b","content":{}}]'
    items = list(read_trace(data))
    assert [(r.seq, r.line, r.index) for r in items] == [(1, None, 1), (2, None, 2)]


def test_reader_keeps_other_fields_out_of_the_way():
    [record] = read_trace(b'{"seq":1,"kind":"a","content":{},"at":"2025-01-01"}\n')
    assert record.to_dict() == {"seq": 1, "kind": "a", "content": {}}


@pytest.mark.parametrize("line, seq, words", [
    (b"{not json", None, "not JSON"),
    (b"42", None, "expected a record"),
    (b'{"kind":"a","content":{}}', None, "no 'seq'"),
    (b'{"seq":2,"content":{}}', 2, "no 'kind'"),
    (b'{"seq":2,"kind":"a"}', 2, "no 'content'"),
    (b'{"seq":"2","kind":"a","content":{}}', None, "seq must be an integer"),
    (b'{"seq":2.0,"kind":"a","content":{}}', None, "seq must be an integer"),
    (b'{"seq":true,"kind":"a","content":{}}', None, "seq must be an integer"),
    (b'{"seq":2,"kind":7,"content":{}}', 2, "kind must be a string"),
    (b'{"seq":2,"kind":"a","content":null}', 2, "content must be an object"),
    (b'{"seq":1,"kind":"a","content":{}}', 1, "does not increase"),
])
def test_reader_reports_a_broken_line_with_its_line_number_and_goes_on(line, seq, words):
    data = b'{"seq":1,"kind":"a","content":{}}\n' + line + b'\n{"seq":3,"kind":"c","content":{}}\n'
    items = list(read_trace(data))
    [problem] = problems(items)
    assert (problem.line, problem.seq) == (2, seq) and words in problem.message
    assert [r.seq for r in records(items)][-1] == 3


@pytest.mark.parametrize("line, column", [
    (b'{"seq":2,"kind":"a","content":{"a":1,,}}', "expected a string key: column 38 (char 37)"),
    (b'{"seq":2,"kind":"a","content":{"a":"\xff"}}', "the byte 0xff at column 37 (byte 36)"),
])
def test_a_line_that_is_not_json_is_placed_at_its_line_and_column(line, column):
    # the problem names the trace's line; the decoder counts within that line alone, so its own
    # "line 1" would point at the trace's first line
    data = b'{"seq":1,"kind":"a","content":{}}\n' + line + b'\n'
    [problem] = problems(list(read_trace(data)))
    assert problem.line == 2 and problem.message.endswith(column) and "line 1" not in problem.message


def test_reader_reports_an_array_that_is_not_json():
    [problem] = list(read_trace(b'[{"seq":1,'))
    assert isinstance(problem, TraceProblem) and "not a JSON array" in problem.message


def test_reader_streams_json_lines_lazily():
    consumed = []

    def lines():
        for i in range(1, 1_000_000):
            consumed.append(i)
            yield b'{"seq":%d,"kind":"a","content":{}}\n' % i

    items = read_lines(lines())
    assert next(items).seq == 1 and next(items).seq == 2
    assert len(consumed) == 2


def test_reader_reports_progress_in_bytes(tmp_path):
    data = b'{"seq":1,"kind":"a","content":{}}\n{"seq":2,"kind":"b","content":{}}\n'
    seen = []
    list(read_trace(io.BytesIO(data), progress=seen.append))
    assert sum(seen) == len(data)


def test_content_that_no_decoder_can_hold_is_a_trace_problem_in_its_place():
    [problem, record] = read_trace(b'{"seq":1,"kind":"a","content":{"n":1e400}}\n'
                                   b'{"seq":2,"kind":"a","content":{}}\n')
    assert isinstance(problem, TraceProblem) and problem.line == 1
    # named as orjson names it, with where: msgspec's own words are "Number out of range"
    assert "infinity" in problem.message or "out of range" in problem.message, problem.message
    assert isinstance(record, TraceRecord) and record.seq == 2


class Content(msgspec.Struct):
    x: int


class Typed(msgspec.Struct):
    seq: int
    kind: str
    content: Content


def test_typed_decoding_changes_speed_not_results():
    data = (b'{"seq":1,"kind":"t","content":{"x":1}}\n'
            b'{"seq":2,"kind":"t","content":{"x":"not an int"}}\n'
            b'{"seq":2,"kind":"t","content":{"x":3}}\n'
            b'{"seq":4,"kind":"u","content":{"x":4}}\n')
    typed = list(read_lines(data.splitlines(), typed={"t": msgspec.json.Decoder(Typed)}))
    plain = list(read_lines(data.splitlines()))
    assert [type(i) for i in typed] == [type(i) for i in plain]
    assert [(i.line, i.seq) for i in typed] == [(i.line, i.seq) for i in plain]
    assert typed[0].typed == Content(1) and typed[1].typed is None
    assert [r.content for r in records(typed)] == [r.content for r in records(plain)]


def test_values_are_held_to_the_same_format():
    items = list(read_values([{"seq": 1, "kind": "a", "content": {}}, "record", {"seq": 1, "kind": "b", "content": {}}]))
    assert [type(i).__name__ for i in items] == ["TraceRecord", "TraceProblem", "TraceProblem", "TraceRecord"]


def test_placement_lines_refuse_a_seq_no_record_can_carry():
    from a3fast.trace import placement_lines

    fleet = a3fast.Fleet()
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    p = fleet.place({})
    for seq, error, message in (("x", TypeError, "expected an integer"), (True, TypeError, "expected an integer"),
                                (2**64 - 2, ValueError, "this write would number one 18446744073709551616"),
                                (-2**63 - 1, ValueError, "expected an integer from -2\\^63")):
        with pytest.raises(error, match=f"^seq: .*{message}"):
            placement_lines(p, seq)
    assert placement_lines(p, 2**64 - 3)[1] == 3


def test_append_refuses_content_json_that_would_break_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    with a3fast.TraceWriter(path) as writer:
        for broken in (b'{"a":\n1}', bytearray(b'{"a":\n1}'), memoryview(b'{"a":\n1}')):
            with pytest.raises(ValueError, match="a JSON object on one line"):
                writer.append("x.y", content_json=broken)
        writer.append("x.y", content_json=b'{"a":1}')
    assert path.read_bytes() == b'{"seq":1,"kind":"x.y","content":{"a":1}}\n'
