"""The compiled JSON Lines reader (`a3fast._ingest`) against the careful one (orjson and
`parse_declaration`, what a pure fleet reads every line with).

The compiled reader vouches for a line only when it is valid and already canonical, and hands every
other line to the careful reader, so the two must build the same fleet from any bytes: the same
problems under the same line numbers, the same agents, rows, costs and canonical declarations —
compared here as the whole snapshot each fleet saves. Since a reader that refused every line would
agree trivially, the tests also pin down which lines it does read: every line of the standard
workload, and none of the unusual forms it leaves to the careful reader.
"""
from __future__ import annotations

import copy
import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from a3fast import SchemaError, snapshot
from a3fast.errors import Problem
from a3fast.engines import NATIVE_AVAILABLE, ingest_module
from a3fast.fleet import Fleet
from a3fast.schema import parse_declaration
from a3fast.workload import generate_fleet

from strategies import declarations
from edge_documents import FULL_DECLARATION, damaged, variants

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the compiled reader is not built")


def compiled():
    return ingest_module("native")


def saved(fleet: Fleet, path) -> tuple[dict, dict]:
    fleet.save(path)
    header, sections = snapshot.decode(snapshot.read(path))
    header.pop("written_by")
    header.pop("section_starts")   # they move with the length of `written_by`
    return header, {name: bytes(section) for name, section in sections.items()}


def load(data: bytes, engine: str) -> tuple[Fleet, list]:
    fleet = Fleet(engine)
    problems = fleet.extend_jsonl(data, on_error="skip")
    return fleet, [(p.path, p.expected, p.found) for p in problems]


def assert_readers_agree(data: bytes, tmp_path) -> None:
    native, native_problems = load(data, "native")
    pure, pure_problems = load(data, "pure")
    assert native_problems == pure_problems
    assert saved(native, tmp_path / "native.snap") == saved(pure, tmp_path / "pure.snap")


def vouched_for(line: bytes) -> bool:
    """Whether the compiled reader reads `line` itself (rather than handing it back)."""
    reader = compiled()
    batch = reader.Batch()
    pos, _ = reader.scan(line, 0, 1, batch, reader.Vocabulary(), lambda kind, value: 0, {})
    return pos == len(line) and len(batch) == 1


def canonical_and_valid(line: bytes) -> bool:
    doc = orjson.loads(line)
    parse_declaration(doc)
    return orjson.dumps(doc) == line.removesuffix(b"\r")


# -- what it reads ----------------------------------------------------------------------------------

def test_it_reads_every_line_of_the_standard_workload_itself():
    lines = [orjson.dumps(d) for d in generate_fleet(300, seed=5)]
    assert all(vouched_for(line) for line in lines)
    assert vouched_for(lines[0] + b"\r")  # a CRLF line ending


@pytest.mark.parametrize("text", ["caf\u00e9", "\uff5a" * 1024, "\U0001F600 x", "a\u2028b", "\u0085"])
def test_it_reads_names_and_labels_in_any_script_itself(text, tmp_path):
    doc = {"v": "1.0", "agent": {"name": text, "namespace": "n\u00e9"}, "capabilities": [],
           "clearances": [], "tools": [text], "residency": [text]}
    assert vouched_for(orjson.dumps(doc))
    assert_readers_agree(orjson.dumps(doc) + b"\n", tmp_path)


def test_a_name_of_more_than_1024_characters_goes_to_the_careful_reader(tmp_path):
    doc = {"v": "1.0", "agent": {"name": "\u00e9" * 1025, "namespace": "n"}, "capabilities": [], "clearances": []}
    assert not vouched_for(orjson.dumps(doc))
    assert_readers_agree(orjson.dumps(doc) + b"\n", tmp_path)


def test_an_identifier_longer_than_its_key_buffer_goes_to_the_careful_reader(tmp_path):
    long = "a." + "b" * 5000                       # valid (§2 bounds no identifier), and long
    doc = {"v": "1.0", "agent": {"name": "a", "namespace": "n"},
           "capabilities": [{"name": long, "version": 1, "evaluation": "e"}], "clearances": [long]}
    assert not vouched_for(orjson.dumps(doc))
    assert_readers_agree(orjson.dumps(doc) + b"\n", tmp_path)


@pytest.mark.parametrize("line", [
    b' {"v":"1.0"}',                                                   # whitespace
    b'{"v": "1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"\\u0061","namespace":"n"},"capabilities":[],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"caf\xc3","namespace":"n"},"capabilities":[],"clearances":[]}',   # cut short
    b'{"v":"1.0","agent":{"name":"\xc0\xaf","namespace":"n"},"capabilities":[],"clearances":[]}',  # overlong
    b'{"v":"1.0","agent":{"name":"\xed\xa0\x80","namespace":"n"},"capabilities":[],"clearances":[]}',  # surrogate
    b'{"v":"1.0","agent":{"name":"\xf4\x90\x80\x80","namespace":"n"},"capabilities":[],"clearances":[]}',  # > U+10FFFF
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"x":1.5}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"x":-0}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"x":1234567890123456789}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"v":"1.0"}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"x":'
    + b"[" * 70 + b"]" * 70 + b"}",
    b'{"v":"1.0","agent":{"name":"a\x7f","namespace":"n"},"capabilities":[],"clearances":[]}',
    b'{"v":"2.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"","namespace":"n"},"capabilities":[],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[{"name":"A.b","version":1}],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[{"name":"a.b","version":-1}],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[{"name":"a.b","version":true}],"clearances":[]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":["a"]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"model":{"latency_class":"fast"}}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"model":{"cost_ceiling_usd":"1e3"}}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[],"tools":[""]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[]}',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[]} ',
    b'{"v":"1.0","agent":{"name":"a","namespace":"n"},"capabilities":[],"clearances":[]}{}',
], ids=lambda line: line.decode("utf-8", "replace")[-40:])
def test_it_leaves_unusual_or_invalid_lines_to_the_careful_reader(line):
    assert not vouched_for(line)


def test_a_declaration_with_more_values_than_it_keeps_track_of_goes_to_the_careful_reader(tmp_path):
    doc = {"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [],
           "clearances": [f"c.x{i}" for i in range(300)]}
    assert not vouched_for(orjson.dumps(doc))
    assert_readers_agree(orjson.dumps(doc) + b"\n", tmp_path)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_line_it_reads_is_valid_and_canonical_whatever_bytes_it_was_given(data):
    line = bytearray(orjson.dumps(data.draw(declarations())))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(line) - 1))
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = data.draw(st.integers(0, 255) | st.sampled_from(b'{}[]",:0-. \\\x7fa'))
        if op == "flip":
            line[at] = byte
        elif op == "insert":
            line.insert(at, byte)
        elif len(line) > 1:
            del line[at]
    line = bytes(line).replace(b"\n", b" ")
    if vouched_for(line):
        assert canonical_and_valid(line)


# -- whole fleets from either reader ----------------------------------------------------------------

def test_the_standard_workload_builds_the_same_fleet_from_either_reader(tmp_path):
    data = b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(500, seed=6))
    assert_readers_agree(data, tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(declarations() | damaged(declarations()), min_size=1, max_size=12),
       st.sampled_from(["orjson", "json", "ascii", "crlf"]), st.booleans())
def test_any_lines_build_the_same_fleet_and_problems_from_either_reader(tmp_path, docs, form, blank):
    def encode(doc) -> bytes:
        if form == "json":
            return json.dumps(doc).encode()
        if form == "ascii":
            return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode()
        return orjson.dumps(doc) + (b"\r" if form == "crlf" else b"")
    lines = [encode(doc) for doc in docs]
    if blank:
        lines.insert(len(lines) // 2, b"  ")
    assert_readers_agree(b"\n".join(lines), tmp_path)


def test_every_field_at_every_edge_builds_the_same_fleet_from_either_reader(tmp_path):
    lines = [orjson.dumps(variant) for _, variant in variants(FULL_DECLARATION)]
    # each variant under its own name, so that no line replaces another
    named = []
    for i, line in enumerate(lines):
        doc = orjson.loads(line)
        if isinstance(doc.get("agent"), dict) and isinstance(doc["agent"].get("name"), str):
            doc = copy.deepcopy(doc)
            doc["agent"]["name"] = f"{doc['agent']['name'][:40]}-{i}"
        named.append(orjson.dumps(doc))
    assert_readers_agree(b"\n".join(named), tmp_path)


def test_a_replaced_agent_and_a_namespace_clash_read_alike(tmp_path):
    base = generate_fleet(20, seed=7)
    moved = copy.deepcopy(base[3])
    moved["agent"]["namespace"] = "elsewhere"
    again = copy.deepcopy(base[5])
    again["clearances"] = ["other.read"]
    data = b"".join(orjson.dumps(d) + b"\n" for d in [*base, moved, again])
    assert_readers_agree(data, tmp_path)
    native = Fleet("native")
    native.extend_jsonl(data, on_error="skip")
    assert native.get(base[5]["agent"]["name"]).clearances == ("other.read",)


def test_names_and_namespaces_are_told_apart_by_their_bytes_in_any_number(tmp_path):
    """The batch finds a name's namespace by the name's UTF-8 in a table of its own: names that
    differ in one byte anywhere, in any script, hundreds of names and namespaces (the table grows
    many times), a name first read carefully then met again, read alike by both readers."""
    base = generate_fleet(1, seed=11)[0]

    def line(name: str, namespace: str, careful: bool = False) -> bytes:
        doc = dict(base, agent={"name": name, "namespace": namespace})
        return json.dumps(doc).encode() if careful else orjson.dumps(doc)

    names = [f"agent-{i:04d}" for i in range(300)] + ["\u00e9" * k for k in range(1, 20)]
    names += ["x" * k + "y" for k in range(20)] + ["x" * k + "z" for k in range(20)]
    lines = [line(name, f"ns-{i % 90}", careful=i % 17 == 0) for i, name in enumerate(names)]
    lines += [line(name, f"ns-{i % 90}") for i, name in enumerate(names) if i % 5 == 0]        # replaced
    lines += [line(name, "elsewhere", careful=i % 2 == 0) for i, name in enumerate(names) if i % 7 == 0]  # clash
    data = b"\n".join(lines) + b"\n"
    assert_readers_agree(data, tmp_path)
    problems = Fleet("native").extend_jsonl(data, on_error="skip")
    assert len(problems) == len([i for i in range(len(names)) if i % 7 == 0])
    assert {p.path.split(": ")[1] for p in problems} == {"$.agent.namespace"}


@pytest.mark.parametrize("special", ["\u00e9", "\"", "\\", "\u0001", "\x7f", "\U0001F600"])
def test_a_string_is_read_eight_bytes_at_a_time_whatever_byte_ends_the_plain_part(special, tmp_path):
    """Plain ASCII is passed over a word at a time; a quote, backslash, control character, DEL or
    non-ASCII byte at any offset of a word stops it at that byte."""
    lines = []
    for at in range(20):
        text = "t" * at + special + "u" * (19 - at)
        doc = {"v": "1.0", "agent": {"name": f"a{at}", "namespace": "n"}, "capabilities": [],
               "clearances": [], "tools": [text], "residency": ["r" * (at + 1)]}
        encoded = orjson.dumps(doc)
        # orjson escapes a quote, a backslash and control characters: the careful reader reads them
        assert vouched_for(encoded) == (special in ("\u00e9", "\U0001F600")), (special, at)
        lines.append(encoded)
    assert_readers_agree(b"\n".join(lines), tmp_path)


def test_a_value_a_line_repeats_keeps_its_first_place(tmp_path):
    doc = {"v": "1.0", "agent": {"name": "a", "namespace": "n"},
           "capabilities": [{"name": "c.x", "version": 1, "evaluation": "e"}, {"name": "c.y", "version": 1},
                            {"name": "c.x", "version": 1, "evaluation": "f"}],
           "clearances": ["b.read", "a.read", "b.read"], "tools": ["t", "u", "t", "t"], "residency": ["eu"]}
    other = dict(doc, agent={"name": "b", "namespace": "n"}, clearances=["a.read", "b.read"])
    data = orjson.dumps(doc) + b"\n" + orjson.dumps(other) + b"\n"
    assert vouched_for(orjson.dumps(doc))
    assert_readers_agree(data, tmp_path)
    fleet = Fleet.load_jsonl(data, "native")
    assert fleet.get("a").clearances == ("b.read", "a.read", "b.read")


def test_a_refused_batch_leaves_the_fleet_and_its_rows_as_they_were(tmp_path):
    fleet = Fleet("native")
    fleet.extend_jsonl(b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(30, seed=8)))
    before = saved(fleet, tmp_path / "before.snap")
    fresh = {"v": "1.0", "agent": {"name": "new", "namespace": "n"},
             "capabilities": [{"name": "brand.new", "version": 9}], "clearances": ["brand.read"]}
    with pytest.raises(SchemaError):
        fleet.extend_jsonl(orjson.dumps(fresh) + b"\n{not json}\n")
    assert saved(fleet, tmp_path / "after.snap") == before
    fleet.extend_jsonl(orjson.dumps(fresh) + b"\n")
    assert fleet.get("new").capabilities[0].name == "brand.new"


def test_a_file_read_in_chunks_builds_the_same_fleet_as_its_bytes(tmp_path, monkeypatch):
    import a3fast.fleet.bulk_load as fleet_module

    data = b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(200, seed=9))
    path = tmp_path / "fleet.jsonl"
    path.write_bytes(data.rstrip(b"\n"))          # the last line without its newline
    monkeypatch.setattr(fleet_module, "JSONL_CHUNK", 777)   # lines cut across chunks
    from_file = Fleet.load_jsonl(path, "native")
    assert saved(from_file, tmp_path / "file.snap") == saved(Fleet.load_jsonl(data, "native"), tmp_path / "bytes.snap")


def test_a_careful_line_is_decoded_under_the_document_rule(engine):
    """An integer beyond 64 bits is refused on a line of JSON Lines as a3fast.document refuses it,
    not read as a float."""
    from a3fast.document import decode_problem
    from a3fast.workload import generate_fleet
    decl = generate_fleet(1, seed=3)[0]
    line = orjson.dumps(decl).replace(b'{"v":"1.0"', b'{"v":"1.0","x-big":1180591620717411303424', 1)
    assert b"x-big" in line
    with pytest.raises(SchemaError) as caught:
        Fleet.load_jsonl(line + b"\n", engine)
    _, expected = decode_problem(line)
    assert caught.value.problems == [Problem("line 1: $" + p.path[1:], p.expected, p.found) for p in expected]
    assert "2^64" in caught.value.problems[0].expected


def test_extend_jsonl_reads_a_binary_stream_numbering_lines_from_first_line(engine):
    import io
    from a3fast.workload import generate_fleet
    decls = generate_fleet(5, seed=4)
    data = b"".join(orjson.dumps(d) + b"\n" for d in decls) + b"{oops\n"
    fleet = Fleet(engine)
    problems = fleet.extend_jsonl(io.BytesIO(data), on_error="skip", first_line=41)
    assert [p.path for p in problems] == ["line 46: $"]
    assert fleet.names() == Fleet.load_jsonl(data[:data.index(b"{oops")], engine).names()


@pytest.mark.parametrize("first_line", [0, -3, True, 1.5, 2**62 + 1, 2**63 - 1, 2**64])
def test_extend_jsonl_refuses_a_first_line_that_is_not_a_line_number(engine, first_line):
    with pytest.raises(ValueError, match="first_line"):
        Fleet(engine).extend_jsonl(b"", first_line=first_line)
