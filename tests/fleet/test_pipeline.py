"""The placing pipeline's rules (a3fast.fleet.pipeline): a prepared task is never parsed again, a
resumed placement is held to the requirements its task was matched with after its route, and the
stages agree with the Placement they build."""
from __future__ import annotations

import orjson
import pytest

from a3fast import FleetError, Fleet, Route, parse_requirements
from a3fast.record.write import placement_records
from a3fast.verify import verify


def agent(name, residency):
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"}, "capabilities": [],
            "clearances": ["orders.read"], "residency": [residency]}


REQ = {"v": "1.0", "clearances": ["orders.read"]}
EU_ONLY = Route("eu-only", {"residency": "eu"})


def test_a_resumed_placement_is_held_to_the_routed_requirements(engine):
    fleet = Fleet(engine)
    fleet.add(agent("a", "eu"))
    first = fleet.place(REQ, route=EU_ONLY)
    assert first.agent == "a" and "residency:eu" not in first.submitted.predicates
    fleet.add(agent("a", "us"))          # re-declared: no longer where the route sent the task
    with pytest.raises(FleetError, match="cannot resume on 'a': its declaration no longer satisfies residency:eu"):
        fleet.resume(first)
    fleet.add(agent("a", "eu"))
    again = fleet.resume(first, seq=3)
    assert again.resumed and again.route == "eu-only"
    assert again.predicates == ("clearance:orders.read", "residency:eu")
    records = [*placement_records(first), *placement_records(again)]
    trace = [{"seq": seq, "kind": kind, "content": orjson.loads(content)}
             for seq, (kind, content) in enumerate(records, 1)]
    assert verify(trace) == []


def test_a_prepared_task_is_never_parsed_again(engine):
    fleet = Fleet(engine)
    fleet.add(agent("a", "eu"))
    prepared = parse_requirements(REQ)
    p = fleet.place(prepared)
    assert p.submitted is prepared and p.requirements is prepared
    assert all(q.submitted is prepared for q in fleet.place_many([prepared, prepared]))
    routed = fleet.place(prepared, route=EU_ONLY)
    assert routed.submitted is prepared and routed.requirements.predicates == (
        "clearance:orders.read", "residency:eu")


def test_the_stages_timings_and_records_of_one_cycle(engine):
    fleet = Fleet(engine)
    for name, where in (("a", "eu"), ("b", "us")):
        fleet.add(agent(name, where))
    p = fleet.place(REQ, route=EU_ONLY)
    assert p.gather_ns is not None and p.gather_ns >= 0 and p.select_ns is not None and p.select_ns >= 0
    assert p.generation == fleet.generation and p.kind is None and p.reason_limit is None
    trace = [{"seq": seq, "kind": kind, "content": orjson.loads(content)}
             for seq, (kind, content) in enumerate(placement_records(p), 1)]
    assert verify(trace) == []


def test_a_placements_phases_are_read_from_its_clocks_when_asked_for_and_a_value_set_is_kept(engine):
    fleet = Fleet(engine)
    fleet.add(agent("a", "eu"))
    one, many = fleet.place(REQ), fleet.place_many([REQ, REQ])[1]
    for p in (one, many):
        assert p._gather_ns is ... and p._select_ns is ...      # no int made by placing
        assert p.gather_ns == p.gathered - p.started >= 0 and p.select_ns == p.selected - p.gathered >= 0
    resumed = fleet.resume(one)
    assert resumed.gather_ns is None and resumed.select_ns == resumed.selected - resumed.started
    one.gather_ns, one.select_ns = None, 7
    assert (one.gather_ns, one.select_ns) == (None, 7)
    [bound] = [orjson.loads(content) for kind, content in placement_records(one) if kind == "task.bound"]
    timings = bound["scheduling"]["timings"]
    assert timings["select_ms"] == 7e-6 and "gather_ms" not in timings


def test_a_task_is_carried_by_one_placement_from_prepare_to_build(engine):
    # the stages fill the Placement prepare made, and build completes that same object: no cycle
    # state is copied into another (docs/design.md, "How one placement flows")
    from a3fast.fleet import pipeline
    from a3fast.fleet.placement import Placement

    fleet = Fleet(engine)
    for name, where in (("a", "eu"), ("b", "us")):
        fleet.add(agent(name, where))
    stages = fleet._stages
    [state] = stages.prepare((REQ,), (None,), EU_ONLY, None, None, None, None)
    assert type(state) is Placement and state.route == "eu-only" and not state.resumed
    stages.decide([state])
    assert stages.index.name(state.best) == "a" and state.explanation.eligible_count == 1
    built = stages.build(state, fleet.generation)
    assert built is state and built.agent == "a" and built.select_ns >= 0 and built.seq is None
    # decided but not built: what a shard answers with
    scored = fleet.scored(REQ)
    assert type(scored) is Placement and scored.best >= 0 and not hasattr(scored, "agent")
    assert repr(scored) == "<Placement decided, not built: 1 predicates>"
    assert repr(built) == f"<Placement bound to 'a': 2 predicates, engine {engine}>"
    assert built.scorer is None and built.within is None
    # a resumption is a Placement marked resumed, carrying the earlier decision
    resumed = fleet.resume(built)
    assert resumed is not built and resumed.resumed and resumed.best == built.best
    assert resumed.explanation is built.explanation and resumed.gather_ns is None


@pytest.mark.parametrize("name, why", [("no_colon", "importable name"), (":f", "importable name"),
                                       ("m:", "importable name"), ("a3fast.no_such_module:f", "cannot import"),
                                       ("a3fast.fleet.scoring:no_such_function", "is not a callable"),
                                       ("a3fast.fleet.scoring:DEFAULT_WEIGHTS", "is not a callable")])
def test_a_scorer_by_importable_name_is_refused_naming_why(name, why):
    from a3fast.fleet.scoring import import_scorer

    with pytest.raises(ValueError, match=why):
        import_scorer(name)


def test_a_scorer_by_importable_name_is_the_function_it_names():
    from a3fast.fleet.scoring import choose, import_scorer

    assert import_scorer("a3fast.fleet.scoring:choose") is choose


def test_a_placements_python_makes_no_cell_and_no_wrapper():
    # What a single placement runs through makes no closure cell on a call (CPython 3.11 makes one
    # for each variable a comprehension or nested function reads, on every call of the function
    # that holds it), and Fleet.place is not a decorator's wrapper that repacks its arguments:
    # both cost a placement measurable instructions (docs/performance.md, "The Python around the
    # engine, counted in instructions").
    from a3fast.fleet import pipeline, rows

    on_the_path = [Fleet.place, Fleet.place_many, pipeline.drive, pipeline._drive_batch, pipeline.prepare,
                   pipeline.build_placement,
                   pipeline.LocalStages.prepare, pipeline.LocalStages.decide, pipeline.LocalStages.explain,
                   pipeline.LocalStages._gather, pipeline.LocalStages._decide_one, pipeline.LocalStages._decide_wave,
                   pipeline.LocalStages.build, rows.PredicateRows.resolve_cached,
                   rows.PredicateRows.remember]
    assert not hasattr(Fleet.place, "__wrapped__")
    with_cells = {f.__qualname__: f.__code__.co_cellvars for f in on_the_path if f.__code__.co_cellvars}
    # _drive_batch's one cell is paid once a batch, not once a task
    assert with_cells == {"_drive_batch": ("states",)}
