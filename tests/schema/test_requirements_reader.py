"""The reader of plain requirements documents (`schema.requirements_reader`: compiled in
`a3fast._ingest` on the native engine, the schema's fast path in Python on the pure one) against the
careful reader of `parse_requirements`.

The reader vouches only for what it can: it returns the `Requirements` the careful reader builds, or
None, and then `parse_requirements` walks the document itself and names its problems. So on any
document, valid or not, a reader that answers must answer exactly as the careful reader does, and
never for a document the careful reader refuses. A reader that answered None to everything would
pass that, so the tests also hold it to reading every valid plain document itself: the compiled
reader always (it checks the document rule too, exactly), the pure one when the document came from
a JSON decoder (it leaves the rule to `document.conforms`, which refuses every null).
"""
from __future__ import annotations

import copy
import math
import subprocess
import sys
from types import MappingProxyType

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from a3fast import SchemaError, parse_requirements, predicates, schema
from a3fast.engines import ENGINE, available_engines, ingest_module
from a3fast.schema import MAX_TEXT, Requirements, _fast_requirements, requirements_reader
from a3fast.workload import generate_fleet, generate_tasks

from edge_documents import FULL_REQUIREMENTS, KEYS, damaged, variants
from strategies import requirements


@pytest.fixture(scope="module")
def reader(engine):
    """The engine's name and its reader of plain requirements documents."""
    return engine, requirements_reader(engine)


def careful(doc) -> Requirements | None:
    """What the careful reader makes of the document (a read-only view never takes a fast path)."""
    try:
        return parse_requirements(MappingProxyType(doc))
    except SchemaError:
        return None


def assert_reader_agrees(reader, doc: dict) -> bool:
    """The reader answers None or what the careful reader answers; the compiled one answers for
    every valid document. Returns whether the document is valid."""
    name, read = reader
    # the memo of derived predicate sets is emptied before each read, so that each reader derives
    # the set itself (rather than finding the other's)
    predicates.DERIVED.clear()
    expected = careful(doc)
    predicates.DERIVED.clear()
    mine = copy.deepcopy(doc)
    got = read(mine)
    if got is not None:
        assert expected is not None, doc
        assert type(got) is Requirements
        assert got.doc is mine
        assert got._replace(doc=None) == expected._replace(doc=None), doc
    elif name == "native":
        assert expected is None, doc
    if expected is not None:
        taken = read(copy.deepcopy(doc), True)
        assert taken is not None and taken._replace(doc=None) == expected._replace(doc=None), doc
    return expected is not None


class Text(str):
    pass


class Number(int):
    pass


class Items(list):
    pass


# Values on the edges of the rules the reader checks itself: each JSON type where another is read,
# bools for ints, integers on and past 64 bits, texts on and past MAX_TEXT (in characters, some of
# them not ASCII), control characters, lone surrogates, non-finite floats, subclasses of JSON types,
# keys that are not strings, tuples where the rule allows them, and nesting on either side of 128.
def nested(depth: int):
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


HOSTILE = [None, True, False, 0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1,
           1.5, math.nan, math.inf, -math.inf, "", " ", "a.b", "A.b", "a..b", "a.", ".a", "a.b-", "a.-b",
           "1.0", "1.01.2", "1.0.", "1.", "01.0", "2.0", "1.0a", "\u0661.0", "interactive", "batch",
           "x" * MAX_TEXT, "x" * (MAX_TEXT + 1), "\u00e9" * MAX_TEXT, "\u00e9" * (MAX_TEXT + 1),
           "\U0001F600" * MAX_TEXT, "\uff5a" * (MAX_TEXT + 1), "tab\t", "nul\x00", "del\x7f", "\x1f",
           "\x80", "\u0085", "\u2028", "caf\u00e9", "\ud800", "a\udfffb", "a.b" + "-" * 2000,
           Text("a.b"), Number(1), Items(["a.b"]), ("a.b",), {1: "x"}, {"\ud800": 1}, {"k": math.nan},
           [], {}, [None], ["a.b"], ["a.b", "a.b"], ["nul\x00"], [""], [Text("x")], [1], [True],
           {"name": "a.b", "version": 1}, {"name": "a.b", "version": True}, {"name": "a.b"},
           {"version": 1}, {"name": "a.b", "version": 2**63}, {"name": "a.b", "version": -1},
           {"name": "a.b", "version": 1.0}, {"name": Text("a.b"), "version": 1},
           {"name": "a.b", "version": Number(1)}, {"name": "a.b", "version": 1, "evaluation": math.nan},
           {"name": "a.b", "version": 1, "evaluation": {"score": 0.5}},
           [{"name": "a.x", "version": 1}, {"name": "a.x", "version": 1}],
           {"latency_class": None}, {"latency_class": "batch", "cost_ceiling_usd": "nope"},
           {"latency_class": Text("batch")}, {"latency_class": "batch", 2: 3},
           nested(126), nested(127), nested(128), {"deep": nested(126)}, {"deep": nested(127)}]
hostile = st.sampled_from(HOSTILE)
members = st.sampled_from(KEYS + ["\u00e9", "\ud800", "caf\u00e9"])


@st.composite
def hostile_requirements(draw):
    """A valid requirements document with some of its members, or members of its members, set to
    hostile values, and some unknown members added."""
    doc = copy.deepcopy(draw(requirements()))
    for _ in range(draw(st.integers(0, 3))):
        doc[draw(members)] = draw(hostile)
    caps = doc.get("capabilities")
    if type(caps) is list and caps and type(caps[0]) is dict and draw(st.booleans()):
        entry = caps[0]
        entry[draw(st.sampled_from(["name", "version", "evaluation", "other"]))] = draw(hostile)
    if type(doc.get("model")) is dict and draw(st.booleans()):
        doc["model"][draw(st.sampled_from(["latency_class", "cost_ceiling_usd", "other"]))] = draw(hostile)
    for key in ("clearances", "tools", "exclude"):
        if type(doc.get(key)) is list and draw(st.integers(0, 3)) == 0:
            doc[key].append(draw(hostile))
    return doc


# -- it answers as the careful reader does -----------------------------------------------------------

@settings(max_examples=400)
@given(doc=hostile_requirements())
def test_requirements_reader_answers_as_the_careful_reader_on_hostile_documents(reader, doc):
    assert_reader_agrees(reader, doc)


@settings(max_examples=200)
@given(doc=damaged(requirements()))
def test_requirements_reader_answers_as_the_careful_reader_on_damaged_documents(reader, doc):
    assert_reader_agrees(reader, doc)


@given(doc=requirements())
def test_requirements_reader_takes_every_valid_generated_document(reader, doc):
    assert assert_reader_agrees(reader, doc)


def test_requirements_reader_answers_as_the_careful_reader_at_every_edge_of_a_full_document(reader):
    valid = sum(assert_reader_agrees(reader, variant) for _, variant in variants(FULL_REQUIREMENTS))
    assert valid > 50


@pytest.mark.parametrize("key", ["v", "capabilities", "clearances", "tools", "residency", "model",
                                 "session", "agentRef", "exclude", "kind", "unknown"])
def test_requirements_reader_answers_as_the_careful_reader_for_each_hostile_member(reader, key):
    # one test per member, every hostile value in turn (as many tests each would spend the run's
    # time in the test runner, not in the readers)
    for i, value in enumerate(HOSTILE):
        try:
            assert_reader_agrees(reader, {**FULL_REQUIREMENTS, key: value})
        except AssertionError as exc:
            raise AssertionError(f"{key} = HOSTILE[{i}] ({value!r:.80}): {exc}") from exc


@pytest.mark.parametrize("depth, valid", [(127, True), (128, False)])
def test_requirements_reader_follows_the_document_rule_to_its_depth(reader, depth, valid):
    # the document is depth 0: a container 128 deep breaks the rule (a3fast.document)
    assert assert_reader_agrees(reader, {"unknown": nested(depth)}) is valid
    assert assert_reader_agrees(reader, {"capabilities": [{"name": "a.b", "version": 1,
                                                           "evaluation": nested(depth - 2)}]}) is valid


@pytest.mark.parametrize("falsy", [None, False, 0, 0.0, "", [], {}])
def test_requirements_reader_reads_a_false_exclude_as_no_exclusion(reader, falsy):
    # `doc.get("exclude") or []`, in both readers: a false value excludes nobody
    assert assert_reader_agrees(reader, {"exclude": falsy})
    assert reader[1]({"exclude": falsy}, True).exclude == ()


def test_requirements_reader_keeps_duplicate_capabilities_and_derives_each_predicate_once(reader):
    doc = {"capabilities": [{"name": "a.x", "version": 1}, {"name": "a.x", "version": 1}],
           "clearances": ["r.read", "r.read"], "exclude": ["b", "b"]}
    assert assert_reader_agrees(reader, doc)
    got = reader[1](doc)
    assert len(got.capabilities) == 2 and got.clearances == ("r.read", "r.read")
    assert got.predicates == ("capability:a.x/1", "clearance:r.read", "anti-affinity:b")


def test_requirements_reader_tells_predicates_of_one_length_apart_by_their_characters(reader):
    # one length, of one width or of others (é is stored in a byte, € in two, 😀 in four): only the
    # same characters repeat a predicate
    doc = {"tools": ["x\u20ac", "x\u00e9", "x\u20ac", "x\U0001F600", "xe", "x\U0001F600", "xf", "\u20acx"]}
    assert assert_reader_agrees(reader, doc)
    assert reader[1](doc).predicates == ("tool:x\u20ac", "tool:x\u00e9", "tool:x\U0001F600", "tool:xe", "tool:xf",
                                         "tool:\u20acx")


@pytest.mark.parametrize("version", [0, 7, 10, 2**63 - 1])
def test_requirements_reader_derives_each_kind_of_predicate_byte_for_byte(reader, version):
    doc = {"capabilities": [{"name": "a.x", "version": version}, {"name": "b.y-z", "version": 1}],
           "clearances": ["r.read"], "tools": ["mcp:github/create_issue", "\U0001F600", "plain"],
           "residency": "eu:west", "model": {"latency_class": "interactive"}, "agentRef": "caf\u00e9",
           "exclude": ["\uff5a", "b", "\uff5a"]}
    predicates.DERIVED.clear()
    predicates.DERIVED_ONCE.clear()
    got = reader[1](doc).predicates
    assert not predicates.DERIVED and predicates.DERIVED_ONCE      # the set noted the first time,
    assert reader[1](copy.deepcopy(doc)).predicates == got
    assert list(predicates.DERIVED.values()) == [got]               # and kept the second, as derive does
    assert got == predicates._derive(*(parse_requirements(MappingProxyType(doc))[i] for i in (1, 2, 3, 4, 5, 7, 8)))
    assert got[0] == f"capability:a.x/{version}" and got[-1] == "anti-affinity:b"


@pytest.mark.parametrize("count", [3, 24, 25, 40])
@pytest.mark.parametrize("repeat", [False, True])
def test_requirements_reader_keeps_the_first_of_repeated_predicates_in_short_and_long_sets(reader, count, repeat):
    clearances = [f"c.n{i}" for i in range(count)] + (["c.n1"] if repeat else [])
    doc = {"clearances": clearances, "tools": ["x", "y", "x"] if repeat else ["x"]}
    assert assert_reader_agrees(reader, doc)
    got = reader[1](doc, True).predicates
    assert len(got) == count + (2 if repeat else 1) and got[-1] == ("tool:y" if repeat else "tool:x")


def test_requirements_reader_shares_the_schema_memos_with_the_python_fast_path(reader):
    doc = {"v": "1.0", "capabilities": [{"name": "shared.reader", "version": 3}], "residency": "eu"}
    _fast_requirements(copy.deepcopy(doc))             # its predicate set noted,
    python = _fast_requirements(copy.deepcopy(doc))    # and kept at its second derivation
    got = reader[1](copy.deepcopy(doc))
    assert got.capabilities[0] is python.capabilities[0]
    assert got.predicates is python.predicates


# -- it reads the common case itself ----------------------------------------------------------------

def test_requirements_reader_takes_every_task_of_the_standard_workload(reader):
    tasks = generate_tasks(generate_fleet(1000), 500)
    read = reader[1]
    for decoded in (False, True):
        got = [read(task, decoded) for task in tasks]
        assert all(r is not None for r in got)
    assert [r._replace(doc=None) for r in got] == [careful(t)._replace(doc=None) for t in tasks]
    decoded_tasks = [orjson.loads(orjson.dumps(task)) for task in tasks]
    assert all(read(task) is not None for task in decoded_tasks)


def test_parse_requirements_reads_a_plain_dict_with_the_default_engines_reader():
    doc = {"capabilities": [{"name": "a.x", "version": 1}]}
    assert parse_requirements(doc).doc is doc
    if ENGINE == "native":
        assert type(schema._read_requirements.__self__).__name__ == "RequirementsReader"
    else:
        assert schema._read_requirements is schema._python_requirements


@settings(max_examples=150)
@given(doc=hostile_requirements())
def test_parse_requirements_refuses_a_plain_dict_in_the_careful_readers_words(doc):
    def message(obj) -> str:
        try:
            parse_requirements(obj)
        except SchemaError as exc:
            return str(exc)
        return "accepted"
    assert message(copy.deepcopy(doc)) == message(MappingProxyType(doc))


@pytest.mark.parametrize("notes_engine", available_engines())
def test_the_memo_of_derived_sets_keeps_what_repeats_and_its_notes_are_bounded(engine, notes_engine, monkeypatch):
    # either engine's notes under either reader: the compiled reader takes a compiled Notes without
    # a Python call and any other by its method
    monkeypatch.setattr(predicates, "DERIVED", {})
    monkeypatch.setattr(predicates, "DERIVED_ONCE", ingest_module(notes_engine).Notes())
    monkeypatch.setattr(predicates, "DERIVED_LIMIT", 4)
    read = requirements_reader(engine)      # made with the memo, its notes and its limit as patched
    for i in range(10):                     # each met once: noted, at most DERIVED_LIMIT at a time
        read({"clearances": [f"once.n{i}"]})
        assert 1 <= len(predicates.DERIVED_ONCE) <= 4
    assert not predicates.DERIVED
    for _ in range(2):
        read({"clearances": ["twice.n"]})
    assert list(predicates.DERIVED) == [((), ("twice.n",), (), None, None, None, ())]


def test_the_memo_of_required_capabilities_shares_each_and_keeps_to_its_bounds(engine, monkeypatch):
    monkeypatch.setattr(schema, "_required_capabilities", {})
    monkeypatch.setattr(schema, "_NAMES_KEPT", 2)
    monkeypatch.setattr(schema, "_VERSIONS_KEPT", 3)
    read = requirements_reader(engine)      # made with the memo and its bounds as patched
    memo = schema._required_capabilities

    def required(name: str, version: int):
        return read({"capabilities": [{"name": name, "version": version}]}, True).capabilities[0]

    first = required("memo.a", 1)
    assert required("memo.a", 1) is first and required("memo.a", 2) is not first
    for version in range(3, 10):            # at most three versions of a name
        assert required("memo.a", version).version == version
    assert sorted(memo["memo.a"]) == [1, 2, 3]
    required("memo.b", 1)
    required("memo.c", 1)                   # at most two names
    assert sorted(memo) == ["memo.a", "memo.b"]
    again = required("memo.c", 1)           # not kept: equal, and made afresh
    assert again == required("memo.c", 1) and again is not required("memo.c", 1)
    assert required("memo.a", 9) == schema.Capability("memo.a", 9, None)


# -- the compiled reader's predicate strings, kept by value ---------------------------------------

native_reader = pytest.mark.skipif("native" not in available_engines(), reason="the native engine is not built")


@pytest.fixture
def kept_predicates_forgotten(monkeypatch):
    """The compiled reader's kept predicate strings and the schema's memo of required capabilities
    emptied before the test and after it (a test that fills either to its bound leaves the rest of
    the run a memo that keeps nothing more)."""
    native = ingest_module("native")
    native.forget_kept_predicates()
    kept = dict(schema._required_capabilities)
    schema._required_capabilities.clear()     # the reader holds this very dict
    # and derive's memo of whole sets, which would give a set read before without deriving it
    derived, derived_once = dict(predicates.DERIVED), set(predicates.DERIVED_ONCE)
    predicates.DERIVED.clear()
    predicates.DERIVED_ONCE.clear()
    yield native
    native.forget_kept_predicates()
    schema._required_capabilities.clear()
    schema._required_capabilities.update(kept)
    predicates.DERIVED.clear()
    predicates.DERIVED.update(derived)
    predicates.DERIVED_ONCE.clear()
    predicates.DERIVED_ONCE.update(derived_once)


FIRST_TASK = {"capabilities": [{"name": "kept.a", "version": 4}], "clearances": ["kept.c1"],
              "tools": ["kept tool \u20ac"], "residency": "kept:eu", "model": {"latency_class": "batch"},
              "agentRef": "kept-agent", "exclude": ["kept-other"]}


@native_reader
def test_requirements_reader_shares_one_string_for_a_predicate_across_tasks(kept_predicates_forgotten):
    # values met again are kept: two tasks that differ as sets but share their values then derive
    # the same string objects, equal to what the Python derivation makes
    read = requirements_reader("native")
    once = read(copy.deepcopy(FIRST_TASK), True)
    first = read(copy.deepcopy(FIRST_TASK), True)
    second = read({**copy.deepcopy(FIRST_TASK), "clearances": ["kept.c1", "kept.c2"]}, True)
    shared = [p for p in second.predicates if p != "clearance:kept.c2"]
    assert [a is b for a, b in zip(first.predicates, shared)] == [True] * len(first.predicates)
    assert not any(a is b for a, b in zip(once.predicates, first.predicates))
    for got in (once, first, second):
        assert got.predicates == predicates._derive(got.capabilities, got.clearances, got.tools, got.residency,
                                                    got.latency_class, got.agent_ref, got.exclude)
    # another version of a kept name is its own predicate, made afresh
    other = read({"capabilities": [{"name": "kept.a", "version": 5}]}, True)
    assert other.predicates == ("capability:kept.a/5",)


@native_reader
def test_requirements_reader_keeps_no_predicate_string_of_a_value_met_once_or_too_long(kept_predicates_forgotten):
    native = kept_predicates_forgotten
    read = requirements_reader("native")
    for i in range(200):        # a workload of one-off tasks leaves nothing behind
        read({"tools": [f"once {i}"], "clearances": [f"once.c{i}"],
              "capabilities": [{"name": f"once.n{i}", "version": 1}]}, True)
    assert set(native.kept_predicates().values()) == {0}
    longest = native.KEPT_VALUE_LENGTH_LIMIT
    for length in (longest, longest + 1, MAX_TEXT):
        tool = "t" * length
        for _ in range(3):
            got = read({"tools": [tool]}, True)
            assert got.predicates == (f"tool:{tool}",)
        assert native.kept_predicates()["tool"] == (1 if length <= longest else 0)
        native.forget_kept_predicates()


@native_reader
@pytest.mark.parametrize("task", [
    {"tools": ["same.x"], "exclude": ["same.x"]},
    {"capabilities": [{"name": "two.v", "version": 1}, {"name": "two.v", "version": 2}]},
    # an int's hash is taken modulo 2^61-1: these hash alike, and are two predicates
    {"capabilities": [{"name": "two.v", "version": 1}, {"name": "two.v", "version": 2**61}]},
    {"capabilities": [{"name": "two.v", "version": 0}, {"name": "two.v", "version": 2**61 - 1}]},
    {"capabilities": [{"name": "pii.read", "version": 1}], "clearances": ["pii.read"]},
], ids=["tool-and-exclusion", "two-versions", "versions-hashed-alike", "versions-hashed-alike-from-0",
        "capability-and-clearance"])
def test_a_value_met_once_as_each_kind_of_predicate_is_met_once(kept_predicates_forgotten, task):
    requirements_reader("native")(task, True)
    assert set(kept_predicates_forgotten.kept_predicates().values()) == {0}


@native_reader
def test_requirements_reader_keeps_predicate_strings_to_their_bound_and_derives_past_it(kept_predicates_forgotten):
    native = kept_predicates_forgotten
    limit = native.KEPT_PREDICATES_LIMIT
    read = requirements_reader("native")
    for i in range(limit + 50):     # more distinct repeated values than are kept
        name = f"bound tool {i}"
        for _ in range(2):
            got = read({"tools": [name], "capabilities": [{"name": f"bound.c{i}", "version": 1}]}, True)
            assert got.predicates == (f"capability:bound.c{i}/1", f"tool:{name}")
        kept = native.kept_predicates()
        assert 1 <= kept["tool"] <= limit and 1 <= kept["capability"] <= limit
    # emptied when full, then kept again: the last 50 are what is kept
    assert native.kept_predicates()["tool"] == 50 and native.kept_predicates()["capability"] == 50


# -- the compiled reader while Python code it calls changes what it reads ---------------------------

# Each is run in a process of its own: before the reader held what it reads, both crashed the process.
_RACED_MEMO = '''
import threading
from a3fast import _ingest
from a3fast.schema import Requirements, Capability
memo = {}
go = {"B": threading.Event(), "A": threading.Event()}
inside = {"B": threading.Event(), "A": threading.Event()}
def capability(name, version, evaluation):
    who = threading.current_thread().name
    if who in go:           # a thread switch while the capability is made
        inside[who].set()
        go[who].wait()
    return Capability(name, version, evaluation)
reader = _ingest.requirements_reader(Requirements, capability, memo, 4096, 16, {}, 16384, _ingest.Notes())
got = {}
def run(v):
    got[v] = reader.read({"capabilities": [{"name": "race.x", "version": v}]}).capabilities
B = threading.Thread(target=run, args=(1,), name="B"); B.start(); inside["B"].wait()   # B: the name absent
C = threading.Thread(target=run, args=(2,), name="C"); C.start(); C.join()             # C keeps a dict for it
A = threading.Thread(target=run, args=(3,), name="A"); A.start(); inside["A"].wait()   # A found that dict
go["B"].set(); B.join()                     # B keeps a dict of its own in its place
go["A"].set(); A.join()
print(sorted(memo["race.x"]), [got[v][0].version for v in (1, 2, 3)])
'''

_SHRUNK_LIST = '''
from a3fast import _ingest
from a3fast.schema import Requirements, Capability
doc = {"capabilities": [{"name": "mut.a", "version": 1}, {"name": "mut.b", "version": 1}]}
def capability(name, version, evaluation):
    doc["capabilities"].clear()
    return Capability(name, version, evaluation)
print(_ingest.requirements_reader(Requirements, capability, {}, 4096, 16, {}, 16384, _ingest.Notes()).read(doc))
'''


@native_reader
@pytest.mark.parametrize("script, printed", [(_RACED_MEMO, "[1, 2, 3] [1, 2, 3]"), (_SHRUNK_LIST, "None")],
                         ids=["memo-replaced-by-another-thread", "list-shrunk-while-read"])
def test_requirements_reader_holds_what_it_reads_while_python_code_runs(script, printed):
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed


@pytest.mark.parametrize("version", [True, 1.0])
def test_a_predicate_set_derived_from_values_no_parser_gives_is_never_found_for_a_parsed_task(engine, version):
    # a version of True or 1.0 equals 1 and hashes as 1: a set derived from one, kept in derive's
    # memo, would be found for the parsed version 1
    predicates.DERIVED.clear()
    predicates.DERIVED_ONCE.clear()
    made = Requirements(capabilities=(schema.Capability("poison.a", version),))
    for _ in range(3):
        assert predicates.derive_predicates(made) == (f"capability:poison.a/{version}",)
        predicates.derive((schema.Capability("poison.a", version),), (), (), None, None, None, ())
    task = {"capabilities": [{"name": "poison.a", "version": 1}]}
    assert requirements_reader(engine)(task, True).predicates == ("capability:poison.a/1",)
    assert parse_requirements(copy.deepcopy(task)).predicates == ("capability:poison.a/1",)
    assert list(predicates.DERIVED.values()) in ([], [("capability:poison.a/1",)])
