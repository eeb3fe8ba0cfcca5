"""Fleet.place_many: a batch on several threads gives the placements of one at a time, in order."""
from __future__ import annotations

import random
import re
import threading

import pytest

from a3fast import SchemaError
from a3fast.fleet import Fleet, pipeline
from a3fast.workload import generate_fleet, generate_tasks


@pytest.fixture(autouse=True)
def threads_for_small_worlds(monkeypatch):
    """The worlds here hold 400 agents, too few for a thread to pay for its run (`min_run`): every
    wave of 2 × MIN_RUN tasks or more is cut across threads all the same, as a large fleet's is, so
    that the threaded path is the one held to one at a time."""
    monkeypatch.setattr(pipeline, "MIN_RUN_WORK", 0)


def record(p) -> dict:
    content = dict(p.scheduling if p.bound else p.rejection)
    content.pop("timings")
    return {"agent": p.agent, "generation": p.generation, "content": content}


def world(engine: str, seed: int) -> tuple[Fleet, list[dict]]:
    decls = generate_fleet(400, seed=seed)
    fleet = Fleet(engine)
    fleet.extend(decls)
    rng = random.Random(seed)
    for decl in rng.sample(decls, 40):
        fleet.record_outcome(decl["agent"]["name"], "triage", rng.random() < 0.5)
    tasks = generate_tasks(decls, 120, seed=seed + 1)
    # some sessions repeat (affinity follows earlier bindings), some tasks have none
    tasks = [dict(t, session=f"s{rng.randrange(8)}") if rng.random() < 0.6 else t for t in tasks]
    return fleet, tasks + tasks[:30]


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("remember_session", [True, False])
def test_a_batch_places_as_one_at_a_time_in_order(engine, workers, remember_session):
    one, tasks = world(engine, 21)
    many, _ = world(engine, 21)
    expected = [record(one.place(t, remember_session=remember_session)) for t in tasks]
    got = [record(p) for p in many.place_many(tasks, workers=workers, remember_session=remember_session)]
    assert got == expected
    assert many.generation == one.generation
    names = many.names()
    for session in {t.get("session") for t in tasks} - {None}:
        assert [n for n in names if many.holds_session(n, session)] == \
               [n for n in names if one.holds_session(n, session)]


def test_sessions_given_beside_the_tasks_override_theirs(engine):
    one, tasks = world(engine, 22)
    many, _ = world(engine, 22)
    sessions = [f"x{i % 3}" if i % 2 else None for i in range(len(tasks))]
    expected = [record(one.place(t, session=s)) for t, s in zip(tasks, sessions)]
    assert [record(p) for p in many.place_many(tasks, sessions=sessions, workers=2)] == expected


@pytest.mark.parametrize("count", [1, 2])
def test_sessions_miscounted_for_the_tasks_place_nothing(engine, count):
    # a batch of one is counted as every batch is: no IndexError, no session silently dropped
    fleet, tasks = world(engine, 25)
    for sessions in ([], ["s"] * (count + 2)):
        with pytest.raises(ValueError, match=rf"sessions: {len(sessions)} for {count} tasks"):
            fleet.place_many(tasks[:count], sessions=sessions)
    assert not any(fleet.holds_session(n, "s") for n in fleet.names())


def test_an_invalid_task_places_nothing(engine):
    fleet, tasks = world(engine, 23)
    generation = fleet.generation
    with pytest.raises(SchemaError):
        fleet.place_many(tasks[:5] + [{"capabilities": "all"}], workers=2)
    assert fleet.generation == generation
    assert not any(fleet.holds_session(n, "s0") for n in fleet.names())


def test_an_update_from_another_thread_waits_for_the_batch(engine):
    fleet, tasks = world(engine, 24)
    newcomer = dict(generate_fleet(1, seed=99)[0], agent={"name": "zz-newcomer", "namespace": "ops"})
    started, results = threading.Event(), []

    def scorer(task, agents):
        started.set()
        return [{"total": 0.0} for _ in agents]

    def batch():
        results.extend(fleet.place_many(tasks[:40], workers=2, scorer=scorer, remember_session=False))

    thread = threading.Thread(target=batch)
    thread.start()
    started.wait(10)
    fleet.add(newcomer)            # blocks until the batch is done
    thread.join()
    assert all("zz-newcomer" not in p.scheduling["candidates"] for p in results if p.bound)
    assert "zz-newcomer" in fleet


def engine_arguments(fleet: Fleet, task) -> tuple:
    """What the pipeline hands the engine for one task: rows, agentRef, excluded, eval rows."""
    from a3fast.schema import parse_requirements
    return fleet._rows.resolve(parse_requirements(task))


def test_place_batch_gives_what_explain_then_score_give(engine):
    fleet, tasks = world(engine, 25)
    index, weights = fleet._index, fleet.weights
    session_row = fleet._rows.session_row("s-batch")
    index.set_bit(session_row, 3)
    kind_row = fleet._rows.kinds["triage"]
    jobs, expected = [], []
    for j, task in enumerate(tasks[:60]):
        rows, only, excluded, eval_rows = engine_arguments(fleet, task)
        srow, kid = (session_row, kind_row) if j % 2 else (-1, -1)
        expl = index.explain(rows, only, excluded)
        scores = index.score(expl, eval_rows, srow, kid, weights)
        expected.append((expl.failed_counts(), expl.eligible_ids(), scores.best, scores.ids, scores.total,
                         scores.affinity, scores.success_rate, scores.cost, scores.substantiated,
                         index.write_compact_lists(expl, scores)))
        # every third task comes with its explanation already made: it is only scored
        jobs.append((expl if j % 3 == 0 else None, rows, only, excluded, eval_rows, srow, kid))
    got = []
    for expl, scores in index.place_batch(jobs, weights):
        got.append((expl.failed_counts(), expl.eligible_ids(), scores.best, scores.ids, scores.total,
                    scores.affinity, scores.success_rate, scores.cost, scores.substantiated,
                    index.write_compact_lists(expl, scores)))
    assert got == expected


def test_place_batch_of_nothing_is_empty(engine):
    fleet, _ = world(engine, 26)
    assert fleet._index.place_batch([], fleet.weights) == []


def test_place_batch_refuses_a_row_that_does_not_exist(engine):
    fleet, _ = world(engine, 27)
    index = fleet._index
    with pytest.raises(IndexError):
        index.place_batch([(None, [index.row_count() + 5], fleet._engine.NO_AGENT_REF, [], [], -1, -1)],
                          fleet.weights)


def test_records_of_a_batch_are_byte_identical_to_one_at_a_time(engine):
    from a3fast.record.write import placement_records
    one, tasks = world(engine, 28)
    many, _ = world(engine, 28)
    # one long chain of a session (a wave per task) beside tasks without a session
    tasks = [dict(t, session="long") if i % 3 == 0 else {k: v for k, v in t.items() if k != "session"}
             for i, t in enumerate(tasks)]
    expected = [p for p in (one.place(t) for t in tasks)]
    got = many.place_many(tasks, workers=2)
    for e, g in zip(expected, got):
        assert strip_timings(placement_records(g)) == strip_timings(placement_records(e))
    assert many.generation == one.generation


def strip_timings(records) -> list:
    """The record bytes, each placement's timings (§6, when it ran) blanked."""
    return [(kind, re.sub(rb'"timings":\{[^{}]*\}', b'"timings":{}', content)) for kind, content in records]


def test_the_bench_measures_one_core_and_two_side_by_side_and_names_the_target():
    from a3fast.bench.cores import bench_place_many
    from a3fast.bench.report import targets
    from a3fast.bench.suite import BenchConfig, BenchReport
    figures = bench_place_many(quick=True)
    assert figures["agents"] == 1_000 and figures["met"] is None      # quick never judges the target
    assert figures["one_core_per_s"] > 0 and figures["two_cores_per_s"] > 0
    assert figures["speedup"] == pytest.approx(figures["two_cores_per_s"] / figures["one_core_per_s"])
    report = BenchReport(BenchConfig(sizes=(), extras=False), "now", {})
    from a3fast.bench.suite import EXTRA_BENCHES
    (title,) = [title for title, bench in EXTRA_BENCHES if bench is bench_place_many]
    report.extras = [(title, dict(figures, agents=10_000, speedup=1.8))]
    rows = [row for row in targets(report) if row[0].startswith("place_many")]
    assert len(rows) == 1 and rows[0][2] is True and rows[0][1].startswith("1.80×")


def test_the_bench_measures_place_many_against_one_by_one_and_names_the_target():
    from a3fast.bench.batching import TARGET_BATCHING, bench_batching
    from a3fast.bench.report import targets
    from a3fast.bench.suite import BATCHING_TITLE, EXTRA_BENCHES, BenchConfig, BenchReport
    figures = bench_batching(quick=True)
    assert figures["met"] is None and figures["target_speedup"] == TARGET_BATCHING == 1.6
    assert figures["one_us"] > 0 and figures["many_us"] > 0
    assert figures["speedup"] == pytest.approx(figures["one_us"] / figures["many_us"])
    assert (BATCHING_TITLE, bench_batching) in EXTRA_BENCHES
    report = BenchReport(BenchConfig(sizes=(), extras=False), "now", {})
    for speedup, met in ((1.7, True), (1.2, False)):
        report.extras = [(BATCHING_TITLE, dict(figures, agents=1_000, speedup=speedup))]
        rows = [row for row in targets(report) if row[0].startswith("place_many ≥ 1.6×")]
        assert len(rows) == 1 and rows[0][2] is met and rows[0][1].startswith(f"{speedup:.2f}×")



def test_a_batch_whose_scorer_fails_in_a_later_wave_leaves_no_session_held(engine):
    # the first wave binds s1 and s2 (their agents come to hold them); the scorer fails in the
    # second wave: the batch places nothing, and the fleet holds what it held before, at the same
    # generation, so it places as a twin that never saw the batch does (the session names it met
    # stay interned, held by no agent, as after `release_session`)
    def fleet_with_a_session():
        fleet = Fleet(engine=engine)
        fleet.extend(generate_fleet(20, 3))
        fleet.hold_session(fleet.names()[0], "kept")
        return fleet

    def holds(fleet):
        return {(n, s) for n in fleet.names() for s in ("s1", "s2", "kept") if fleet.holds_session(n, s)}

    def ranked(task, agents):
        return [{"total": float(i)} for i, _ in enumerate(agents)]

    calls = []

    def failing(task, agents):
        calls.append(task.session)
        if len(calls) > 2:
            raise RuntimeError("scorer down")
        return ranked(task, agents)

    fleet, twin = fleet_with_a_session(), fleet_with_a_session()
    before = fleet.generation, holds(fleet)
    with pytest.raises(RuntimeError, match="scorer down"):
        fleet.place_many([{}, {}, {}], sessions=["s1", "s2", "s1"], scorer=failing)
    assert calls == ["s1", "s2", "s1"]
    assert (fleet.generation, holds(fleet)) == before == (twin.generation, holds(twin))
    tasks = [{}, {"v": "1.0", "session": "s2"}, {}]
    again, expected = (f.place_many(tasks, sessions=["s1", None, "s1"], scorer=ranked) for f in (fleet, twin))
    assert [record(p) for p in again] == [record(p) for p in expected]
    assert (fleet.generation, holds(fleet)) == (twin.generation, holds(twin))


@pytest.mark.slow       # 24,000 agents: about 3 s an engine here
def test_names_are_read_whole_while_another_thread_adds_agents(engine):
    # the names are read off a dict an add grows: without the fleet's lock, a read that meets an
    # add raises "dictionary changed size during iteration"
    import threading

    fleet = Fleet(engine=engine)
    docs = generate_fleet(24_000, seed=3)
    fleet.extend(docs[:16_000])
    adding = threading.Thread(target=lambda: [fleet.add(d) for d in docs[16_000:]])
    adding.start()
    lengths = []
    while adding.is_alive():
        lengths.append(len(fleet.names()))
    adding.join()
    assert lengths == sorted(lengths) and fleet.names() == [d["agent"]["name"] for d in docs]


# -- a caller's object that changes the fleet while a batch is set up --------------------------------

def _declaration(i: int) -> dict:
    return {"v": "1.0", "agent": {"name": f"a{i}", "namespace": "ns"}, "clearances": [],
            "capabilities": [{"name": "x.base", "version": 1}, {"name": f"x.c{i}", "version": 1}]}


def _adding_session(fleet: Fleet, first: int, last: int) -> str:
    """A session (a str subclass) whose first hash adds agents `first` to `last` - 1 to `fleet`, from
    the thread that holds the fleet's re-entrant lock; `fired` says whether it did."""
    class Adding(str):
        fired = False

        def __hash__(self):
            if not Adding.fired:
                Adding.fired = True
                for j in range(first, last):
                    fleet.add(_declaration(j))
            return str.__hash__(self)

    return Adding("s1")


def test_a_batch_whose_callers_object_changes_the_fleet_while_it_is_set_up_is_refused(engine):
    # a session (a str subclass in a Requirements the caller made) whose hash adds 400 agents from
    # the thread that holds the fleet's lock: the native engine's wave then read rows the additions
    # had moved and sets too short for the new agents (wrong agents, or a crash)
    from a3fast.schema import parse_requirements

    fleet = Fleet(engine)
    for i in range(60):
        fleet.add(_declaration(i))
    base = parse_requirements({"v": "1.0", "capabilities": [{"name": "x.base", "version": 1}]})
    fleet.place(base, session="s0")             # a session row to be moved
    session = _adding_session(fleet, 60, 460)
    before = fleet.generation
    tasks = [base._replace(session="s0")] * 8 + [base._replace(session=session)] + [base] * 8
    with pytest.raises(RuntimeError, match="the fleet changed while a batch of placements was being set up"):
        fleet.place_many(tasks, remember_session=False)
    assert type(session).fired and len(fleet) == 460 and fleet.generation == before + 400    # only the caller's additions
    # and the fleet places as before
    assert fleet.place_many([base] * 3, remember_session=False)[0].agent is not None


def test_a_requirements_whose_predicates_are_no_tuple_is_refused_before_any_cache_is_asked(engine):
    # an object that hashes and compares as a kept predicate set, but is no tuple, found the kept
    # explanation and then gave the record writer fewer predicates than its length said (a crash)
    from a3fast.record.write import scheduling_json
    from a3fast.schema import parse_requirements

    fleet = Fleet(engine)
    for i, caps in enumerate([["x.a", "x.b"], ["x.b"], ["x.b"]]):
        fleet.add({"v": "1.0", "agent": {"name": f"a{i}", "namespace": "ns"}, "clearances": [],
                   "capabilities": [{"name": c, "version": 1} for c in caps]})
    real = parse_requirements({"v": "1.0", "capabilities": [{"name": "x.b", "version": 1}, {"name": "x.a", "version": 1}]})
    scheduling_json(fleet.place(real))
    fleet.place(real)                          # its explanation kept

    class Liar:
        def __init__(self, t):
            self.t = t

        def __hash__(self):
            return hash(self.t)

        def __eq__(self, other):
            return True

        def __len__(self):
            return len(self.t)

        def __iter__(self):
            return iter(())

    liar = real._replace(predicates=Liar(real.predicates))
    for place in (lambda: fleet.place(liar), lambda: fleet.place_many([liar, liar]), lambda: fleet.explain(liar)):
        with pytest.raises(TypeError, match=r"requirements\.predicates: expected a tuple of strings .* found Liar"):
            place()


def test_a_fleet_changed_by_a_callers_object_during_a_placement_keeps_its_generation_moving_on(engine):
    # a wave of one (or `place`) is decided as the fleet was when it began; the additions made
    # meanwhile count, where the generation was set back to the one counted from the start
    from a3fast.schema import parse_requirements

    fleet = Fleet(engine)
    for i in range(60):
        fleet.add(_declaration(i))
    base = parse_requirements({"v": "1.0", "capabilities": [{"name": "x.base", "version": 1}]})
    session = _adding_session(fleet, 60, 160)
    before = fleet.generation
    p = fleet.place(base._replace(session=session), remember_session=False)
    assert type(session).fired and p.agent is not None and p.generation == before
    assert fleet.generation == before + 100


@pytest.mark.parametrize("predicates", [["capability:x.a/1"], ("capability:x.a/1", None),
                                        ("capability:x.a/1", type("S", (str,), {})("clearance:c"))],
                         ids=["a-list", "none-inside", "a-str-subclass-inside"])
def test_predicates_no_parser_makes_are_refused_alike_by_both_engines(engine, predicates):
    from a3fast.schema import parse_requirements

    fleet = Fleet(engine)
    fleet.add(_declaration(0))
    real = parse_requirements({"v": "1.0", "capabilities": [{"name": "x.base", "version": 1}]})
    earlier = fleet.place(real)
    made = real._replace(predicates=predicates)
    earlier.requirements = made                 # a resumption re-checks what the earlier placement matched
    for call in (lambda: fleet.place(made), lambda: fleet.place(made), lambda: fleet.place_many([made, made]),
                 lambda: fleet.explain(made), lambda: fleet.all_failed(made), lambda: fleet.resume(earlier)):
        with pytest.raises(TypeError, match=r"requirements\.predicates: expected a tuple of strings"):
            call()
