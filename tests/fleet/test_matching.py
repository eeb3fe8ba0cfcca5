"""Matching (§5) and placement records (§6), each rule a test, every test on both engines."""
import orjson
import pytest

from a3fast import Fleet, FleetError, SchemaError
from a3fast.fleet.placement import Route, RouteError
from a3fast.predicates import derive_predicates, parse_predicate, satisfies
from a3fast.schema import parse_declaration, parse_requirements
from a3fast.trace import placement_lines

from factories import (declaration, fleet_of, section_3_declaration, section_10_requirements,
                       section_10_summariser)

ORDER_ANALYST = section_3_declaration()
SUMMARISER = section_10_summariser()
SECTION_10_REQ = section_10_requirements()


@pytest.fixture
def fleet(engine):
    return fleet_of(engine, [ORDER_ANALYST, SUMMARISER])


# -- §10 worked example ---------------------------------------------------------------------------
def test_section_10_example_gives_the_recorded_explanation(fleet):
    p = fleet.place(SECTION_10_REQ)
    assert p.bound and p.agent == "order-analyst"
    s = p.scheduling
    assert s["candidates"] == ["order-analyst", "summariser"]
    assert s["filters_passed"] == ["capability:order.investigate/2", "clearance:orders.read", "residency:eu"]
    assert s["filters_failed"] == [{"candidate": "summariser", "predicate": "capability:order.investigate/2"}]
    assert list(s["scores"]) == ["order-analyst"]
    assert s["requirements"] == SECTION_10_REQ and s["declaration"] == ORDER_ANALYST


def test_spec_json_bytes_parse_to_the_scheduling_dict(fleet):
    p = fleet.place(SECTION_10_REQ)
    assert orjson.loads(p.scheduling_json()) == p.scheduling


# -- §5 predicates --------------------------------------------------------------------------------
def test_capability_predicate_needs_the_exact_major_version(fleet):
    p = fleet.place({"capabilities": [{"name": "order.investigate", "version": 1}]})
    assert not p.bound
    assert p.first_failed() == {"order-analyst": "capability:order.investigate/1",
                                "summariser": "capability:order.investigate/1"}


def test_clearance_predicate_has_no_hierarchy(engine):
    f = fleet_of(engine, [declaration("a", clearances=["refunds.issue"])])
    assert not f.place({"clearances": ["orders.read"]}).bound
    assert f.place({"clearances": ["refunds.issue"]}).agent == "a"


def test_tool_predicate_needs_a_binding_and_names_are_opaque(engine):
    f = fleet_of(engine, [declaration("bound", tools=["mcp:github/create_issue"]), declaration("unbound")])
    p = f.place({"tools": ["mcp:github/create_issue"]})
    assert p.agent == "bound"
    assert p.first_failed() == {"unbound": "tool:mcp:github/create_issue"}


def test_residency_predicate_needs_the_label_and_absent_is_not_a_match(engine):
    f = fleet_of(engine, [
        declaration("eu", residency=["eu", "uk"]),
        # no residency: unconstrained, yet does not *contain* "eu" (docs/design.md, reading 4)
        declaration("anywhere"),
    ])
    p = f.place({"residency": "eu"})
    assert p.eligible == ["eu"] and p.first_failed() == {"anywhere": "residency:eu"}


def test_latency_class_predicate_needs_equality_and_a_model(engine):
    f = fleet_of(engine, [
        declaration("fast", model={"latency_class": "interactive"}),
        declaration("slow", model={"latency_class": "batch"}),
        declaration("nomodel"),
    ])
    p = f.place({"model": {"latency_class": "batch"}})
    assert p.eligible == ["slow"]
    assert p.first_failed() == {"fast": "model.latency_class:batch", "nomodel": "model.latency_class:batch"}


def test_agent_ref_is_satisfied_only_by_that_agent(fleet):
    p = fleet.place({"agentRef": "summariser"})
    assert p.agent == "summariser" and p.first_failed() == {"order-analyst": "agentRef:summariser"}
    assert not fleet.place({"agentRef": "nobody"}).bound


def test_anti_affinity_is_satisfied_by_every_other_agent(fleet):
    p = fleet.place({"exclude": ["order-analyst"]})
    assert p.agent == "summariser" and p.first_failed() == {"order-analyst": "anti-affinity:order-analyst"}
    assert fleet.place({"exclude": ["nobody"]}).eligible == ["order-analyst", "summariser"]


def test_all_fields_absent_means_every_agent_is_eligible(fleet):
    p = fleet.place({})
    assert p.eligible == ["order-analyst", "summariser"] and p.scheduling["filters_passed"] == []


def test_first_failed_follows_derivation_order(engine):
    f = fleet_of(engine, [declaration("none")])
    p = f.place({"exclude": ["none"], "agentRef": "x", "model": {"latency_class": "batch"}, "residency": "eu",
                 "tools": ["t"], "clearances": ["a.b"], "capabilities": [{"name": "c.d", "version": 1}]})
    assert p.predicates == ("capability:c.d/1", "clearance:a.b", "tool:t", "residency:eu",
                            "model.latency_class:batch", "agentRef:x", "anti-affinity:none")
    assert p.first_failed() == {"none": "capability:c.d/1"}


def test_a_repeated_predicate_keeps_its_first_place():
    req = parse_requirements({"clearances": ["a.b", "c.d", "a.b"], "exclude": ["x", "x"]})
    assert derive_predicates(req) == ("clearance:a.b", "clearance:c.d", "anti-affinity:x")


def test_predicates_parse_by_their_first_colon():
    assert parse_predicate("tool:mcp:github/create_issue") == ("tool", "mcp:github/create_issue", None)
    assert parse_predicate("capability:order.investigate/12") == ("capability", "order.investigate", 12)
    assert parse_predicate("residency:eu:west") == ("residency", "eu:west", None)
    assert parse_predicate("capability:x.y") is None and parse_predicate("nonsense:x") is None
    assert parse_predicate("capability:x.y/02") is None


def test_satisfaction_reads_the_declaration_literally():
    decl = parse_declaration(ORDER_ANALYST)
    assert satisfies(decl, "capability:order.investigate/2") and not satisfies(decl, "capability:order.investigate/3")
    assert satisfies(decl, "anti-affinity:someone") and not satisfies(decl, "anti-affinity:order-analyst")
    assert not satisfies(decl, "tool:anything") and not satisfies(decl, "not a predicate")


# -- §5 scoring -----------------------------------------------------------------------------------
def test_scores_record_every_component_for_each_eligible_candidate(fleet):
    p = fleet.place({"clearances": ["orders.read"]})
    scores = p.scheduling["scores"]
    assert set(scores) == {"order-analyst", "summariser"}
    for entry in scores.values():
        assert list(entry) == ["total", "affinity", "success_rate", "cost", "substantiated"]


def test_cost_prefers_the_cheaper_declared_ceiling(engine):
    f = fleet_of(engine, [
        declaration("cheap", model={"cost_ceiling_usd": "0.10"}),
        declaration("dear", model={"cost_ceiling_usd": "2.50"}),
        declaration("unknown"),
    ])
    p = f.place({})
    assert p.agent == "cheap"
    assert p.scheduling["scores"]["unknown"]["cost"] == 0.0


def test_session_affinity_prefers_the_agent_holding_the_session(engine):
    f = fleet_of(engine, [declaration("a"), declaration("b")])
    f.hold_session("b", "conv-1")
    p = f.place({}, session="conv-1")
    assert p.agent == "b" and p.scheduling["scores"]["b"]["affinity"] == 1.0


def test_a_bound_placement_makes_the_agent_hold_its_session(engine):
    f = fleet_of(engine, [declaration("a"), declaration("b")])
    first = f.place({"session": "conv-9"})
    assert f.holds_session(first.agent, "conv-9")
    assert f.place({"session": "conv-9"}).scheduling["scores"][first.agent]["affinity"] == 1.0


def test_success_history_for_the_task_kind_is_learned(engine):
    f = fleet_of(engine, [declaration(name, capabilities=[("x.y", 1)]) for name in ("a", "b")])
    task = {"capabilities": [{"name": "x.y", "version": 1}]}
    assert f.place(task).agent == "a"  # a tie goes to the smaller name
    for _ in range(3):
        f.record_outcome("a", task, success=False)
        f.record_outcome("b", task, success=True)
    p = f.place(task)
    assert p.agent == "b"
    assert p.scheduling["scores"]["b"]["success_rate"] == pytest.approx(4 / 5)
    assert p.scheduling["scores"]["a"]["success_rate"] == pytest.approx(1 / 5)
    assert f.outcomes("b", "x.y/1") == (3, 3)


def test_unsubstantiated_claims_weigh_less(engine):
    f = fleet_of(engine, [
        declaration("claimed", capabilities=[("x.y", 1)]),
        declaration("zz-evaluated", capabilities=[("x.y", 1)], evaluated=["x.y"], evaluation="suite-3"),
    ])
    p = f.place({"capabilities": [{"name": "x.y", "version": 1}]})
    assert p.agent == "zz-evaluated"
    assert p.scheduling["scores"]["claimed"]["substantiated"] == 0.0


def test_ties_break_by_name(engine):
    f = fleet_of(engine, [declaration(name) for name in ["c", "a", "b"]])
    assert f.place({}).agent == "a"


def test_a_caller_can_pass_its_own_scorer(engine):
    def prefer_long_names(task, agents):
        return [{"total": float(len(a.agent.name)), "length": len(a.agent.name)} for a in agents]

    f = fleet_of(engine, [declaration(name) for name in ["ab", "abcd", "abc"]])
    p = f.place({}, scorer=prefer_long_names)
    assert p.agent == "abcd"
    assert p.scheduling["scores"]["abc"] == {"total": 3.0, "length": 3}
    assert orjson.loads(p.scheduling_json()) == p.scheduling


# -- §6 records -----------------------------------------------------------------------------------
def test_filters_passed_equals_the_derived_predicate_set(fleet):
    req = {"capabilities": [{"name": "case.summarise", "version": 1}], "clearances": ["orders.read"],
           "exclude": ["order-analyst"]}
    p = fleet.place(req)
    assert p.scheduling["filters_passed"] == list(derive_predicates(parse_requirements(req)))


def test_filters_failed_holds_every_ineligible_candidate_once(engine):
    f = fleet_of(engine, [declaration(f"a{i}", capabilities=[("x.y", 1 + i % 3)],
                                      clearances=["r.read"] if i % 2 else []) for i in range(10)])
    p = f.place({"capabilities": [{"name": "x.y", "version": 1}], "clearances": ["r.read"]})
    failed = p.scheduling["filters_failed"]
    assert sorted(x["candidate"] for x in failed) == sorted(set(p.candidates) - set(p.eligible))
    assert all(x["candidate"] not in p.scheduling["scores"] for x in failed)


def test_timings_hold_only_what_was_measured(fleet):
    timings = fleet.place(SECTION_10_REQ).scheduling["timings"]
    assert set(timings) == {"gather_ms", "select_ms", "decided_at"}  # no launch_ms, no requests
    assert timings["gather_ms"] > 0 and timings["select_ms"] > 0 and timings["decided_at"].endswith("Z")


def test_unschedulable_task_names_every_failed_predicate_and_its_candidates(fleet):
    p = fleet.place({"capabilities": [{"name": "order.investigate", "version": 2}], "residency": "us"})
    assert not p.bound and p.scheduling is None
    r = p.rejection
    assert r["code"] == "unschedulable"
    assert r["reason"] == ("no eligible agent among 2 candidates: capability:order.investigate/2 failed by "
                           "summariser; residency:us failed by order-analyst")
    assert r["candidates"] == ["order-analyst", "summariser"]
    assert r["filters_failed"] == [{"candidate": "summariser", "predicate": "capability:order.investigate/2"},
                                   {"candidate": "order-analyst", "predicate": "residency:us"}]


def test_rejection_on_an_empty_fleet_still_names_the_predicates(engine):
    r = Fleet(engine=engine).place(SECTION_10_REQ).rejection
    assert "capability:order.investigate/2" in r["reason"] and r["candidates"] == []


def test_rejection_reason_names_every_candidate_that_failed_each_predicate(engine):
    """§6: the reason names "the candidates that failed it" — all of them, however many."""
    f = fleet_of(engine, [declaration(f"agent-{i:02d}") for i in range(25)])
    reason = f.place({"clearances": ["a.b"]}).rejection["reason"]
    assert reason == ("no eligible agent among 25 candidates: clearance:a.b failed by "
                      + ", ".join(f"agent-{i:02d}" for i in range(25)))
    assert "more" not in reason


def test_rejection_reason_limit_names_at_most_n_and_counts_the_rest(engine):
    """reason_limit departs from §6 on request: N names per predicate, then a count."""
    f = fleet_of(engine, [declaration(f"agent-{i:02d}") for i in range(25)])
    p = f.place({"clearances": ["a.b"]}, reason_limit=10)
    assert p.rejection["reason"].endswith("agent-09 and 15 more")
    assert len(p.rejection["filters_failed"]) == 25  # the lists stay complete
    assert "more" not in f.place({"clearances": ["a.b"]}, reason_limit=25).rejection["reason"]
    # past the engine's machine word too: every name, as the pure engine gives them
    for huge in (2**63, 2**64, 10**30):
        placed = f.place({"clearances": ["a.b"]}, reason_limit=huge)
        assert placed.rejection["reason"] == f.place({"clearances": ["a.b"]}).rejection["reason"]
        assert b"agent-24" in placement_lines(placed, 1)[0]


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_rejection_reason_limit_must_be_a_positive_integer(engine, bad):
    with pytest.raises(ValueError, match="reason_limit"):
        Fleet(engine=engine).place({"clearances": ["a.b"]}, reason_limit=bad)


def test_rejection_reason_is_the_same_on_both_engines():
    fleets = {e: Fleet(engine=e) for e in ("native", "pure")}
    for f in fleets.values():
        for i in range(40):
            f.add(declaration(f"agent-{i:02d}", clearances=["a.b"] if i % 3 else ["c.d"]))
    req = {"clearances": ["a.b", "c.d"]}
    for limit in (None, 3):
        native, pure = (fleets[e].place(req, reason_limit=limit).rejection for e in ("native", "pure"))
        assert native["reason"] == pure["reason"] and native["filters_failed"] == pure["filters_failed"]
        assert native["reason"].count("agent-") == (40 if limit is None else 6)


def test_route_adds_requirements_and_is_named(fleet):
    route = Route("verification-needs-eu", {"residency": "eu", "exclude": ["order-analyst"]})
    p = fleet.place({"clearances": ["orders.read"]}, route=route)
    s = p.scheduling
    assert s["route"] == "verification-needs-eu"
    assert s["requirements"] == {"clearances": ["orders.read"], "residency": "eu", "exclude": ["order-analyst"]}
    assert s["filters_passed"] == ["clearance:orders.read", "residency:eu", "anti-affinity:order-analyst"]
    assert p.agent == "summariser"


def test_route_may_only_add(fleet):
    with pytest.raises(RouteError, match="may only add"):
        fleet.place({"residency": "us"}, route=Route("r", {"residency": "eu"}))


def test_resumed_placement_refers_to_the_one_that_weighed_candidates(fleet):
    first = fleet.place(SECTION_10_REQ)
    again = fleet.resume(first, seq=3)
    s = again.scheduling
    assert s["resumed"] is True and s["recorded_in"] == {"kind": "task.bound", "seq": 3}
    assert "candidates" not in s and s["candidates_count"] == 2 and s["filters_failed_count"] == 1
    assert s["declaration"] == ORDER_ANALYST and again.agent == "order-analyst"
    assert orjson.loads(again.scheduling_json()) == s


def test_resume_refuses_an_agent_that_left_or_changed(fleet):
    first = fleet.place(SECTION_10_REQ)
    fleet.add({**ORDER_ANALYST, "clearances": []})
    with pytest.raises(FleetError, match="no longer satisfies clearance:orders.read"):
        fleet.resume(first)
    fleet.remove("order-analyst")
    with pytest.raises(FleetError, match="no longer in the fleet"):
        fleet.resume(first)


# -- Fleet ----------------------------------------------------------------------------------------
def test_adding_the_same_agent_replaces_it(fleet):
    fleet.add({**SUMMARISER, "capabilities": [{"name": "order.investigate", "version": 2}]})
    assert len(fleet) == 2
    assert fleet.place(SECTION_10_REQ).eligible == ["order-analyst", "summariser"]


def test_a_name_used_in_another_namespace_is_an_error(fleet):
    with pytest.raises(FleetError, match="already used in namespace 'support'"):
        fleet.add({**SUMMARISER, "agent": {"name": "summariser", "namespace": "billing"}})


def test_removed_agents_are_not_candidates_and_may_come_back(fleet):
    fleet.remove("summariser")
    assert len(fleet) == 1 and fleet.place({}).candidates == ["order-analyst"]
    fleet.add({**SUMMARISER, "agent": {"name": "summariser", "namespace": "billing"}})
    assert fleet.place({}).candidates == ["order-analyst", "summariser"]
    with pytest.raises(FleetError):
        fleet.remove("nobody")


def test_a_placement_keeps_its_record_after_the_fleet_changes(fleet):
    p = fleet.place(SECTION_10_REQ)
    before = p.scheduling_json()
    fleet.remove("summariser")
    fleet.add(declaration("newcomer"))
    assert orjson.loads(p.scheduling_json())["candidates"] == orjson.loads(before)["candidates"]


def test_extend_parses_everything_before_adding_anything(engine):
    f = Fleet(engine=engine)
    with pytest.raises(SchemaError):
        f.extend([declaration("ok"), {"v": "1.0"}])
    assert len(f) == 0


def test_invalid_requirements_raise_schema_errors(fleet):
    with pytest.raises(SchemaError, match=r"\$\.capabilities\[0\]\.version"):
        fleet.place({"capabilities": [{"name": "x.y", "version": "2"}]})
