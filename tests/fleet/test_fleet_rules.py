"""The fleet's own rules beyond matching: success history, sessions, generations, membership.

Each test names the rule it holds; with the matching and parity suites they leave no surviving
mutant in a3fast.fleet except those docs/testing.md explains.
"""
import pytest

from a3fast import Fleet, FleetError, parse_requirements

from factories import declaration, fleet_of


@pytest.fixture
def fleet(engine):
    return fleet_of(engine, [declaration("a"), declaration("b")], batch=True)


def test_outcomes_of_an_unknown_kind_or_agent_are_none_recorded(fleet):
    fleet.record_outcomes("a", "k0", 1, 1)
    fleet.record_outcomes("a", "k1", 2, 3)
    assert fleet.outcomes("a", "k1") == (2, 3) and fleet.outcomes("a", "k0") == (1, 1)
    assert fleet.outcomes("a", "never-seen") == (0, 0)
    assert fleet.outcomes("nobody", "k1") == (0, 0)
    assert fleet.outcomes("b", "k1") == (0, 0)


def test_record_outcomes_equals_that_many_single_outcomes(engine):
    one_by_one, at_once = Fleet(engine=engine), Fleet(engine=engine)
    for f in (one_by_one, at_once):
        f.extend([declaration("a"), declaration("b")])
    for success in (True, False, True):
        one_by_one.record_outcome("b", "kind", success)
    at_once.record_outcomes("b", "kind", 2, 3)
    assert at_once.outcomes("b", "kind") == one_by_one.outcomes("b", "kind") == (2, 3)
    assert at_once.outcomes("a", "kind") == (0, 0)
    placed = [f.place({}, kind="kind").scheduling["scores"] for f in (one_by_one, at_once)]
    assert placed[0] == placed[1]


@pytest.mark.parametrize("successes, attempts", [(0, 0), (0, 4), (4, 4)])
def test_record_outcomes_accepts_from_none_to_all_successful(fleet, successes, attempts):
    fleet.record_outcomes("a", "k", successes, attempts)
    assert fleet.outcomes("a", "k") == (successes, attempts)


@pytest.mark.parametrize("successes, attempts", [(-1, 2), (3, 2), (1, -1)])
def test_record_outcomes_refuses_successes_outside_zero_to_attempts(fleet, successes, attempts):
    with pytest.raises(ValueError, match=r"successes \(-?\d+\) must be between 0 and attempts"):
        fleet.record_outcomes("a", "k", successes, attempts)
    assert fleet.outcomes("a", "k") == (0, 0)


def test_outcomes_are_recorded_only_for_an_agent_in_the_fleet(fleet):
    fleet.remove("b")
    for record in (lambda: fleet.record_outcomes("b", "k", 1, 1), lambda: fleet.record_outcome("b", "k", True)):
        with pytest.raises(FleetError, match="no agent named 'b'"):
            record()


def test_every_change_gives_the_fleet_a_new_generation(fleet):
    seen = [fleet.generation]
    for change in (lambda: fleet.record_outcomes("a", "k", 1, 2),
                   lambda: fleet.record_outcome("a", "k", True),
                   lambda: fleet.hold_session("a", "s"),
                   lambda: fleet.release_session("a", "s"),
                   lambda: fleet.add(declaration("c")),
                   lambda: fleet.extend([declaration("d")]),
                   lambda: fleet.remove("c")):
        change()
        assert fleet.generation > seen[-1]
        seen.append(fleet.generation)


def test_a_placement_sees_every_membership_change_before_it(engine):
    fleet = Fleet(engine=engine)
    # changes come in groups between placements, so that a membership stamp that went back to an
    # earlier value would hand a later placement an explanation of an earlier fleet
    groups = [[lambda: fleet.extend([declaration("a")])],
              [lambda: fleet.add(declaration("b")), lambda: fleet.extend([declaration("c")])],
              [lambda: fleet.add(declaration("d")), lambda: fleet.remove("a")],
              [lambda: fleet.extend([declaration("e"), declaration("a")]), lambda: fleet.remove("b")],
              [lambda: fleet.remove("c")]]
    for group in groups:
        for change in group:
            change()
        assert fleet.place({}, remember_session=False).eligible == fleet.names()
        assert len(fleet) == len(fleet.names())
    assert fleet.names() == ["a", "d", "e"]


def test_extend_replaces_a_repeated_name_and_keeps_the_rest_of_the_batch(engine):
    fleet = Fleet(engine=engine)
    fleet.extend([declaration("a"), declaration("b"), declaration("a", clearances=["c.d"]), declaration("c")])
    assert fleet.names() == ["a", "b", "c"] and len(fleet) == 3
    assert fleet.get("a").clearances == ("c.d",)
    fleet.extend([declaration("b", clearances=["c.d"]), declaration("d")])
    assert fleet.names() == ["a", "b", "c", "d"] and fleet.get("b").clearances == ("c.d",)
    with pytest.raises(FleetError, match="already used in namespace 'ns'"):
        fleet.extend([declaration("d", namespace="other")])


def test_a_missing_agent_is_named_in_the_error(fleet):
    with pytest.raises(FleetError, match=r"no agent named 'ghost' in the fleet"):
        fleet.remove("ghost")
    assert "a" in fleet and "ghost" not in fleet


def test_only_a_bound_placement_can_be_resumed(fleet):
    with pytest.raises(FleetError, match=r"^only a bound placement can be resumed$"):
        fleet.resume(fleet.place({"clearances": ["c.d"]}))


def test_a_resumed_placement_carries_the_first_decision(engine):
    from a3fast.fleet.placement import Route
    import orjson
    import time

    fleet = fleet_of(engine, [declaration("a", residency=["eu"]), declaration("b")], batch=True)
    first = fleet.place({}, session="s1", route=Route("eu", {"residency": "eu"}), kind="k")
    first.seq = 7
    fleet.record_outcome("b", "k", True)
    started = time.perf_counter_ns()
    again = fleet.resume(first)
    took = time.perf_counter_ns() - started
    assert again.resumed and again.agent == "a" and again.recorded_in == 7
    assert (again.fleet_engine, again.index, again.requirements, again.submitted) == (
        engine, first.index, first.requirements, first.submitted)
    assert (again.route, again.session, again.kind, again.custom_scores) == ("eu", "s1", "k", False)
    assert again.generation == fleet.generation and again.gather_ns is None and 0 <= again.select_ns <= took
    assert orjson.loads(again.declaration_json)["agent"]["name"] == "a"
    assert fleet.resume(first, seq=9).recorded_in == 9


def test_explain_gives_the_explanation_place_records(fleet):
    from a3fast.schema import parse_requirements

    fleet.add(declaration("c", clearances=["c.d"]))
    req = {"clearances": ["c.d"], "exclude": ["b"], "agentRef": "c"}
    placed = fleet.place(req).explanation
    for asked in (req, parse_requirements(req)):
        expl = fleet.explain(asked)
        assert expl.eligible_ids() == placed.eligible_ids() == [2]
        assert list(expl.failed_counts()) == list(placed.failed_counts()) == [2, 0, 0]
    assert list(fleet.explain({"agentRef": "a"}).eligible_ids()) == [0]
    assert list(fleet.explain({"exclude": ["a"]}).eligible_ids()) == [1, 2]


def test_filter_rows_are_the_rows_of_the_filter_predicates_in_order(fleet):
    fleet.add(declaration("c", clearances=["c.d"], residency=["eu"]))
    rows = fleet.filter_rows({"clearances": ["c.d", "zz.zz"], "residency": "eu"})
    assert len(rows) == 3 and rows[1] == -1 and rows[0] >= 0 and rows[2] >= 0
    assert fleet.index.row_ids(rows[0]) == [2] and fleet.index.row_ids(rows[2]) == [2]


def test_all_failed_reads_agent_names_that_contain_a_colon(engine):
    fleet = fleet_of(engine, [declaration("x:y"), declaration("z")], batch=True)
    assert fleet.all_failed({"agentRef": "x:y"}) == {"z": ["agentRef:x:y"]}
    assert fleet.all_failed({"exclude": ["x:y"]}) == {"x:y": ["anti-affinity:x:y"]}


def test_a_custom_scorer_is_told_the_task(engine):
    from a3fast.schema import parse_requirements

    fleet = fleet_of(engine, [declaration("a"), declaration("b")], batch=True)
    fleet.record_outcomes("b", "k", 3, 4)
    fleet.hold_session("b", "s1")
    told = {}

    def scorer(task, agents):
        told.update(requirements=task.requirements, session=task.session, kind=task.kind,
                    outcomes=[task.outcomes(d.agent.name) for d in agents],
                    holds=[task.holds_session(d.agent.name) for d in agents])
        return [{"total": 1 if d.agent.name == "a" else 0, "note": d.agent.name} for d in agents]

    req = parse_requirements({"exclude": ["zz"]})
    p = fleet.place(req, session="s1", scorer=scorer, kind="k", remember_session=False)
    assert told == {"requirements": req, "session": "s1", "kind": "k", "outcomes": [(0, 0), (3, 4)],
                    "holds": [False, True]}
    assert p.agent == "a" and p.scores.entries[0] == {"total": 1.0, "note": "a"}
    assert type(p.scores.entries[0]["total"]) is float
    fleet.place({}, scorer=scorer, remember_session=False)
    assert told["kind"] is not None and told["session"] is None and told["holds"] == [False, False]


def test_a_custom_scorer_without_eligible_agents_binds_nobody(engine):
    fleet = fleet_of(engine, [declaration("a"), declaration("b")], batch=True)
    p = fleet.place({"clearances": ["c.d"]}, scorer=lambda task, agents: [])
    assert not p.bound and p.scores.best == -1


def test_a_custom_scorer_entry_that_is_no_mapping_is_refused(engine):
    from a3fast import A3Error

    fleet = fleet_of(engine, [declaration("a")])
    with pytest.raises(A3Error, match=r"scorer gave agent 'a' no finite numeric 'total'"):
        fleet.place({}, scorer=lambda task, agents: [1.0])


def test_a_reason_limit_of_one_is_allowed(fleet):
    p = fleet.place({"clearances": ["c.d"]}, reason_limit=1)
    assert not p.bound and "and 1 more" in p.rejection["reason"]


def test_a_placement_records_its_generation_and_measured_phases(fleet):
    import time

    started = time.perf_counter_ns()
    p = fleet.place({})
    took = time.perf_counter_ns() - started
    assert p.generation == fleet.generation  # no session: placing changed nothing
    assert 0 <= p.gather_ns <= took and 0 <= p.select_ns <= took


def test_a_fleet_without_an_engine_named_uses_the_packages_engine():
    import a3fast

    assert Fleet().engine == a3fast.ENGINE and Fleet(engine="pure").engine == "pure"


@pytest.mark.parametrize("value", [7, None, "a\ud800"])
def test_a_session_or_kind_given_as_an_argument_is_one_a_record_can_carry(engine, value):
    # what no record, journal entry or snapshot could carry is refused before anything changes, as
    # a ValueError naming the argument, on every way a session or kind reaches the fleet
    fleet = Fleet(engine)
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    calls = [lambda: fleet.hold_session("a", value), lambda: fleet.record_outcomes("a", value, 1, 1)]
    if isinstance(value, str):      # anything else is taken for the task's requirements (a SchemaError)
        calls.append(lambda: fleet.record_outcome("a", value, True))
    if value is not None:           # None is no session and no kind to these
        calls += [lambda: fleet.place({}, session=value), lambda: fleet.place({}, kind=value),
                  lambda: fleet.place_many([{}, {}], sessions=[None, value])]
    generation = fleet.generation
    for call in calls:
        with pytest.raises(ValueError, match=r"^(session|kind|sessions\[1\]): expected"):
            call()
    assert fleet.generation == generation and not fleet.holds_session("a", "a")
    assert fleet.place({}, session="s").agent == "a" and fleet.holds_session("a", "s")


def test_sessions_and_kinds_outside_a_documents_text_rule_are_still_taken_as_arguments(engine, tmp_path):
    # journals and traces written before the service held its requests to the rule may carry them,
    # and a kind derived from requirements may be longer than a document's text: they must still
    # be replayed, restored and saved
    from a3fast.schema import task_kind

    fleet = Fleet(engine)
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    requirements = {"capabilities": [{"name": "x" * 60 + f".c{i}", "version": 1} for i in range(20)]}
    fleet.record_outcome("a", requirements, True)
    assert len(task_kind(parse_requirements(requirements))) > 1024
    for session in ("", "tab\there", "s" * 2000):
        assert fleet.place({}, session=session).agent == "a" and fleet.holds_session("a", session)
    fleet.save(tmp_path / "fleet.a3snap")
    assert Fleet.load(tmp_path / "fleet.a3snap", engine=engine).holds_session("a", "tab\there")


def test_weights_whose_total_could_overflow_are_refused():
    # finite weights whose magnitudes add up past a float's range would make a total infinite,
    # which a record writes as null
    with pytest.raises(ValueError, match="weights: expected numbers whose magnitudes add up to a finite number"):
        Fleet(weights=(1e308,) * 4)
    assert Fleet(weights=(1e300,) * 4).weights == (1e300,) * 4


@pytest.mark.parametrize("seq", ["3", True, -1, 2**63, 1.0])
def test_a_resumption_cites_a_seq_or_none(engine, seq):
    fleet = Fleet(engine)
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    earlier = fleet.place({})
    with pytest.raises(ValueError, match="seq: expected the seq of a task.bound"):
        fleet.resume(earlier, seq=seq)
    # a resumption of a resumption cites the placement that weighed the candidates, not nothing
    assert fleet.resume(fleet.resume(earlier, seq=3)).recorded_in == 3


def test_a_document_given_as_another_kind_of_mapping_is_kept_as_a_dict(engine, tmp_path):
    from collections import UserDict
    from types import MappingProxyType

    fleet = Fleet(engine)
    fleet.add(MappingProxyType({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [],
                                "clearances": []}))
    placed = fleet.place(UserDict({"v": "1.0"}))
    assert type(fleet.get("a").doc) is dict and type(placed.requirements.doc) is dict
    assert placed.scheduling_json()             # its records can be written
    fleet.save(tmp_path / "fleet.a3snap")        # and the fleet saved
    assert Fleet.load(tmp_path / "fleet.a3snap", engine=engine).names() == ["a"]


@pytest.mark.parametrize("call, error, message", [
    (lambda f: f.place({}, route="r"), TypeError, "route: expected a Route, found string 'r'"),
    (lambda f: f.place({}, scorer=5), TypeError, "scorer: expected a callable"),
    (lambda f: f.place_many([{}], scorer="f"), TypeError, "scorer: expected a callable"),
    (lambda f: f.place_many([{}, {}], workers=0), ValueError, "workers: expected None .* or a positive integer"),
    (lambda f: f.place_many([{}, {}], workers="2"), ValueError, "workers: expected None"),
    (lambda f: f.resume(None), TypeError, "earlier: expected the Placement to resume, found null"),
    (lambda f: Fleet(f.engine, scorer=5), TypeError, "scorer: expected a callable"),
    (lambda f: Fleet(f.engine, weights="abcd"), ValueError, r"weights: expected 4 finite numbers \(.*\), found string"),
], ids=["route", "scorer", "batch-scorer", "workers-0", "workers-string", "resume-none",
        "fleet-scorer", "weights-string"])
def test_an_argument_of_the_wrong_kind_is_refused_naming_it(fleet, call, error, message):
    # named where it is given, not met later as an AttributeError inside the engine
    generation = fleet.generation
    with pytest.raises(error, match=message):
        call(fleet)
    assert fleet.generation == generation
