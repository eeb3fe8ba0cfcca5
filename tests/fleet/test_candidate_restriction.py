"""`place(..., candidates=names)`: a placement over only some agents of the fleet (a scheduler that
offers a subset of nodes). The record's candidates, filters_failed and scores are those agents only,
in join order; names not in the fleet are left out; the verifier accepts the trace; the restricted
explanation is never reused for the unrestricted task; and a placement without `remember_session`
changes nothing in the fleet."""
from __future__ import annotations

import orjson
import pytest

from a3fast import Fleet
from a3fast.record.write import placement_records
from a3fast.verify import verify

REQ = {"v": "1.0", "clearances": ["orders.read"], "residency": "eu"}


def agent(name, clearances=("orders.read",), residency="eu"):
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"}, "capabilities": [],
            "clearances": list(clearances), "residency": [residency]}


def build(engine):
    fleet = Fleet(engine=engine)
    for doc in (agent("a"), agent("b", residency="us"), agent("c"), agent("d", clearances=()),
                agent("e")):
        fleet.add(doc)
    fleet.remove("e")
    return fleet


def trace(p) -> list[dict]:
    return [{"seq": seq, "kind": kind, "content": orjson.loads(content)}
            for seq, (kind, content) in enumerate(placement_records(p), 1)]


def test_a_restricted_placement_considers_only_the_named_agents_in_join_order(engine):
    fleet = build(engine)
    # given out of order, with a repeat, a removed agent and a stranger
    p = fleet.place(REQ, candidates=["d", "b", "stranger", "e", "b", "c"])
    assert p.agent == "c"
    assert p.candidates == ["b", "c", "d"]
    assert p.scheduling["candidates"] == ["b", "c", "d"]
    assert p.scheduling["filters_failed"] == [{"candidate": "d", "predicate": "clearance:orders.read"},
                                              {"candidate": "b", "predicate": "residency:eu"}]
    assert list(p.scheduling["scores"]) == ["c"]
    assert verify(trace(p)) == []


def test_a_restricted_rejection_names_only_the_named_agents(engine):
    fleet = build(engine)
    p = fleet.place(REQ, candidates=["b", "d"])
    assert not p.bound
    assert p.rejection["candidates"] == ["b", "d"]
    assert p.rejection["reason"] == ("no eligible agent among 2 candidates: clearance:orders.read failed by d; "
                                     "residency:eu failed by b")
    assert verify(trace(p)) == []


def test_no_named_agent_in_the_fleet_leaves_no_candidates(engine):
    fleet = build(engine)
    p = fleet.place(REQ, candidates=["stranger", "e"])
    assert not p.bound and p.rejection["candidates"] == []
    assert verify(trace(p)) == []


def test_a_restricted_placement_is_not_reused_for_the_whole_fleet(engine):
    fleet = build(engine)
    assert fleet.place(REQ, candidates=["c"], remember_session=False).candidates == ["c"]
    whole = fleet.place(REQ, remember_session=False)
    assert whole.candidates == ["a", "b", "c", "d"] and whole.agent == "a"
    # and the whole fleet's explanation, now cached, is not reused for a restriction
    assert fleet.place(REQ, candidates=["c", "d"], remember_session=False).candidates == ["c", "d"]
    assert fleet.place(REQ, remember_session=False).candidates == ["a", "b", "c", "d"]


def test_restricted_records_equal_those_of_a_fleet_holding_only_those_agents(engine):
    fleet = build(engine)
    alone = Fleet(engine=engine)
    for doc in (agent("b", residency="us"), agent("c"), agent("d", clearances=())):
        alone.add(doc)
    restricted = fleet.place(REQ, candidates=["b", "c", "d"], remember_session=False)
    assert restricted.scheduling["candidates"] == alone.place(REQ).scheduling["candidates"]
    assert restricted.scheduling["filters_failed"] == alone.place(REQ).scheduling["filters_failed"]
    assert restricted.scheduling["scores"] == alone.place(REQ).scheduling["scores"]


def test_one_string_is_not_taken_for_a_list_of_names(engine):
    with pytest.raises(TypeError, match="candidates"):
        build(engine).place(REQ, candidates="abc")


def test_a_placement_without_remember_session_changes_no_state(engine):
    fleet = build(engine)
    fleet.record_outcome("a", "review", True)
    fleet.hold_session("c", "s-old")
    before = (fleet.generation, fleet.membership, {n: (fleet.holds_session(n, "s-1"), fleet.holds_session(n, "s-old"),
                                                       fleet.outcomes(n, "review")) for n in fleet.names()})
    for candidates in (None, ["a", "c"]):
        p = fleet.place({**REQ, "session": "s-1", "kind": "review"}, remember_session=False,
                        candidates=candidates)
        assert p.bound
    fleet.place_many([{**REQ, "session": "s-1"}] * 3, remember_session=False)
    after = (fleet.generation, fleet.membership, {n: (fleet.holds_session(n, "s-1"), fleet.holds_session(n, "s-old"),
                                                      fleet.outcomes(n, "review")) for n in fleet.names()})
    assert after == before
    # and with it, the bound agent holds the session: the one change a placement makes
    p = fleet.place({**REQ, "session": "s-1"}, candidates=["c"])
    assert fleet.holds_session("c", "s-1") and fleet.generation == before[0] + 1
