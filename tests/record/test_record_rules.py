"""The §6 record package rule by rule: what the writers put on record (record.write, the compact
encoder), and what the readers (record.read, record.compact_read, the compact decoder) make of it."""
from __future__ import annotations

import base64
import copy
import time
from types import SimpleNamespace

import orjson
import pytest
from pyroaring import BitMap

from a3fast import Fleet, Route
from a3fast.errors import json_path
from a3fast.record.compact import (KEY, CompactError, Decoder, Encoder, NameTable, Snapshots, _same_json,
                                   decode_trace)
from a3fast.record.compact_read import CompactFailed, CompactScored
from a3fast.record.read import (ABSENT, BOUND_RECORD, NAME, ParsedDocuments, RecordedPlacement, SpecFailed,
                               read_scheduling, read_typed)
from a3fast.record.write import timings
from a3fast.verify import verify, verify_bytes

from factories import compact_records, declaration, fleet_of, spec_records

REQ = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}]}


def investigator(name, version=2, residency="eu"):
    """An agent of the support namespace that declares order.investigate at `version`."""
    return declaration(name, namespace="support", capabilities=[("order.investigate", version)],
                       clearances=["orders.read"], residency=[residency])


def investigators(engine, *names, version=2):
    return fleet_of(engine, [investigator(name, version) for name in names])


def as_text(records):
    return [orjson.dumps(r) for r in records]


# -- record.write ---------------------------------------------------------------------------------

def test_a_resumed_placement_records_the_sizes_of_the_lists_it_cites(engine):
    fleet = investigators(engine, "a", "b", "c")
    fleet.add(investigator("old", version=1))
    first = fleet.place(REQ)
    scheduling = first.scheduling
    resumed = fleet.resume(first, seq=3).scheduling
    assert {k: v for k, v in resumed.items() if k.endswith("_count")} == {
        "candidates_count": len(scheduling["candidates"]),
        "filters_passed_count": len(scheduling["filters_passed"]),
        "filters_failed_count": len(scheduling["filters_failed"]),
        "scores_count": len(scheduling["scores"])}
    assert (resumed["candidates_count"], resumed["filters_failed_count"], resumed["scores_count"]) == (4, 1, 3)


@pytest.mark.parametrize("names, reason_limit, reason", [
    (["a"], None, "no eligible agent among 1 candidate: capability:order.investigate/2 failed by a"),
    (["a", "b", "c"], None,
     "no eligible agent among 3 candidates: capability:order.investigate/2 failed by a, b, c"),
    (["a", "b", "c"], 2,
     "no eligible agent among 3 candidates: capability:order.investigate/2 failed by a, b and 1 more"),
    (["a", "b"], 2, "no eligible agent among 2 candidates: capability:order.investigate/2 failed by a, b"),
])


def test_a_rejection_reason_names_every_failed_predicate_with_the_candidates_that_failed_it(
        engine, names, reason_limit, reason):
    fleet = investigators(engine, *names, version=1)
    assert fleet.place(REQ, reason_limit=reason_limit).rejection["reason"] == reason


def test_a_rejection_reason_lists_only_the_predicates_someone_failed_each_in_turn(engine):
    fleet = investigators(engine, "a", version=1)
    fleet.add(investigator("b", residency="us"))
    p = fleet.place(dict(REQ, clearances=["orders.read"], residency="eu"))
    assert p.rejection["reason"] == ("no eligible agent among 2 candidates: capability:order.investigate/2 "
                                     "failed by a; residency:eu failed by b")


@pytest.mark.parametrize("requirements, reason", [
    (REQ, "no eligible agent: the fleet has no agents to consider; the task requires "
          "capability:order.investigate/2"),
    (dict(REQ, clearances=["orders.read"]), "no eligible agent: the fleet has no agents to consider; the task "
                                            "requires capability:order.investigate/2, clearance:orders.read"),
    ({}, "no eligible agent: the fleet has no agents to consider (the task requires nothing)"),
])


def test_a_rejection_by_an_empty_fleet_says_so_and_what_the_task_required(engine, requirements, reason):
    assert Fleet(engine=engine).place(requirements).rejection["reason"] == reason


def test_timings_are_in_milliseconds_and_decided_at_is_rfc3339_utc_with_microseconds():
    moment = 1_700_000_000_123_456_789
    assert timings(SimpleNamespace(gather_ns=1_500_000, select_ns=250_000, decided_at_ns=moment)) == {
        "gather_ms": 1.5, "select_ms": 0.25, "decided_at": "2023-11-14T22:13:20.123456Z"}
    # A time not measured is left out, never written as zero; each second is formatted anew.
    assert timings(SimpleNamespace(gather_ns=None, select_ns=None, decided_at_ns=moment + 86_400 * 10**9 + 1000)) == {
        "decided_at": "2023-11-15T22:13:20.123457Z"}


def test_decided_at_is_in_utc_whatever_the_local_time_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        moment = 1_700_003_600_000_001_000  # a second not formatted before in this test run
        assert timings(SimpleNamespace(gather_ns=None, select_ns=None, decided_at_ns=moment)) == {
            "decided_at": "2023-11-14T23:13:20.000001Z"}
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_resumed_placement_says_resumed_inside_scheduling(engine):
    fleet = investigators(engine, "a")
    assert fleet.resume(fleet.place(REQ), seq=3).scheduling["resumed"] is True


# -- record.read ----------------------------------------------------------------------------------

def test_read_scheduling_says_what_is_not_a_scheduling_object_without_being_given_documents():
    assert read_scheduling(5).problems == ["content: expected an object carrying scheduling (§6), found 5"]
    assert read_scheduling({}).problems == ["scheduling: expected an object (§6), found nothing"]
    assert read_scheduling({"scheduling": 5}).problems == ["scheduling: expected an object (§6), found 5"]


def test_a_placement_is_a_full_explanation_only_with_every_list_readable(placed):
    scheduling = placed[2]["content"]["scheduling"]
    assert read_scheduling({"scheduling": scheduling}).full_explanation
    del scheduling["candidates"]
    record = read_scheduling({"scheduling": scheduling})
    assert not record.full_explanation and not record.resumed
    assert not RecordedPlacement().full_explanation and RecordedPlacement().resumed is False


def test_missing_documents_are_each_E_STRUCTURE(placed):
    del placed[2]["content"]["scheduling"]["requirements"]
    del placed[2]["content"]["scheduling"]["declaration"]
    assert [m for code, m in findings_both_ways(placed) if code == "E_STRUCTURE"] == [
        "scheduling.requirements: expected the required field 'requirements' (§6), found nothing",
        "scheduling.declaration: expected the required field 'declaration' (§6), found nothing"]


def test_the_generic_reader_names_a_document_missing_or_not_an_object():
    problems = read_scheduling({"scheduling": {"requirements": 5}}).problems
    assert "scheduling.requirements: expected an object, found 5" in problems
    assert "scheduling.declaration: expected the required field 'declaration' (§6), found nothing" in problems


def test_the_generic_reader_names_what_no_json_writer_can_write_in_a_document():
    # read_scheduling takes any value; a document holding an integer beyond 64 bits is named, not cached
    problems = read_scheduling({"scheduling": {"requirements": {"x": 2**64}}}).problems
    assert "scheduling.requirements.x: expected an integer from -2^63 to 2^64-1, found 18446744073709551616" in problems


def test_absent_reads_as_its_name():
    assert repr(ABSENT) == "ABSENT"


def test_a_route_that_is_not_a_rule_name_is_E_STRUCTURE_saying_what_it_is(placed):
    placed[2]["content"]["scheduling"]["route"] = 5
    assert ("E_STRUCTURE", "scheduling.route: expected the name of a rule (a non-empty string), found 5") \
        in findings_both_ways(placed)


def test_a_placement_without_filters_failed_gives_no_failed_predicate_for_anyone():
    assert RecordedPlacement().failed_predicate_of("order-analyst") is None


@pytest.fixture
def placed(engine):
    """A valid trace of one placement on agent "a" (of "a" and "b")."""
    return spec_records([investigators(engine, "a", "b").place(REQ)])


def as_lines(records):
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def findings_both_ways(records):
    from_values = [(f.code, f.message) for f in verify(records)]
    assert [(f.code, f.message) for f in verify_bytes(as_lines(records))] == from_values
    return from_values


SCORES = "scheduling.scores"
MALFORMED_SCHEDULING = {
    # Each leaves the chosen agent "a" out of scores: malformed scores are none (no E_EXPLANATION
    # for the missing agent), and every problem is reported, not only the first.
    "scores missing": (None, [f"{SCORES}: expected an object of {{total, ...}} per eligible candidate (§6; a "
                              "resumed placement may instead carry recorded_in), found nothing"]),
    "scores not an object": (5, [f"{SCORES}: expected an object of {{total, ...}} per eligible candidate, found 5"]),
    "a key not a name": ({"": {"total": 1}}, [f"{SCORES}: expected each key to be {NAME}, found string ''"]),
    "keys not names": ({"": {"total": 1}, "b": [], "c": {"total": 1}},
                       [f"{SCORES}: expected each key to be {NAME}, found string ''",
                        f"{SCORES}['b']: expected {{total, ...}}, found array of 0"]),
    "entries not objects": ({"x" * 61: 5, "y" * 60: 5, "b": {"total": 1}},
                            [f"{SCORES}[…]: expected {{total, ...}}, found 5",
                             f"{SCORES}[{'y' * 60!r}]: expected {{total, ...}}, found 5"]),
    "totals not numbers": ({"b": {"total": "1"}, "c": {}, "d": {"total": True}},
                           [f"{SCORES}['b'].total: expected a number, found string '1'",
                            f"{SCORES}['c'].total: expected a number, found nothing",
                            f"{SCORES}['d'].total: expected a number, found true"]),
}


@pytest.mark.parametrize("scores, expected", MALFORMED_SCHEDULING.values(), ids=list(MALFORMED_SCHEDULING))
def test_malformed_scores_are_E_STRUCTURE_each_named_by_its_path(placed, scores, expected):
    scheduling = placed[2]["content"]["scheduling"]
    if scores is None:
        del scheduling["scores"]
    else:
        scheduling["scores"] = scores
    assert findings_both_ways(placed) == [("E_STRUCTURE", m) for m in expected]


def test_malformed_filters_failed_entries_are_E_STRUCTURE_each_named_by_its_path(placed):
    placed[2]["content"]["scheduling"]["filters_failed"] = [5, 6, {"predicate": 1}, {"candidate": "", "predicate": "p"}]
    failed = "scheduling.filters_failed"
    assert findings_both_ways(placed) == [("E_STRUCTURE", m) for m in [
        f"{failed}[0]: expected {{candidate, predicate}}, found 5",
        f"{failed}[1]: expected {{candidate, predicate}}, found 6",
        f"{failed}[2].candidate: expected {NAME}, found nothing",
        f"{failed}[2].predicate: expected a predicate string, found 1",
        f"{failed}[3].candidate: expected {NAME}, found string ''"]]


RESUMED_MAY = "(§6; a resumed placement may instead carry recorded_in)"
MALFORMED_LISTS = {
    "candidates missing": ("candidates", None, [
        f"scheduling.candidates: expected an array of agent names {RESUMED_MAY}, found nothing"]),
    "candidates not an array": ("candidates", 5, ["scheduling.candidates: expected an array of agent names, found 5"]),
    "candidates not names": ("candidates", ["a", "", 3], [
        f"scheduling.candidates[1]: expected {NAME}, found string ''",
        f"scheduling.candidates[2]: expected {NAME}, found 3"]),
    "filters_passed missing": ("filters_passed", None, [
        f"scheduling.filters_passed: expected an array of predicate strings {RESUMED_MAY}, found nothing"]),
    "filters_passed not an array": ("filters_passed", 5, [
        "scheduling.filters_passed: expected an array of predicate strings, found 5"]),
    "filters_passed not strings": ("filters_passed", [1, "capability:order.investigate/2", None], [
        "scheduling.filters_passed[0]: expected a predicate string, found 1",
        "scheduling.filters_passed[2]: expected a predicate string, found null"]),
    "filters_failed missing": ("filters_failed", None, [
        f"scheduling.filters_failed: expected an array of {{candidate, predicate}} {RESUMED_MAY}, found nothing"]),
    "filters_failed not an array": ("filters_failed", 5, [
        "scheduling.filters_failed: expected an array of {candidate, predicate}, found 5"]),
}


@pytest.mark.parametrize("field, value, expected", MALFORMED_LISTS.values(), ids=list(MALFORMED_LISTS))
def test_a_missing_or_malformed_list_is_E_STRUCTURE_named_by_its_path(placed, field, value, expected):
    scheduling = placed[2]["content"]["scheduling"]
    if value is None:
        del scheduling[field]
    else:
        scheduling[field] = value
    assert findings_both_ways(placed) == [("E_STRUCTURE", m) for m in expected]
    assert not read_scheduling(placed[2]["content"]).full_explanation


@pytest.mark.parametrize("field", ["requirements", "declaration"])
def test_a_document_that_is_not_an_object_is_E_STRUCTURE_saying_what_it_is(placed, field):
    placed[2]["content"]["scheduling"][field] = 5
    assert ("E_STRUCTURE", f"scheduling.{field}: expected an object, found 5") in findings_both_ways(placed)


def test_a_document_with_a_problem_is_E_STRUCTURE_in_a_line_read_by_the_fast_reader(placed):
    placed[2]["content"]["scheduling"]["declaration"]["clearances"] = 5
    assert findings_both_ways(placed) == [("E_STRUCTURE", "scheduling.declaration.clearances: expected an array, found 5")]


def test_a_document_nested_beyond_the_records_rule_is_E_TRACE_not_E_STRUCTURE(placed):
    # 141 arrays inside requirements inside scheduling, content and the record: 145 levels, over 144.
    nested = 1
    for _ in range(141):
        nested = [nested]
    placed[2]["content"]["scheduling"]["requirements"]["x"] = nested
    findings = verify_bytes(as_lines(placed))
    assert [(f.code, f.seq, f.line) for f in findings] == [("E_TRACE", 3, 3)]
    assert "breaks the document rule" in findings[0].message


def test_the_fast_reader_reads_a_usual_placement_every_time_it_is_given(placed):
    typed = BOUND_RECORD.decode(orjson.dumps(placed[2])).content
    documents = ParsedDocuments()
    for _ in range(2):  # the second time from the parsed documents it keeps
        record = read_typed(typed, documents)
        assert record is not None and record.problems == [] and record.agent == ("a", "support")


def test_the_fast_reader_leaves_a_placement_citing_another_to_the_generic_reader(placed):
    content = placed[2]["content"]
    content["scheduling"]["recorded_in"] = {"kind": "task.bound", "seq": 1}
    assert read_typed(BOUND_RECORD.decode(orjson.dumps(placed[2])).content, ParsedDocuments()) is None


def test_a_placement_with_its_own_lists_that_cites_another_is_held_to_the_one_it_cites(placed):
    placed[2]["content"]["scheduling"]["recorded_in"] = {"kind": "task.bound", "seq": 999}
    messages = [m for code, m in findings_both_ways(placed) if code == "E_EXPLANATION"]
    assert len(messages) == 2
    assert "does not carry resumed: true" in messages[0]
    assert messages[1].startswith("recorded_in.seq names seq 999, which is not earlier than this record")


def test_spec_filters_failed_cross_checked_against_scores_or_predicates_alone():
    failed = SpecFailed([_entry("b", "p1"), _entry("c", "p2")])
    assert failed.cross_check({"c", "d"}, None) == (["c"], set())
    assert failed.cross_check(None, ["p1"]) == ([], {"p2"})
    assert failed.cross_check(None, None) == ([], set())
    assert failed.cross_check({"b"}, ["p1", "p2"]) == (["b"], set())


def _entry(candidate, predicate):
    from a3fast.record.read import _Failed
    return _Failed(candidate, predicate)


# -- the compact decoder's checks, in full words ------------------------------------------------------

def three_compact_records():
    """A compact trace whose placements carry each kind of fleet member: a snapshot of names (seq 3),
    a snapshot based on it (seq 6), and a rejection citing that one by seq (seq 8)."""
    fleet = investigators(None, "a", "b")
    first = fleet.place(REQ)
    fleet.add(investigator("c"))
    return compact_records([first, fleet.place(REQ), fleet.place({"capabilities": [{"name": "x.y", "version": 1}]})])


COMPACT_TRACE = three_compact_records()
AT = json_path("$.content", KEY)
REFUSED = {
    'not an object': (lambda t: t[2]["content"].__setitem__(KEY, 5),
        'seq 3', '{AT}: expected an object, found 5'),
    'format missing': (lambda t: t[2]["content"][KEY].pop("format"),
        'seq 3', '{AT}.format: unknown compact format none (this decoder reads formats 1 and 2)'),
    'format 1.0': (lambda t: t[2]["content"][KEY].__setitem__("format", 1.0),
        'seq 3', '{AT}.format: unknown compact format 1.0 (this decoder reads formats 1 and 2)'),
    'unknown member bound': (lambda t: t[2]["content"][KEY].__setitem__("extra", 1),
        'seq 3', '{AT}.extra: not a member of the compact form of a task.bound record (expected only format, fleet, '
        'candidates, filters_passed, failed, scores, requirements, declaration, rest)'),
    'unknown member rejected': (lambda t: t[7]["content"][KEY].__setitem__("scores", 1),
        'seq 8', '{AT}.scores: not a member of the compact form of a task.rejected record (expected only format, '
        'fleet, candidates, filters_passed, failed, derived_reason)'),
    'required missing': (lambda t: t[2]["content"][KEY].pop("declaration"),
        'seq 3', "{AT}: expected a member 'declaration', found none"),
    'fleet wrong type': (lambda t: t[2]["content"][KEY].__setitem__("fleet", "x"),
        'seq 3', "{AT}.fleet: expected a snapshot seq or a snapshot object, found string 'x'"),
    'fleet neither': (lambda t: t[2]["content"][KEY].__setitem__("fleet", {"live": ""}),
        'seq 3', "{AT}.fleet: expected a snapshot object with 'names' or 'base', found object with 1 field "
        "with neither"),
    'names snapshot extra': (lambda t: t[2]["content"][KEY]["fleet"].__setitem__("base", 1),
        'seq 3', '{AT}.fleet.base: not a member of a fleet snapshot (expected only names, live)'),
    'names snapshot no live': (lambda t: t[2]["content"][KEY]["fleet"].pop("live"),
        'seq 3', "{AT}.fleet: expected a member 'live', found none"),
    'names not array': (lambda t: t[2]["content"][KEY]["fleet"].__setitem__("names", "a"),
        'seq 3', "{AT}.fleet.names: expected an array of agent names, found string 'a'"),
    'name not string': (lambda t: t[2]["content"][KEY]["fleet"]["names"].__setitem__(1, 5),
        'seq 3', '{AT}.fleet.names[1]: expected an agent name (a string), found 5'),
    'based extra': (lambda t: t[5]["content"][KEY]["fleet"].__setitem__("names", []),
        'seq 6', '{AT}.fleet.base: not a member of a fleet snapshot (expected only names, live)'),
    'based unknown member': (lambda t: t[5]["content"][KEY]["fleet"].__setitem__("x", 1),
        'seq 6', '{AT}.fleet.x: not a member of a fleet snapshot (expected only base, names_added, live)'),
    'based no names_added': (lambda t: t[5]["content"][KEY]["fleet"].pop("names_added"),
        'seq 6', "{AT}.fleet: expected a member 'names_added', found none"),
    'based base not int': (lambda t: t[5]["content"][KEY]["fleet"].__setitem__("base", True),
        'seq 6', '{AT}.fleet.base: expected the seq of an earlier snapshot, found true'),
    'based base unknown': (lambda t: t[5]["content"][KEY]["fleet"].__setitem__("base", 2),
        'seq 6', '{AT}.fleet.base: fleet snapshot 2 is not earlier in the trace'),
    'based name twice': (lambda t: t[5]["content"][KEY]["fleet"]["names_added"].__setitem__(0, "a"),
        'seq 6', "{AT}.fleet.names_added: the name 'a' has two agent ids"),
    'based later name twice': (lambda t: t[5]["content"][KEY]["fleet"]["names_added"].__setitem__(0, "b"),
        'seq 6', "{AT}.fleet.names_added: the name 'b' has two agent ids"),
    'live not b64': (lambda t: t[2]["content"][KEY]["fleet"].__setitem__("live", "!!"),
        'seq 3', "{AT}.fleet.live: expected base64 text, found string '!!'"),
    'live not text': (lambda t: t[2]["content"][KEY]["fleet"].__setitem__("live", 5),
        'seq 3', '{AT}.fleet.live: expected base64 text, found 5'),
    'live not bitmap': (lambda t: t[2]["content"][KEY]["fleet"].__setitem__("live", "AAAA"),
        'seq 3', '{AT}.fleet.live: not a portable Roaring bitmap: Could not deserialize bitmap'),
    'candidates beyond': (lambda t: t[2]["content"][KEY].__setitem__("candidates", "OjAAAAEAAAAAAAIAEAAAAAAAAQACAA=="),
        'seq 3', '{AT}.candidates: agent id 2 is not in the fleet snapshot (2 names)'),
    'filters_passed not list': (lambda t: t[2]["content"][KEY].__setitem__("filters_passed", "x"),
        'seq 3', "{AT}.filters_passed: expected an array of predicate strings, found string 'x'"),
    'predicate not str': (lambda t: t[2]["content"][KEY]["filters_passed"].__setitem__(0, 5),
        'seq 3', '{AT}.filters_passed[0]: expected a predicate string, found 5'),
    'failed not list': (lambda t: t[2]["content"][KEY].__setitem__("failed", "x"),
        'seq 3', "{AT}.failed: expected an array of 1 bitmaps, one per predicate, found string 'x'"),
    'scores not obj': (lambda t: t[2]["content"][KEY].__setitem__("scores", []),
        'seq 3', '{AT}.scores: expected an object {ids, columns}, found array of 0'),
    'scores extra': (lambda t: t[2]["content"][KEY]["scores"].__setitem__("x", 1),
        'seq 3', '{AT}.scores.x: not a member of scores (expected only ids, columns)'),
    'scores no ids': (lambda t: t[2]["content"][KEY]["scores"].pop("ids"),
        'seq 3', "{AT}.scores: expected a member 'ids', found none"),
    'columns not list': (lambda t: t[2]["content"][KEY]["scores"].__setitem__("columns", {}),
        'seq 3', '{AT}.scores.columns: expected an array of [name, type, data] columns, found object with 0 fields'),
    'column not triple': (lambda t: t[2]["content"][KEY]["scores"]["columns"].__setitem__(0, ["total", "f64"]),
        'seq 3', '{AT}.scores.columns[0]: expected [name, type, data] with a string name and type, found array of 2'),
    'column short': (lambda t: t[2]["content"][KEY]["scores"]["columns"][0].__setitem__(2, "AAAAAAAAAAA="),
        'seq 3', '{AT}.scores.columns[0][2]: expected 2 8-byte values, one per scored agent, found 8 bytes'),
    'column type': (lambda t: t[2]["content"][KEY]["scores"]["columns"][0].__setitem__(1, "f32"),
        'seq 3', "{AT}.scores.columns[0][1]: expected 'f64', 'i64' or 'json', found string 'f32'"),
    'json column not list': (lambda t: t[2]["content"][KEY]["scores"]["columns"].__setitem__(0, ["total", "json", 5]),
        'seq 3', '{AT}.scores.columns[0][2]: expected an array of values, found 5'),
    'json column short': (lambda t: t[2]["content"][KEY]["scores"]["columns"].__setitem__(0, ["total", "json", [1]]),
        'seq 3', '{AT}.scores.columns[0][2]: expected 2 values, one per scored agent, found 1'),
    'column twice': (lambda t: t[2]["content"][KEY]["scores"]["columns"].__setitem__(1, ["total", "json", [1, 2]]),
        'seq 3', "{AT}.scores.columns: the column 'total' appears twice"),
    'rest not obj': (lambda t: t[2]["content"][KEY].__setitem__("rest", []),
        'seq 3', '{AT}.rest: expected an object (the other members of the scheduling object), found array of 0'),
    'rest with lists': (lambda t: t[2]["content"][KEY].__setitem__("rest", {"filters_failed": []}),
        'seq 3', "{AT}.rest.filters_failed: the compact member carries 'filters_failed' itself; it cannot be "
        "in rest too"),
    'spec beside': (lambda t: t[7]["content"].__setitem__("candidates", []),
        'seq 8', "$.content.candidates: a compact task.rejected record carries its 'candidates' in "
        "'a3fast.compact', found it beside too"),
}


@pytest.mark.parametrize("change, seq, message", REFUSED.values(), ids=list(REFUSED))
def test_each_member_the_decoder_refuses_is_named_with_what_it_expected(change, seq, message):
    trace = copy.deepcopy(COMPACT_TRACE)
    assert [r["content"][KEY]["fleet"] for r in trace if KEY in r["content"]][1:] == [
        {"base": 3, "names_added": ["c"], "live": trace[5]["content"][KEY]["fleet"]["live"]}, 6]
    change(trace)
    with pytest.raises(CompactError) as caught:
        list(decode_trace(trace))
    assert str(caught.value) == f"{seq}: {message.replace('{AT}', AT)}"


@pytest.mark.parametrize("record, message", [
    (5, "record 1: expected a record {seq, kind, content}, found 5"),
    ({"seq": 1, "kind": "task.bound"}, "record 1: expected a member 'content', found none")])


def test_a_trace_entry_that_is_no_record_is_named_by_its_place(record, message):
    with pytest.raises(CompactError) as caught:
        list(decode_trace([record]))
    assert str(caught.value) == message


@pytest.mark.parametrize("seq, kind, message", [("1", "task.bound", "seq: expected an integer, found string '1'"),
                                                 (1, 5, "seq 1: kind: expected a string, found 5")])


def test_decode_content_names_an_argument_of_the_wrong_type(seq, kind, message):
    with pytest.raises(CompactError) as caught:
        Decoder().decode_content(seq, kind, {})
    assert str(caught.value) == message


# -- the compact writer ---------------------------------------------------------------------------

def test_a_route_is_on_record_in_the_compact_form_of_bound_and_rejected_placements(engine):
    fleet = fleet_of(engine, [investigator("in-eu", residency="eu"), investigator("in-us", residency="us")])
    bound = fleet.place(REQ, route=Route("eu-only", {"residency": "eu"}))
    rejected = fleet.place(REQ, route=Route("nowhere", {"residency": "mars"}))
    assert bound.bound and not rejected.bound
    compact = compact_records([bound, rejected])
    assert compact[2]["content"][KEY]["rest"]["route"] == "eu-only"
    assert compact[4]["content"]["route"] == "nowhere"
    assert as_text(decode_trace(compact)) == as_text(spec_records([bound, rejected]))


def test_a_rejection_by_an_empty_fleet_has_a_compact_form_that_decodes_to_its_spec_form(engine):
    rejected = Fleet(engine=engine).place(REQ)
    compact = compact_records([rejected])
    assert compact[1]["content"][KEY]["fleet"] == {"names": [], "live": ""}
    assert as_text(decode_trace(compact)) == as_text(spec_records([rejected]))


def test_an_empty_id_set_is_written_as_the_empty_string(engine):
    # docs/compact-format.md: "" stands for the empty set, so a list no candidate failed costs nothing.
    fleet = investigators(engine, "a", "b")
    p = fleet.place(dict(REQ, clearances=["orders.read"], residency="eu"))
    member = compact_records([p])[2]["content"][KEY]
    assert member["failed"] == ["", "", ""]


def test_placements_from_another_fleet_get_a_snapshot_of_their_own(engine):
    # Two fleets built alike are at the same generation; only the index tells them apart.
    one, other = investigators(engine, "a1", "a2"), investigators(engine, "b1", "b2")
    assert one.generation == other.generation
    placements = [one.place(REQ), other.place(REQ)]
    compact = compact_records(placements)
    assert compact[5]["content"][KEY]["fleet"] == {"names": ["b1", "b2"], "live": compact[5]["content"][KEY]["fleet"]["live"]}
    assert as_text(decode_trace(compact)) == as_text(spec_records(placements))


def test_custom_scores_with_differing_components_have_no_compact_form(engine):
    fleet = investigators(engine, "a", "b")
    p = fleet.place(REQ, scorer=lambda task, agents: [{"total": 1.0, "x": 1}, {"total": 0.5, "y": 2}][:len(agents)])
    with pytest.raises(CompactError) as refused:
        Encoder().encode_placement(1, p)
    assert str(refused.value) == "custom scores with differing components have no compact form"


BEYOND = 2**64  # orjson cannot write it, so the encoder's check compares such values itself


@pytest.mark.parametrize("a, b", [
    ([BEYOND, 1], [BEYOND, 1.0]),                    # another type
    ({"a": BEYOND}, {"a": BEYOND, "b": 1}),          # another number of members
    ({"a": BEYOND, "b": 1}, {"b": 1, "a": BEYOND}),  # another member order
    ([BEYOND], [BEYOND, 1]),                         # another length
    ([BEYOND, 0.0], [BEYOND, -0.0]),                 # other float bits
    ([BEYOND, 1], [BEYOND, 2]),                      # another value
])


def test_values_beyond_orjson_are_the_same_json_only_when_written_alike(a, b):
    assert not _same_json(a, b) and not _same_json(b, a)
    assert _same_json(a, copy.deepcopy(a))


# -- the compact decoder --------------------------------------------------------------------------

def compact_trace(engine):
    fleet = investigators(engine, "a", "b", "c")
    return compact_records([fleet.place(REQ), fleet.place(REQ)])


def test_a_forgotten_snapshot_is_not_earlier_in_the_trace(engine):
    trace = compact_trace(engine)
    snapshot, referrer = trace[2], trace[5]
    assert isinstance(snapshot["content"][KEY]["fleet"], dict) and referrer["content"][KEY]["fleet"] == 3
    decoder = Decoder()
    decoder.decode_content(3, "task.bound", snapshot["content"])
    decoder.forget(3)
    with pytest.raises(CompactError, match="fleet snapshot 3 is not earlier in the trace"):
        decoder.decode_content(6, "task.bound", referrer["content"])


def test_a_forgotten_unreadable_record_is_no_longer_named_as_unreadable(engine):
    trace = compact_trace(engine)
    broken = copy.deepcopy(trace[2]["content"])
    broken[KEY]["filters_passed"] = 5
    decoder = Decoder()
    with pytest.raises(CompactError):
        decoder.decode_content(3, "task.bound", broken)
    with pytest.raises(CompactError, match="in a record that could not be read"):
        decoder.decode_content(6, "task.bound", trace[5]["content"])
    decoder.forget(3)
    with pytest.raises(CompactError, match="fleet snapshot 3 is not earlier in the trace"):
        decoder.decode_content(6, "task.bound", trace[5]["content"])


def test_a_member_name_that_json_cannot_hold_is_named_by_its_repr(engine):
    content = copy.deepcopy(compact_trace(engine)[2]["content"])
    content[KEY][None] = 1
    with pytest.raises(CompactError, match=r"\[None\]: not a member of"):
        Decoder().decode_content(3, "task.bound", content)


# -- the compact reader of the verifier -----------------------------------------------------------

NAMES_TABLE = ["a", "b", "c", "d"]


def compact_failed():
    names = NameTable.of(NAMES_TABLE, "names")
    return CompactFailed(["p1", "p2"], [BitMap([0]), BitMap([1, 2])], names), names


def test_compact_filters_failed_cross_checked_against_names_in_any_form():
    failed, _ = compact_failed()
    assert failed.cross_check({"b", "d"}, None) == (["b"], set())
    assert failed.cross_check(None, None) == ([], set())
    assert failed.cross_check(None, ["p1"]) == ([], {"p2"})


def test_compact_scores_hold_only_agent_names():
    _, names = compact_failed()
    scored = CompactScored(BitMap([0, 3]), names)
    assert "a" in scored and "d" in scored and "b" not in scored
    assert ["a"] not in scored and None not in scored


def test_a_snapshot_written_in_a_compact_rejection_serves_the_placements_after_it(engine):
    fleet = investigators(engine, "a", "b", "c")
    placements = [fleet.place(dict(REQ, tools=["x"])), fleet.place(REQ)]
    compact = compact_records(placements)
    assert isinstance(compact[1]["content"][KEY]["fleet"], dict)
    assert compact[4]["content"][KEY]["fleet"] == 2
    assert verify(compact) == []


def test_a_compact_snapshot_with_an_empty_agent_name_is_E_STRUCTURE(engine):
    # where the record's lists hold it, as in the spec form it decodes to, in the same words
    trace = compact_trace(engine)
    trace[2]["content"][KEY]["fleet"]["names"][1] = ""
    findings = [(f.code, f.seq, f.message) for f in verify(trace[:3]) if f.code == "E_STRUCTURE"]
    assert findings and {seq for _, seq, _ in findings} == {3}
    assert all(message.endswith(f"expected {NAME}, found string ''") or
               message.endswith(f"to be {NAME}, found string ''") for _, _, message in findings)
    decoded = list(decode_trace(trace[:3]))
    assert findings == [(f.code, f.seq, f.message) for f in verify(decoded) if f.code == "E_STRUCTURE"]


def test_both_documents_of_a_compact_placement_report_their_problems(engine):
    trace = compact_trace(engine)
    trace[2]["content"][KEY]["requirements"] = {"v": "1.0", "clearances": 5}
    trace[2]["content"][KEY]["declaration"] = {"v": "1.0", "agent": 5}
    messages = [f.message for f in verify(trace[:3]) if f.code == "E_STRUCTURE"]
    assert any(m.startswith("scheduling.requirements.") for m in messages), messages
    assert any(m.startswith("scheduling.declaration.") for m in messages), messages


# -- the compact encoder of spec records ----------------------------------------------------------

def encoded(records):
    encoder = Encoder()
    return [dict(r, content=encoder.encode(r["seq"], r["kind"], r["content"])) for r in records]


def test_a_spec_trace_of_placements_encodes_wholly_to_compact_form_and_writes_its_snapshot_once(engine):
    fleet = investigators(engine, "a", "b", "c")
    for placements in ([fleet.place(REQ), fleet.place(dict(REQ, tools=["x"])), fleet.place(REQ)],
                       [fleet.place(dict(REQ, tools=["x"])), fleet.place(REQ), fleet.place(REQ)]):
        spec = spec_records(placements)
        compact = encoded(copy.deepcopy(spec))
        placed_at = [r["seq"] for r in compact if r["kind"] in ("task.bound", "task.rejected")]
        members = [r["content"][KEY] for r in compact if r["seq"] in placed_at]
        assert len(members) == 3 and isinstance(members[0]["fleet"], dict)
        assert [m["fleet"] for m in members[1:]] == [placed_at[0], placed_at[0]]
        assert as_text(decode_trace(compact)) == as_text(spec)


def test_a_bound_record_whose_scores_are_not_objects_stays_in_spec_form(placed):
    placed[2]["content"]["scheduling"]["scores"] = {"a": 1.5, "b": 0.5}
    before = as_text(placed)
    assert as_text(encoded(placed)) == before


def test_a_bound_record_with_no_scores_has_a_compact_form(placed):
    placed[2]["content"]["scheduling"]["scores"] = {}
    compact = encoded(copy.deepcopy(placed))
    assert compact[2]["content"][KEY]["scores"] == {"ids": "", "columns": []}
    assert as_text(decode_trace(compact)) == as_text(placed)


@pytest.mark.parametrize("totals, column", [
    ([-2**63, 2**63 - 1], "i64"),   # the bounds of a signed 64-bit integer
    ([-2**63 - 1, 0], "json"),
    ([0, 2**63], "json"),
    ([1, 2.5], "json"),
])


def test_integer_score_columns_are_i64_within_64_bits_and_json_beyond(placed, totals, column):
    placed[2]["content"]["scheduling"]["scores"] = {"a": {"total": totals[0]}, "b": {"total": totals[1]}}
    placed[2]["content"]["scheduling"]["filters_failed"] = []
    compact = encoded(copy.deepcopy(placed))
    assert compact[2]["content"][KEY]["scores"]["columns"][0][:2] == ["total", column]
    decoded = list(decode_trace(compact))
    assert decoded == placed and [type(t) for t in totals] == [
        type(e["total"]) for e in decoded[2]["content"]["scheduling"]["scores"].values()]


def test_score_entries_with_no_components_have_a_compact_form(placed):
    placed[2]["content"]["scheduling"]["scores"] = {"a": {}, "b": {}}
    placed[2]["content"]["scheduling"]["filters_failed"] = []
    compact = encoded(copy.deepcopy(placed))
    assert KEY in compact[2]["content"] and compact[2]["content"][KEY]["scores"]["columns"] == []
    assert as_text(decode_trace(compact)) == as_text(placed)


@pytest.mark.parametrize("kind, content", [
    ("task.bound", 5), ("task.bound", "a3fast.compact"), ("task.rejected", ["candidates"]),
    ("task.submitted", {"candidates": ["a"], "filters_failed": []}),
    ("task.admitted", {"scheduling": {"candidates": ["a"], "filters_passed": [], "filters_failed": [],
                                      "scores": {"a": {"total": 1}}, "requirements": {}, "declaration": {}}}),
])


def test_the_encoder_gives_back_what_is_no_placement_content_as_it_is(kind, content):
    assert Encoder().encode(1, kind, copy.deepcopy(content)) == content


def test_a_compact_rejection_read_as_a_member_has_no_scores_and_nothing_else():
    snapshots = Snapshots()
    for record in COMPACT_TRACE[:7]:
        if KEY in record["content"]:
            snapshots.read_member(record["seq"], record["kind"], record["content"])
    member = snapshots.read_member(8, "task.rejected", COMPACT_TRACE[7]["content"])
    assert list(member.names) == ["a", "b", "c"] and list(member.candidates) == [0, 1, 2]
    assert member.score_ids == BitMap() and member.score_columns == [] and member.rest == {}
    assert member.score_map() == {}


def test_a_whole_name_table_refused_leaves_the_line_it_would_share_as_it_was():
    # its live set is checked before the shared list of names grows by what it lists
    import base64

    from a3fast.roaring import serialize_ids

    def ids(values):
        return base64.b64encode(serialize_ids(values)).decode()

    snapshots = Snapshots()
    first, _ = snapshots.resolve({"names": ["a", "b"], "live": ids([0, 1])}, "first")
    snapshots.tables[1] = (first, ids([0, 1]))
    with pytest.raises(CompactError, match="agent id 99 is not in the fleet snapshot"):
        snapshots.resolve({"names": ["a", "b", "junk"], "live": ids([0, 99])}, "second")
    assert first.names == ["a", "b"]
    later, _ = snapshots.resolve({"base": 1, "names_added": ["c"], "live": ids([0, 2])}, "third")
    assert list(later) == ["a", "b", "c"] and later.names is first.names    # still one line

