"""Routes (§6 `route`): a named control-plane rule that may only add requirements, and its name on
record. The verifier reads `route` as the name of a rule, a non-empty string; null is no route
(docs/verify.md). A route a3fast records must be one its own verifier accepts."""
from __future__ import annotations

import copy

import orjson
import pytest

import a3fast
from a3fast import Route
from a3fast.record.compact import KEY, encode_trace
from a3fast.verify import verify, verify_bytes

from factories import declaration, fleet_of

REQ = {"v": "1.0", "clearances": ["orders.read"]}


@pytest.fixture
def fleet(engine):
    return fleet_of(engine, [declaration(f"in-{label}", namespace="support", clearances=["orders.read"],
                                         residency=[label]) for label in ("eu", "us")])


def trace_of(p, req) -> list[dict]:
    """The trace records of one bound placement, built from its public record forms."""
    assert p.bound
    return [{"seq": 1, "kind": "task.submitted", "content": {"requirements": req}},
            {"seq": 2, "kind": "task.admitted", "content": {"agent": {"name": p.agent, "namespace": "support"}}},
            {"seq": 3, "kind": "task.bound", "content": {"scheduling": orjson.loads(p.scheduling_json())}}]


def codes(findings) -> set[tuple[str, int | None]]:
    return {(f.code, f.seq) for f in findings if f.is_error}


def test_a_route_adds_its_requirements_and_names_itself_on_record(fleet):
    p = fleet.place(REQ, route=Route("eu-only", {"residency": "eu"}))
    assert p.agent == "in-eu"
    assert p.scheduling["route"] == "eu-only"
    assert p.scheduling["filters_passed"] == ["clearance:orders.read", "residency:eu"]
    assert verify(trace_of(p, REQ)) == []


def test_a_rejection_through_a_route_names_it_too(fleet):
    p = fleet.place(REQ, route=Route("nowhere", {"residency": "mars"}))
    assert not p.bound and p.rejection["route"] == "nowhere"


def test_a_recorded_empty_route_is_E_STRUCTURE(fleet):
    trace = trace_of(fleet.place(REQ, route=Route("eu-only", {"residency": "eu"})), REQ)
    trace[2]["content"]["scheduling"]["route"] = ""
    as_file = b"".join(orjson.dumps(record) + b"\n" for record in trace)
    for findings in (verify(trace), verify_bytes(as_file)):
        structure = [f for f in findings if f.code == "E_STRUCTURE"]
        assert [f.seq for f in structure] == [3] and "scheduling.route" in structure[0].message


@pytest.mark.parametrize("route", ["", 0, False, [], {}, ["eu-only"]], ids=repr)
def test_a_recorded_route_that_is_not_a_rule_name_is_E_STRUCTURE(fleet, route):
    trace = trace_of(fleet.place(REQ, route=Route("eu-only", {"residency": "eu"})), REQ)
    trace[2]["content"]["scheduling"]["route"] = route
    assert ("E_STRUCTURE", 3) in codes(verify(trace))


def test_a_recorded_empty_route_is_E_STRUCTURE_in_the_compact_form_too(fleet):
    trace = trace_of(fleet.place(REQ, route=Route("eu-only", {"residency": "eu"})), REQ)
    compact = copy.deepcopy(list(encode_trace(trace)))
    rest = compact[2]["content"][KEY]["rest"]
    assert rest["route"] == "eu-only"
    assert verify(compact) == []
    rest["route"] = ""
    structure = [f for f in verify(compact) if f.code == "E_STRUCTURE"]
    assert [f.seq for f in structure] == [3] and "route" in structure[0].message


def test_a_null_route_is_no_route(fleet):
    # with no route on record, the added residency is a requirement nobody is named for
    trace = trace_of(fleet.place(REQ, route=Route("eu-only", {"residency": "eu"})), REQ)
    trace[2]["content"]["scheduling"]["route"] = None
    assert codes(verify(trace)) == {("E_REQUIREMENTS_MISMATCH", 3)}


def test_a_route_may_not_change_what_the_task_stated(fleet):
    with pytest.raises(a3fast.A3Error, match="only add"):
        fleet.place({"residency": "us"}, route=Route("eu-only", {"residency": "eu"}))


def test_a_route_without_a_name_is_refused(fleet):
    with pytest.raises(a3fast.A3Error):
        fleet.place(REQ, route=Route("", {"residency": "eu"}))


def test_a_route_that_adds_nothing_is_refused(fleet):
    with pytest.raises(a3fast.A3Error):
        fleet.place(REQ, route=Route("no-op", {}))
