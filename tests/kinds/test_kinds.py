"""a3fast.kinds: what kind of file an input is, told by parsing its first documents."""
from __future__ import annotations

import io

import orjson
import pytest

from a3fast import kinds, snapshot
from a3fast.durable import journal
from a3fast.framing import Pushback
from a3fast.record.compact import KEY

from factories import declaration, requirements


def lines(*documents) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in documents)


SUBMITTED = {"seq": 1, "kind": "task.submitted", "content": {"requirements": {}}}
BOUND = {"seq": 2, "kind": "task.bound", "content": {"scheduling": {}}}
COMPACT_BOUND = {"seq": 2, "kind": "task.bound", "content": {KEY: {}}}


def test_the_marks_of_a3fasts_files_are_their_owners():
    assert kinds._COMPACT_KEY == KEY
    assert kinds._SNAPSHOT_MAGIC == snapshot.MAGIC
    assert kinds._JOURNAL_MAGIC == journal.MAGIC


@pytest.mark.parametrize("data,kind", [
    (lines(declaration("a")), kinds.DECLARATIONS),
    (orjson.dumps([declaration("a"), declaration("b")]), kinds.DECLARATIONS),
    (orjson.dumps(requirements(capabilities=["x.y/1"]), option=orjson.OPT_INDENT_2), kinds.REQUIREMENTS),
    (lines(SUBMITTED, BOUND), kinds.SPEC_TRACE),
    (lines(SUBMITTED, COMPACT_BOUND), kinds.COMPACT_TRACE),
    (lines(SUBMITTED), kinds.TRACE),
    (orjson.dumps([{"description": "d", "trace": [], "expected": {}}]), kinds.VECTORS),
    (orjson.dumps([{"description": "d", "fleet": [], "requirements": {}, "expected": {}}]), kinds.MATCHING_VECTORS),
    (b"\x89A3FLEET\x01\x00\x00\x00", kinds.SNAPSHOT),
    (b"A3J1\x00\x00", kinds.JOURNAL),
    (b"", kinds.EMPTY), (b" \n\n", kinds.EMPTY), (b"[]", kinds.EMPTY),
])
def test_each_kind_a3fast_writes_is_told(data, kind):
    assert kinds.sniff(data) is kind


@pytest.mark.parametrize("data", [
    orjson.dumps({"name": "card", "skills": []}),               # an A2A card
    orjson.dumps({"tools": [{"name": "t", "inputSchema": {}}]}),  # an MCP listing: `tools` of objects
    orjson.dumps({"tools": []}),          # an empty listing (a last page), or requirements of nothing
    orjson.dumps({"id": "c", "agent": {"name": "a"}, "experience": "e"}),  # an authority connection
    orjson.dumps({}),
    b"apiVersion: v1\nkind: Pod\n",                              # YAML
    b"{not json\n" + lines(declaration("a")),                  # a first document that does not parse
    orjson.dumps([1, 2]),
])
def test_anything_else_is_of_no_kind_a3fast_writes(data):
    assert kinds.sniff(data) is kinds.UNKNOWN


def test_the_kind_comes_from_members_parsed_never_from_bytes_seen():
    # a declaration whose text holds a record's members as strings is still a declaration
    tricky = declaration("a", clearances=['"seq": 1, "kind": "task.bound", "content": {}'])
    assert kinds.sniff(lines(tricky)) is kinds.DECLARATIONS
    # a record with its members in any order, spaced out, is a trace
    record = b'{ "content" : {"scheduling": {}} ,\t"kind" : "task.bound" , "seq" : 2 }\n'
    assert kinds.sniff(record) is kinds.SPEC_TRACE


def test_a_large_input_is_told_from_its_start(tmp_path):
    many = [declaration(f"agent-{i}", clearances=["r" * 200]) for i in range(20_000)]
    path = tmp_path / "fleet.json"
    path.write_bytes(orjson.dumps(many))
    assert path.stat().st_size > kinds.SNIFF_BYTES
    assert kinds.sniff(path) is kinds.DECLARATIONS
    path.write_bytes(lines(*many))
    assert kinds.sniff(path) is kinds.DECLARATIONS


def test_a_stream_gets_back_every_byte_that_was_read():
    data = lines(SUBMITTED, BOUND) * 3 + b"tail"
    stream = Pushback(io.BytesIO(data))
    assert kinds.sniff(stream) is kinds.SPEC_TRACE
    assert stream.read() == data


def test_the_one_line():
    assert kinds.wrong_kind(kinds.SPEC_TRACE, ["declarations"], "t.jsonl") == \
        "t.jsonl looks like a trace (spec records), not declarations"
    assert kinds.wrong_kind(kinds.DECLARATIONS, ["trace"], "f.jsonl") == "f.jsonl looks like declarations, not a trace"
    assert kinds.wrong_kind(kinds.SNAPSHOT, ["declarations", "snapshot"], "f") is None
    assert kinds.wrong_kind(kinds.UNKNOWN, ["declarations"], "f") is None
    assert kinds.wrong_kind(kinds.EMPTY, ["trace"], "t.jsonl") is None
    assert kinds.wrong_kind(kinds.EMPTY, ["trace"], "t.jsonl", allow_empty=False) == "t.jsonl is empty: expected a trace"
