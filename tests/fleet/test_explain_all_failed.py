"""`a3fast.explain.all_failed`: every predicate each ineligible agent fails, not only the first,
against the literal reading of §5 (tests/oracle.py), including `agentRef` and `anti-affinity`."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from a3fast.explain import all_failed

from factories import declaration, fleet_of
from oracle import every_failed, predicates_of
from strategies import NAMES, declarations, requirements


@pytest.fixture
def fleet(engine):
    return fleet_of(engine, [declaration("a", clearances=["r.read"]), declaration("b"),
                             declaration("c", clearances=["r.read"])])


def test_agent_ref_is_failed_by_every_agent_but_the_named_one(fleet):
    assert all_failed(fleet, {"agentRef": "b"}) == {"a": ["agentRef:b"], "c": ["agentRef:b"]}


def test_agent_ref_is_listed_after_the_predicates_before_it(fleet):
    failures = all_failed(fleet, {"clearances": ["r.read"], "agentRef": "a", "exclude": ["c"]})
    assert failures == {"b": ["clearance:r.read", "agentRef:a"],
                        "c": ["agentRef:a", "anti-affinity:c"]}


def test_agent_ref_to_an_agent_not_in_the_fleet_is_failed_by_every_agent(fleet):
    assert all_failed(fleet, {"agentRef": "stranger"}) == {name: ["agentRef:stranger"] for name in "abc"}


def test_agent_ref_to_a_removed_agent_is_failed_by_every_live_agent(fleet):
    fleet.remove("b")
    assert all_failed(fleet, {"agentRef": "b"}) == {"a": ["agentRef:b"], "c": ["agentRef:b"]}


def test_exclude_is_failed_only_by_the_excluded_agent(fleet):
    assert all_failed(fleet, {"exclude": ["a", "stranger"]}) == {"a": ["anti-affinity:a"]}


@settings(max_examples=80)
@given(docs=st.lists(declarations(), max_size=8), removed=st.lists(st.sampled_from(NAMES), max_size=2),
       req=requirements())
def test_all_failed_is_every_predicate_each_agent_fails(engine, docs, removed, req):
    fleet = fleet_of(engine, docs)
    live = {doc["agent"]["name"]: doc for doc in docs}
    for name in removed:
        if name in live:
            fleet.remove(name)
            del live[name]
    predicates = predicates_of(req)
    expected = {name: every_failed(doc, predicates) for name, doc in live.items()}
    assert all_failed(fleet, req) == {name: missed for name, missed in expected.items() if missed}
    # the first of each list is the placement's first-failed predicate (§6)
    assert {name: missed[0] for name, missed in all_failed(fleet, req).items()} == fleet.place(req).first_failed()
