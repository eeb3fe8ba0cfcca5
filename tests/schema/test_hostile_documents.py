"""Hostile JSON at every entry point that reads a document or a trace: each gives one of its
documented outcomes — a value, a SchemaError (or FleetError), findings — and never another
exception. Values are arbitrary JSON and worse: nesting far past any limit, integers beyond 64
bits, NaN, lone surrogates, non-string keys, and a wrong value at every path of a valid document."""
from __future__ import annotations

import copy
import json
import os
import tempfile

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import a3fast
from a3fast.document import INT_MAX, INT_MIN, MAX_DEPTH, check, conforms, cut_deeper_than, loads
from a3fast.errors import A3Error, SchemaError
from a3fast.schema import parse_declaration, parse_requirements
from a3fast.trace import TraceContentError, TraceProblem, TraceRecord, read_trace
from a3fast.verify import Finding, verify, verify_bytes, verify_file

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DECL = {"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
        "capabilities": [{"name": "order.investigate", "version": 2, "evaluation": {"probe": "p1"}}],
        "clearances": ["orders.read"], "residency": ["eu"], "tools": ["search"],
        "model": {"latency_class": "interactive", "cost_ceiling_usd": "0.75"}}
REQ = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
       "clearances": ["orders.read"], "residency": "eu", "model": {"latency_class": "interactive"}}


def nested(depth: int, container: str = "list", leaf=0):
    value = leaf
    for _ in range(depth):
        value = [value] if container == "list" else {"a": value}
    return value


scalars = (st.none() | st.booleans()
           | st.integers(min_value=-(2**70), max_value=2**70)
           | st.builds(lambda sign: sign * 10**5000, st.sampled_from([1, -1]))  # too long for repr()
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=6)
           | st.sampled_from(["\ud800", "a\udc00", "", "x" * 2000, "\x00"]))
deep = st.builds(nested, st.integers(100, 1500), st.sampled_from(["list", "dict"]))
hostile = st.recursive(scalars | deep,
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=4) | st.sampled_from(["\ud800"]), inner, max_size=3)
                       | st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2),
                       max_leaves=8)


def paths(value, prefix=()):
    """Every path (tuple of keys) in a document, the root included."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, prefix + (i,))


def replaced(doc, path, new):
    if not path:
        return new
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return doc


def at_every_path(doc):
    return st.builds(replaced, st.just(doc), st.sampled_from(list(paths(doc))), hostile)


# -- the rule itself ----------------------------------------------------------------------------

def test_the_rule_bounds_nesting_at_128_for_a_document():
    assert check(nested(MAX_DEPTH)) == [] and conforms(nested(MAX_DEPTH))
    assert check(nested(MAX_DEPTH + 1)) and not conforms(nested(MAX_DEPTH + 1))
    assert check(nested(MAX_DEPTH + 1, "dict")) and not conforms(nested(MAX_DEPTH + 1, "dict"))


def test_the_rule_holds_integers_to_what_orjson_and_msgspec_can_write():
    assert check([INT_MIN, INT_MAX]) == [] and conforms([INT_MIN, INT_MAX])
    for big in (INT_MIN - 1, INT_MAX + 1):
        [problem] = check({"x": big})
        assert problem.path == "$.x" and "2^64-1" in problem.expected
        assert not conforms({"x": big})


def test_the_rule_refuses_nan_infinity_lone_surrogates_and_non_string_keys():
    for value, path in [({"x": float("nan")}, "$.x"), ([float("inf")], "$[0]"), ({"n": "\ud800"}, "$.n"),
                        ({"a": {1: 2}}, "$.a"), ({"a": {"\udc00": 1}}, "$.a"), ({"s": {1}}, "$.s")]:
        [problem] = check(value)
        assert problem.path == path
        assert not conforms(value)


def test_checking_a_value_nested_far_past_the_stack_does_not_recurse():
    [problem] = check(nested(100_000))
    assert "at most 128" in problem.expected


@given(hostile)
@FAST
def test_conforms_never_says_yes_when_check_finds_a_problem(value):
    if conforms(value):
        assert check(value) == []


@pytest.mark.parametrize("text, found", [
    (b"[" * 1000 + b"]" * 1000, "deeper nesting"), (b"[" * 129 + b"]" * 129, "deeper nesting"),
    (b'{"x": 18446744073709551616}', "18446744073709551616"), (b'{"x": "\\ud800"}', "surrogate"),
    (b'{"x": 1e400}', "$.x: expected a finite number, found inf"), (b"nope", "literal"),
    ("\ud800", "lone surrogate")])
def test_loads_raises_only_schema_error_naming_the_problem(text, found):
    with pytest.raises(SchemaError) as err:
        loads(text, "f.json")
    assert found in str(err.value) and str(err.value).startswith("f.json: ")


@pytest.mark.parametrize("text, found", [
    (b'{"a": [1, {"x": 1e400}]}', "$.a[1].x: expected a finite number, found inf"),
    (b'{"x": -1e999, "y": 2}', "$.x: expected a finite number, found -inf"),
    (b'{"x": 1%b}' % (b"0" * 399), "$.x: expected an integer from -2^63 to 2^64-1, found an integer of about 400 digits"),
    (b'{"x": -%b}' % (b"9" * 5000), "$.x: expected an integer from -2^63 to 2^64-1, found an integer of about 5000 digits"),
])
def test_a_number_no_double_holds_is_named_at_its_member(text, found):
    # valid JSON that msgspec cannot hold was "expected valid JSON, found number is infinity when
    # parsed as double": the rule refuses it where it stands, as it does an integer of 21 digits
    with pytest.raises(SchemaError) as err:
        loads(text, "f.json")
    assert str(err.value) == f"f.json: {found}"


@pytest.mark.parametrize("text", [
    b'{"x": "' + b"[" * 200 + b'"}',                  # brackets inside a string only over-count
    b'{"x": "1234567890123456789012"}',                 # so do digits
    b'[%d, %d]' % (INT_MIN, INT_MAX),                   # the widest integers the rule allows
    b"[" * MAX_DEPTH + b"]" * MAX_DEPTH])
def test_loads_accepts_what_keeps_the_rule_whatever_the_text_looks_like(text):
    assert loads(text) == orjson.loads(text)


@given(st.recursive(st.integers(INT_MIN - 3, INT_MAX + 3) | st.text(alphabet="[{0123456789", max_size=30),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                    max_leaves=8),
       st.integers(0, 3))
@FAST
def test_loads_refuses_exactly_what_the_rule_refuses_when_judged_from_the_text(value, wrap):
    for _ in range(wrap * 42):    # nesting near the bound
        value = [value]
    text = json.dumps(value).encode()
    try:
        loads(text)
        refused = False
    except SchemaError:
        refused = True
    assert refused == bool(check(value))


@given(st.binary(max_size=64) | st.builds(lambda v: orjson.dumps(v), st.recursive(
    st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3), max_leaves=6)))
@FAST
def test_loads_gives_a_value_or_a_schema_error(data):
    try:
        loads(data)
    except SchemaError as exc:
        assert exc.problems


# -- declarations, requirements and the fleet ---------------------------------------------------

def _parses_or_refuses(parse, doc):
    try:
        return parse(doc)
    except SchemaError as exc:
        assert exc.problems and all(p.path.startswith("$") for p in exc.problems)
        return None


@given(st.one_of(hostile, at_every_path(DECL)))
@FAST
def test_parse_declaration_gives_a_declaration_or_a_schema_error(doc):
    decl = _parses_or_refuses(parse_declaration, doc)
    if decl is not None:
        orjson.dumps(decl.doc)  # what is accepted can be written


@given(st.one_of(hostile, at_every_path(REQ)))
@FAST
def test_parse_requirements_gives_requirements_or_a_schema_error(doc):
    req = _parses_or_refuses(parse_requirements, doc)
    if req is not None:
        orjson.dumps(req.doc)


@pytest.mark.parametrize("where", ["agent.name", "clearances.0", "residency.0", "tools.0", "extra"])
@pytest.mark.parametrize("bad, found", [("\ud800", "lone surrogate"), (2**64, "18446744073709551616"),
                                        (nested(300), "deeper nesting"), (float("nan"), "nan")])
def test_fleet_add_refuses_what_the_rule_refuses_naming_the_path(where, bad, found):
    keys = [int(k) if k.isdigit() else k for k in where.split(".")]
    doc = replaced(DECL, tuple(keys), bad)
    with pytest.raises(SchemaError) as err:
        a3fast.Fleet().add(doc)
    paths_named = [p.path for p in err.value.problems]
    assert any(p.startswith("$." + where.split(".")[0]) for p in paths_named), paths_named


@pytest.mark.parametrize("bad", [{"score": 2**64}, nested(250, "dict"), "\ud800"])
def test_an_evaluation_the_rule_refuses_is_refused_when_added_not_when_placed(bad):
    doc = replaced(DECL, ("capabilities", 0, "evaluation"), bad)
    with pytest.raises(SchemaError):
        a3fast.Fleet().add(doc)


@pytest.mark.parametrize("bad", [nested(250, "dict"), 2**64, "\ud800", float("inf")])
def test_fleet_place_refuses_requirements_the_rule_refuses(bad):
    fleet = a3fast.Fleet()
    fleet.add(DECL)
    with pytest.raises(SchemaError) as err:
        fleet.place(replaced(REQ, ("unknown",), bad))
    assert any(p.path.startswith("$.unknown") for p in err.value.problems)


@given(st.one_of(hostile, at_every_path(DECL)), st.one_of(hostile, at_every_path(REQ)))
@FAST
def test_fleet_add_and_place_give_a_placement_or_a_documented_error(decl, req):
    fleet = a3fast.Fleet()
    try:
        fleet.add(decl)
    except A3Error:
        fleet.add(DECL)
    try:
        placement = fleet.place(req)
    except SchemaError:
        return
    # whatever was accepted can be recorded
    if placement.bound:
        orjson.loads(placement.scheduling_json())
    else:
        orjson.dumps(placement.rejection)


# -- traces and the verifier --------------------------------------------------------------------

def _example_trace():
    fleet = a3fast.Fleet()
    fleet.add(DECL)
    p = fleet.place(REQ)
    return [{"seq": 1, "kind": "task.submitted", "content": {"requirements": REQ}},
            {"seq": 2, "kind": "task.admitted", "content": {"agent": DECL["agent"]}},
            {"seq": 3, "kind": "task.bound", "content": {"scheduling": p.scheduling}},
            {"seq": 4, "kind": "task.rejected", "content": {"code": "unschedulable",
                                                             "reason": "no eligible agent"}}]


TRACE = _example_trace()


def _findings_only(findings):
    assert isinstance(findings, list) and all(isinstance(f, Finding) for f in findings)
    return findings


def test_the_example_trace_is_valid_but_for_its_rejection():
    assert [(f.code, f.seq) for f in verify(TRACE)] == [("E_REJECTION_REASON", 4)]


@given(at_every_path(TRACE))
@FAST
def test_verify_gives_findings_for_a_hostile_value_at_any_path_of_a_trace(records):
    _findings_only(verify(records))


def _text(records) -> bytes:
    """A trace file of the values (one value when the whole trace was replaced)."""
    lines = []
    for record in (records if isinstance(records, list) else [records]):
        try:
            lines.append(orjson.dumps(record))
        except TypeError:  # what orjson cannot write goes in as the nearest text a file could hold
            try:  # json writes lone surrogates as escapes, NaN as a bare NaN, big ints in full
                lines.append(json.dumps(record).encode())
            except (TypeError, ValueError):
                lines.append(b"not json")
    return b"\n".join(lines) + b"\n"


@given(at_every_path(TRACE))
@FAST
def test_verify_bytes_and_verify_file_agree_and_give_findings(records):
    data = _text(records)
    from_bytes = _findings_only(verify_bytes(data))
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        from_file = _findings_only(verify_file(path))
    finally:
        os.unlink(path)
    assert [(f.code, f.seq) for f in from_file] == [(f.code, f.seq) for f in from_bytes]


@pytest.mark.parametrize("data", [
    b"[" * 1000 + b"]" * 1000,
    b'{"seq":1,"kind":"task.submitted","content":{"x":' + b"[" * 1000 + b"]" * 1000 + b"}}",
    b'{"seq":1,"kind":"task.bound","content":{"scheduling":' + b"[" * 5000 + b"]" * 5000 + b"}}",
    b'{"seq":1,"kind":"task.submitted","content":{"x":18446744073709551616}}',
    b'[{"seq":1,"kind":"task.submitted","content":{"x":18446744073709551616}}]',
    b'{"seq":1,"kind":"task.submitted","content":{"x":"\\ud800"}}',
    b'{"seq":18446744073709551616,"kind":"a","content":{}}',
])
def test_records_that_break_the_rule_are_e_trace_never_a_crash(data):
    findings = _findings_only(verify_bytes(data))
    assert [f.code for f in findings] == ["E_TRACE"]


def test_a_record_that_breaks_the_rule_is_e_trace_at_its_line_and_reading_goes_on():
    lines = [orjson.dumps(r) for r in TRACE[:3]]
    lines.insert(1, b'{"seq":2,"kind":"task.started","content":{"x":-9223372036854775809}}')
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":5', 1)
    lines[3] = lines[3].replace(b'"seq":3', b'"seq":6', 1)
    findings = verify_bytes(b"\n".join(lines))
    assert [(f.code, f.seq, f.line) for f in findings] == [("E_TRACE", 2, 2)]


@given(st.binary(max_size=200) | st.builds(_text, at_every_path(TRACE)))
@FAST
def test_read_trace_gives_records_and_problems_and_content_or_its_error(data):
    for item in read_trace(data):
        assert isinstance(item, (TraceRecord, TraceProblem))
        if isinstance(item, TraceRecord):
            try:
                orjson.dumps(item.content)
            except TraceContentError:
                pass


def test_an_integer_too_long_to_print_is_described_not_raised():
    huge = 10**5000  # repr() of it raises ValueError in CPython
    [problem] = check({"x": huge})
    assert problem.found == "an integer of about 5001 digits"
    with pytest.raises(SchemaError):
        parse_requirements({"capabilities": [{"name": "a.b", "version": huge}]})
    assert [f.code for f in verify([{"seq": huge, "kind": "a", "content": {}}])] == ["E_TRACE"]


def test_a_tuple_where_an_array_belongs_is_named_a_tuple_not_an_array():
    # "expected an array, found array of 1" left a Python caller no way to see what was wrong
    with pytest.raises(SchemaError) as refused:
        parse_declaration({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [],
                           "clearances": ("a.b",)})
    assert str(refused.value) == "$.clearances: expected an array, found a tuple of 1 (give an array as a list)"


@given(st.lists(st.sampled_from([b"1", b"9", b"0", b"a", b"[", b"{", b'"', b"\xd9", b"\xff", b" "]), max_size=60),
       st.integers(0, 40))
def test_the_text_alone_vouches_for_a_value_only_without_19_digits_in_a_row_or_too_many_brackets(parts, limit):
    """`plainly_within` on bytes: within the bracket count, and no run of 19 ASCII digits (so no
    integer past 64 bits); the digits found by a byte table, the same answer a regular expression
    gives (non-ASCII bytes are never digits)."""
    import re

    from a3fast.document import plainly_within

    data = b"".join(parts)
    expected = data.count(b"[") + data.count(b"{") <= limit and re.search(rb"[0-9]{19}", data) is None
    assert plainly_within(data, limit) is expected
    assert plainly_within(b"1" * 18, 0) and not plainly_within(b"1" * 19, 0)
    assert plainly_within(b"1" * 18 + b"a" + b"1" * 18, 0)


@pytest.mark.parametrize("data, where", [
    (b'{"v": "1.0",\n "capabilities": [],\n "residency": "caf\xe9"}', "the byte 0xe9 at line 3 column 19 (byte 52)"),
    (b'["\xff"]', "the byte 0xff at line 1 column 3 (byte 2)"),
    (b'\xc3', "the byte 0xc3 at line 1 column 1 (byte 0)"),
    ('["éé'.encode() + b'\xff"]', "the byte 0xff at line 1 column 5 (byte 6)"),     # columns in characters
])
def test_text_that_is_not_utf8_is_named_at_its_byte(data, where):
    # where the message said "surrogates not allowed: line 1 column 1" whatever the byte and wherever
    with pytest.raises(SchemaError) as refused:
        loads(data, "task.json")
    assert str(refused.value) == f"task.json: $: expected valid JSON, found text that is not UTF-8: {where}"


# -- JSON nested past every reader's recursion limit, cut to what they read ---------------------------
def _cut_reference(value, depth: int, level: int = 0):
    """`value` with every array or object more than `depth` levels deep replaced by None."""
    if isinstance(value, (dict, list)):
        if level + 1 > depth:
            return None
        if isinstance(value, dict):
            return {k: _cut_reference(v, depth, level + 1) for k, v in value.items()}
        return [_cut_reference(v, depth, level + 1) for v in value]
    return value


_TEXT = st.text(alphabet='[]{}"\\ ,:ab\n\u00e9', max_size=6)
_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | _TEXT,
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                       max_leaves=25)


@settings(max_examples=400)
@given(_VALUES, st.integers(0, 6), st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_json_cut_deeper_than_a_depth_is_the_value_cut_there(value, depth, piece):
    # brackets, quotes and backslashes inside strings (escaped as orjson writes them) are not
    # nesting, however the scan's pieces cut the text (a string, a run of backslashes across them)
    import a3fast.document as document

    text = orjson.dumps(value)
    kept, document.CUT_PIECE = document.CUT_PIECE, piece
    try:
        assert orjson.loads(cut_deeper_than(text, depth)) == _cut_reference(value, depth)
    finally:
        document.CUT_PIECE = kept


def test_json_past_every_readers_depth_is_read_once_cut_and_still_breaks_the_rule():
    text = b'{"a":"[[[","b":' + b"[" * 5000 + b"]" * 5000 + b',"c":1}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    value = orjson.loads(cut_deeper_than(text))
    assert value["a"] == "[[[" and value["c"] == 1
    problems = check(value)
    assert problems and problems[0].path.startswith("$.b")
    for unpaired in (b'[[1]', b'[1]]', b']['):      # brackets that do not pair: given back as they are
        assert cut_deeper_than(unpaired, 1) == unpaired
    assert cut_deeper_than(b"") == b""
