"""Routes (§6: a route may only add) and the Placement's own readings of a decision.

Each test names the rule it holds; docs/testing.md lists the mutants of a3fast.fleet.placement that no
test can kill and why.
"""
import pytest

from a3fast.fleet.placement import Route, RouteError
from a3fast.schema import parse_requirements

from factories import declaration, fleet_of

TASK = {"capabilities": [{"name": "a.b", "version": 1}], "clearances": ["c.d"], "tools": ["t1"],
        "exclude": ["x"], "model": {"latency_class": "batch"}}


@pytest.mark.parametrize("key, added, derived", [
    ("capabilities", [{"name": "e.f", "version": 2}, {"name": "a.b", "version": 1}], "capability:e.f/2"),
    ("clearances", ["g.h", "c.d"], "clearance:g.h"),
    ("tools", ["t2", "t1"], "tool:t2"),
    ("exclude", ["y", "x"], "anti-affinity:y"),
])
def test_a_route_appends_to_a_list_what_the_task_lacks_once(key, added, derived):
    matched = Route("r", {key: added}).apply(parse_requirements(TASK))
    assert derived in matched.predicates
    assert matched.doc[key] == TASK[key] + added[:1]


def test_a_route_adds_a_list_the_task_does_not_state():
    matched = Route("r", {"tools": ["t9"]}).apply(parse_requirements({"clearances": ["c.d"]}))
    assert matched.predicates == ("clearance:c.d", "tool:t9")


def test_a_route_adds_model_fields_beside_those_the_task_states():
    matched = Route("r", {"model": {"latency_class": "batch", "cost_ceiling_usd": "1"}}).apply(
        parse_requirements(TASK))
    assert matched.doc["model"] == {"latency_class": "batch", "cost_ceiling_usd": "1"}
    alone = Route("r", {"model": {"latency_class": "interactive"}}).apply(parse_requirements({}))
    assert alone.predicates == ("model.latency_class:interactive",)


def test_a_route_may_not_change_a_model_field_the_task_states():
    with pytest.raises(RouteError, match=r"route 'r' would change model.latency_class from 'batch' to 'fast'"):
        Route("r", {"model": {"latency_class": "fast"}}).apply(parse_requirements(TASK))


def test_a_route_may_not_change_a_single_value_the_task_states():
    with pytest.raises(RouteError, match=r"route 'r' would change agentRef from 'a' to 'b'; a route may only add"):
        Route("r", {"agentRef": "b"}).apply(parse_requirements({"agentRef": "a"}))


def test_a_route_adds_only_requirement_fields():
    with pytest.raises(RouteError, match=r"route 'r': cannot add 'session'; a route adds capabilities"):
        Route("r", {"session": "s"}).apply(parse_requirements({}))


@pytest.mark.parametrize("adds", [{"model": 5}, {"model": "ab"}, {"model": ["us-gov"]}, {"capabilities": 3},
                                  {"clearances": True}, {"tools": None}, {"exclude": "x"}, {"v": "1.0"}])
def test_a_route_that_could_never_apply_is_refused_when_made(adds):
    # refused with a RouteError before any task is routed, never a TypeError at the first task
    with pytest.raises(RouteError, match=r"route 'r': "):
        Route("r", adds)


@pytest.mark.parametrize("adds", [{"tools": []}, {"exclude": []}, {"model": {}}, {"residency": None},
                                  {"model": {"cost_ceiling_usd": "1"}}, {"agentRef": None, "capabilities": []}])
def test_a_route_that_adds_no_predicate_is_refused(adds):
    with pytest.raises(RouteError, match=r"route 'r' adds no requirements; a route adds at least one"):
        Route("r", adds)


def test_a_refused_route_says_why():
    with pytest.raises(RouteError, match=r"a route needs a name \(a non-empty string\), found ''"):
        Route("", {"residency": "eu"})
    with pytest.raises(RouteError, match=r"route 'no-op' adds no requirements"):
        Route("no-op", {})


def test_a_placement_describes_itself_by_its_decision(engine):
    fleet = fleet_of(engine, [declaration("a")])
    bound, unbound = fleet.place({}), fleet.place({"clearances": ["c.d"]})
    assert repr(bound) == f"<Placement bound to 'a': 0 predicates, engine {engine}>"
    assert repr(unbound) == f"<Placement unschedulable: 1 predicates, engine {engine}>"
    assert bound.summary().startswith("1/1 agents eligible") and "chose a" in bound.summary()
    assert "lack clearance:c.d" in unbound.summary()


def test_a_placement_keeps_what_was_submitted_apart_from_what_a_route_added(engine):
    fleet = fleet_of(engine, [declaration("a", residency=["eu"])])
    p = fleet.place({}, route=Route("eu", {"residency": "eu"}))
    assert p.submitted.predicates == () and p.predicates == ("residency:eu",) and p.seq is None
    assert "a" in p._repr_html_() and "1" in fleet._repr_html_()


def test_a_route_given_tuples_from_python_adds_them_as_lists():
    routed = Route("gov", {"clearances": ("g.r",), "tools": ("t",)}).apply(parse_requirements({}))
    assert routed.clearances == ("g.r",) and routed.tools == ("t",)
