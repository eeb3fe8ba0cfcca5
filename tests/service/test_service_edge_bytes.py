"""The two byte passes at the service's edge, on both engines: a request line judged plainly within
the document rule from its text alone, and an answer's record lines framed as one JSON array. The
compiled ones (`_ingest`) are held to the pure definitions (`_ingest_pure`) and to what the rule and
JSON say."""
from __future__ import annotations

import re

import orjson
from hypothesis import given, strategies as st

from a3fast.engines import ingest_module

_BYTES = st.lists(st.sampled_from([b"1", b"9", b"0", b"/", b":", b"a", b"[", b"{", b"]", b'"', b"\n",
                                   b"\xd9", b"\xff", b" "]), max_size=80).map(b"".join)


def test_plainly_within_counts_opening_brackets_and_refuses_19_digits_in_a_row(engine):
    plainly_within = ingest_module(engine).plainly_within
    assert plainly_within(b"", 0) is True
    assert plainly_within(b"[{", 2) is True and plainly_within(b"[{[", 2) is False
    assert plainly_within(b"]}", 0) is True              # closing brackets are not counted
    assert plainly_within(b"1" * 18, 0) is True and plainly_within(b"1" * 19, 0) is False
    assert plainly_within(b"1" * 18 + b"a" + b"1" * 18, 0) is True
    assert plainly_within(b"[" * 200 + b"1" * 19, 1000) is False
    assert plainly_within(b'{"id":' + b"9" * 30 + b"}", 128) is False


def _expected(data: bytes, limit: int) -> bool:
    return data.count(b"[") + data.count(b"{") <= limit and re.search(rb"[0-9]{19}", data) is None


@given(st.one_of(_BYTES, st.binary(max_size=200)), st.integers(0, 40))
def test_plainly_within_is_the_rule_s_reading_of_the_text(engine, data, limit):
    assert ingest_module(engine).plainly_within(data, limit) is _expected(data, limit)


def test_plainly_within_tells_every_byte_value_apart_wherever_it_lies_in_a_word(engine):
    # the compiled pass reads eight bytes at a time: each value, at each place in a word and in
    # the tail, is a digit, a bracket or neither exactly as it is a byte at a time (0xB0-0xB9 and
    # 0xDB/0xFB share their low seven bits with digits and brackets)
    plainly_within = ingest_module(engine).plainly_within
    for value in range(256):
        for at in range(12):
            for digits in (b"", b"1" * 18):
                data = bytearray(b"a" * 12 + digits)
                data[at] = value
                data = bytes(data)
                for limit in (0, 1):
                    assert plainly_within(data, limit) is _expected(data, limit), (value, at, digits, limit)
    # a run of 19 that crosses the boundary of two words, or ends in the tail
    for start in range(17):
        data = b"x" * start + b"7" * 19 + b"x" * 3
        assert plainly_within(data, 10) is False
        assert plainly_within(data.replace(b"7", b"x", 1), 10) is True


def test_record_lines_become_one_json_array_without_their_final_newlines(engine):
    lines_array = ingest_module(engine).lines_array
    assert lines_array(b"") == b"[]"
    assert lines_array(b"\n\n") == b"[]"
    assert lines_array(b'{"seq":1}\n') == b'[{"seq":1}]'
    assert lines_array(b'{"seq":1}\n{"seq":2}\n') == b'[{"seq":1},{"seq":2}]'
    assert lines_array(b'{"seq":1}\n{"seq":2}') == b'[{"seq":1},{"seq":2}]'
    records = [{"seq": i, "kind": "task.submitted", "content": {"text": "a\\nb" * i}} for i in range(40)]
    text = b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert orjson.loads(lines_array(text)) == records


@given(_BYTES)
def test_record_lines_framed_alike_on_both_engines(engine, data):
    assert ingest_module(engine).lines_array(data) == b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"


class _Bytes(bytes):
    pass


@given(_BYTES, st.integers(0, 40))
def test_other_values_are_judged_alike_on_both_engines(engine, data, limit):
    # a bytes subclass or a bytearray is never vouched for by the definition (the careful path
    # reads it), text is judged by its own test; the records array reads any bytes-like object
    from a3fast import _ingest_pure

    edge = ingest_module(engine)
    for shaped in (_Bytes(data), bytearray(data), data.decode("latin-1")):
        assert edge.plainly_within(shaped, limit) is _ingest_pure.plainly_within(shaped, limit)
    for shaped in (_Bytes(data), bytearray(data)):
        assert edge.lines_array(shaped) == b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"


def test_the_records_array_refuses_text(engine):
    import pytest

    with pytest.raises(TypeError):
        ingest_module(engine).lines_array("{}\n")


@given(_BYTES, st.binary(max_size=12), st.binary(max_size=12))
def test_records_framed_into_an_answer_line_alike_on_both_engines(engine, data, prefix, suffix):
    framed = ingest_module(engine).lines_array(data, prefix, suffix)
    assert framed == prefix + b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]" + suffix


def test_an_answer_line_frames_its_records_as_the_json_it_stands_for(engine):
    lines_array = ingest_module(engine).lines_array
    records = [{"seq": 1, "kind": "task.submitted", "content": {}}, {"seq": 2, "kind": "task.rejected", "content": {}}]
    text = b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert orjson.loads(lines_array(text, b'{"id":7,"ok":true,"records":', b"}")) == {
        "id": 7, "ok": True, "records": records}
    import pytest

    with pytest.raises(TypeError):
        lines_array(text, "not bytes", b"}")


def test_the_records_array_refuses_what_is_not_bytes_like(engine):
    import pytest

    for value in (3, None, ["{}"]):
        with pytest.raises((TypeError, AttributeError)):
            ingest_module(engine).lines_array(value)
