"""`Fleet.compact`: the live agents take the ids 0, 1, ... in their join order and the names of the
agents gone are forgotten (docs/design.md, reading 3). A compacted fleet places, scores and writes
records exactly as a fleet built from its live agents, their outcomes and their held sessions does,
and as it did itself before; on both engines."""
from __future__ import annotations

import random
import sys
import time

import orjson
import pytest

from a3fast import Fleet
from a3fast.workload import generate_fleet, generate_tasks

from factories import compact_records, declaration, fleet_of, spec_records


def without_timings(records: list[dict]) -> list[dict]:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "timings"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return [strip(r) for r in records]


def churned(engine: str, seed: int) -> tuple[Fleet, list[dict], list[str]]:
    """A fleet whose agents came and went under new names, with outcomes and sessions; its tasks."""
    rng = random.Random(seed)
    docs = generate_fleet(60, seed=seed)
    tasks = generate_tasks(docs, 40, seed=seed)
    fleet = Fleet(engine)
    fleet.extend(docs[:30])
    sessions = [f"s{k}" for k in range(8)]
    for step, doc in enumerate(docs[30:] * 3):
        name = f"{doc['agent']['name']}-{step}"
        fleet.add({**doc, "agent": {**doc["agent"], "name": name}})
        live = fleet.names()
        action = rng.random()
        if action < 0.45:
            fleet.remove(rng.choice(live))
        elif action < 0.6:
            fleet.add({**rng.choice(docs), "agent": fleet.get(rng.choice(live)).agent.to_dict()})
        elif action < 0.8:
            fleet.record_outcome(rng.choice(live), tasks[rng.randrange(len(tasks))], rng.random() < 0.6)
        else:
            fleet.hold_session(rng.choice(live), rng.choice(sessions))
        if rng.random() < 0.2:
            fleet.release_session(rng.choice(fleet.names()), rng.choice(sessions))
    return fleet, tasks, sessions


def rebuilt(fleet: Fleet, tasks: list[dict], sessions: list[str]) -> Fleet:
    """The same live agents in the same join order, with their outcomes and sessions, afresh."""
    fresh = Fleet(fleet.engine, weights=fleet.weights)
    fresh.extend([d.doc for d in fleet])
    kinds = {orjson.dumps(t) for t in tasks}
    for name in fresh.names():
        for task in map(orjson.loads, sorted(kinds)):
            successes, attempts = fleet.outcomes(name, task)
            if attempts and fresh.outcomes(name, task) == (0, 0):
                fresh.record_outcomes(name, fresh_kind(task), successes, attempts)
        for session in sessions:
            if fleet.holds_session(name, session):
                fresh.hold_session(name, session)
    return fresh


def fresh_kind(task: dict) -> str:
    from a3fast.schema import parse_requirements, task_kind
    return task_kind(parse_requirements(task))


def placements_of(fleet: Fleet, tasks: list[dict], sessions: list[str]) -> list:
    return [fleet.place(task, session=sessions[k % len(sessions)] if k % 3 else None, remember_session=False)
            for k, task in enumerate(tasks)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_compacted_fleet_places_as_before_and_as_one_built_from_its_live_agents(engine, seed):
    fleet, tasks, sessions = churned(engine, seed)
    before = placements_of(fleet, tasks, sessions)
    ids_before = len(fleet._table.entries)
    # the world has what compaction must carry: outcomes and held sessions of live agents
    assert any(fleet.outcomes(name, task)[1] for name in fleet.names() for task in tasks)
    assert any(fleet.holds_session(name, s) for name in fleet.names() for s in sessions)
    unused = fleet.rows_unused
    assert fleet.compact() == ids_before - len(fleet) + unused > 0
    assert fleet.rows_unused == 0
    assert len(fleet._table.entries) == len(fleet)
    after = placements_of(fleet, tasks, sessions)
    expected = placements_of(rebuilt(fleet, tasks, sessions), tasks, sessions)
    assert without_timings(spec_records(after)) == without_timings(spec_records(before))
    assert without_timings(spec_records(after)) == without_timings(spec_records(expected))
    assert without_timings(compact_records(after)) == without_timings(compact_records(expected))
    generation = fleet.generation
    assert fleet.compact() == 0 and fleet.generation == generation      # nothing to do, nothing changed


def test_a_compacted_fleet_saves_and_loads_as_the_fleet_it_is(engine, tmp_path):
    fleet, tasks, sessions = churned(engine, 4)
    fleet.compact()
    fleet.save(tmp_path / "compacted")
    loaded = Fleet.load(tmp_path / "compacted", engine=engine)
    assert without_timings(spec_records(placements_of(loaded, tasks, sessions))) == \
        without_timings(spec_records(placements_of(fleet, tasks, sessions)))


def test_a_name_that_comes_back_after_compaction_is_a_new_agent_last_in_the_join_order(engine):
    fleet = fleet_of(engine, [declaration(name) for name in ("a", "b", "c")])
    fleet.record_outcome("a", "k", True)
    fleet.remove("a")
    assert fleet.compact() == 1
    assert fleet.outcomes("a", "k") == (0, 0)
    fleet.add(declaration("a"))
    assert fleet.names() == ["b", "c", "a"]
    assert fleet.place({}).candidates == ["b", "c", "a"]


def test_a_placement_made_before_compaction_stays_readable_and_resumable(engine):
    fleet = fleet_of(engine, [declaration(name) for name in ("gone", "a", "b")])
    fleet.remove("gone")
    earlier = fleet.place({"session": "s"})
    record = earlier.scheduling_json()
    fleet.compact()
    assert earlier.scheduling_json() == record
    resumed = fleet.resume(earlier)
    assert resumed.agent == earlier.agent and resumed.resumed
    assert fleet.holds_session(earlier.agent, "s")


def test_compaction_forgets_what_only_the_agents_gone_had(engine):
    fleet = fleet_of(engine, [declaration(name) for name in ("a", "b")])
    fleet.record_outcome("a", "only-a", True)
    fleet.hold_session("a", "only-a")
    fleet.record_outcome("b", "both", False)
    fleet.remove("a")
    fleet.compact()
    assert list(fleet._rows.kinds) == ["both"] and fleet._rows.session_rows == {}
    assert fleet.outcomes("b", "both") == (0, 1)


def test_reads_from_other_threads_never_mix_the_fleets_before_and_after_a_compaction(engine):
    import threading

    fleet = fleet_of(engine, [*(declaration(f"agent-{k}") for k in range(3000)), declaration("kept")], batch=True)
    fleet.record_outcomes("kept", "k", 3, 7)
    fleet.hold_session("kept", "s")
    stop, seen = threading.Event(), set()

    def churn():
        # the first agent leaves, so every compaction moves "kept" down an id
        for k in range(3000):
            if stop.is_set():
                break
            fleet.remove(f"agent-{k}")
            fleet.compact()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)          # the threads take turns as often as the interpreter lets them
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            seen.add((fleet.outcomes("kept", "k"), fleet.holds_session("kept", "s")))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert seen == {((3, 7), True)}


def test_a_walk_over_the_fleet_leaves_out_an_agent_removed_after_a_compaction(engine):
    fleet = fleet_of(engine, [declaration(f"agent-{k}") for k in range(6)])
    walk = iter(fleet)
    assert next(walk).agent.name == "agent-0"
    fleet.remove("agent-1")
    fleet.compact()
    fleet.remove("agent-4")
    fleet.add(declaration("late"))
    assert [d.agent.name for d in walk] == ["agent-2", "agent-3", "agent-5"]


def test_a_declaration_parsed_before_compaction_is_not_parsed_again(engine):
    fleet = fleet_of(engine, [declaration(name) for name in ("gone", "a", "b")])
    held = fleet.get("a")
    fleet.remove("gone")
    fleet.compact()
    assert fleet.get("a") is held
    assert fleet.place({}).declaration is not None


def test_a_compaction_leaves_a_declaration_kept_as_bytes_unparsed(engine, tmp_path):
    from a3fast.schema import Declaration

    fleet = fleet_of(engine, [declaration(name) for name in ("gone", "a", "b")])
    fleet.remove("gone")
    fleet.save(tmp_path / "fleet")
    loaded = Fleet.load(tmp_path / "fleet", engine=engine)
    held = loaded.get("a")                      # this one asked for, so parsed
    loaded.compact()
    entries = loaded._table.entries
    assert entries[0] is held and not isinstance(entries[1], Declaration)
    assert loaded.place({}).candidates == ["a", "b"]


def test_a_scorer_may_read_outcomes_and_sessions_from_threads_of_its_own(engine):
    from concurrent.futures import ThreadPoolExecutor

    fleet = fleet_of(engine, [declaration(name) for name in ("a", "b")])
    fleet.record_outcome("b", "k", True)
    fleet.hold_session("b", "s")
    with ThreadPoolExecutor(2) as pool:
        def scorer(task, agents):
            read = list(pool.map(lambda d: (task.outcomes(d.agent.name), task.holds_session(d.agent.name)),
                                 agents, timeout=10))
            return [{"total": float(successes + held)} for (successes, _), held in read]

        assert fleet.place({"kind": "k"}, session="s", scorer=scorer).agent == "b"


def test_the_rows_no_agent_is_in_are_counted_and_dropped_without_renumbering_an_agent(engine):
    fleet = fleet_of(engine, [declaration("a", capabilities=["x.one/1"], clearances=["c.kept"]),
                              declaration("b", capabilities=["x.one/1"])])
    assert fleet.rows_unused == 0
    fleet.record_outcome("a", "k", True)
    fleet.hold_session("a", "s")
    fleet.hold_session("b", "free")
    for k in range(5):      # "a" re-declared under its name with a new value each time
        fleet.add(declaration("a", capabilities=["x.one/1", f"x.new{k}/1"], clearances=["c.kept"]))
    assert fleet.names_gone == 0 and fleet.rows_unused == 4      # x.new0 .. x.new3
    fleet.release_session("b", "free")
    assert fleet.rows_unused == 5                # and the session no agent holds now
    tasks = [{"capabilities": [{"name": "x.new4", "version": 1}]}, {"capabilities": [{"name": "x.new0", "version": 1}]},
             {"clearances": ["c.kept"]}, {}]
    before = [fleet.place(task, session="s", remember_session=False) for task in tasks]
    rows, generation, ids = fleet.index.row_count(), fleet.generation, dict(fleet._table.ids)
    assert fleet.drop_unused_rows() == 5
    assert fleet.rows_unused == 0 and fleet.index.row_count() == rows - 5
    assert fleet.generation == generation and fleet._table.ids == ids
    assert fleet.outcomes("a", "k") == (1, 1) and fleet.holds_session("a", "s")
    assert not fleet.holds_session("b", "free")
    after = [fleet.place(task, session="s", remember_session=False) for task in tasks]
    assert without_timings(spec_records(after)) == without_timings(spec_records(before))
    assert without_timings(compact_records(after)) == without_timings(compact_records(before))
    assert fleet.drop_unused_rows() == 0 and fleet.compact() == 0
    # values and sessions met again after the drop take rows anew, and place as they would have
    fleet.add(declaration("b", capabilities=["x.new0/1"]))
    fleet.hold_session("b", "free")
    assert fleet.place(tasks[1], session="free").agent == "b"
    assert fleet.place({"clearances": ["c.kept"]}, session="s").agent == "a"


def test_a_compaction_with_no_name_gone_drops_the_unused_rows_and_keeps_the_ids(engine):
    fleet = fleet_of(engine, [declaration(name, capabilities=[f"x.{name}/1"]) for name in ("a", "b", "c")])
    fleet.add(declaration("b", capabilities=["x.two/1"]))       # x.b now declared by no one
    ids, generation = dict(fleet._table.ids), fleet.generation
    assert fleet.compact() == 1 and fleet._table.ids == ids and fleet.generation == generation
    assert fleet.place({"capabilities": [{"name": "x.two", "version": 1}]}).agent == "b"


def test_a_compaction_with_names_gone_forgets_them_and_the_unused_rows(engine):
    fleet = fleet_of(engine, [declaration(name, capabilities=[f"x.{name}/1"]) for name in ("a", "b", "c")])
    fleet.add(declaration("b", capabilities=["x.two/1"]))
    fleet.remove("c")                                           # x.c declared by no one either
    assert fleet.rows_unused == 2
    assert fleet.compact() == 1 + 2 and fleet.rows_unused == 0 and fleet.names() == ["a", "b"]


def test_an_index_lists_its_empty_rows_and_drops_only_those_it_is_given_in_order(engine):
    fleet = fleet_of(engine, [declaration("a", capabilities=["x.one/1"], clearances=["c.one"])])
    index = fleet.index
    used = sorted(fleet._rows.rows.values())
    first, second = index.add_row(), index.add_row()
    assert index.empty_row_ids() == [first, second]
    count = index.row_count()
    for rows, error in (([second, first], ValueError), ([first, first], ValueError), ([used[0]], ValueError),
                        ([first, count], IndexError), ([-1], IndexError)):
        with pytest.raises(error):
            index.drop_rows(rows)
        assert index.row_count() == count and index.empty_row_ids() == [first, second]    # nothing changed
    index.drop_rows([first])
    assert index.row_count() == count - 1 and index.empty_row_ids() == [first]    # the second moved down
    assert [index.row_ids(row) for row in used] == [[0]] * len(used)


@pytest.mark.parametrize("seed", [5, 6])
def test_a_churned_fleet_places_as_before_once_its_unused_rows_are_dropped(engine, seed):
    fleet, tasks, sessions = churned(engine, seed)
    for name in fleet.names()[::3]:          # re-declared with values no other agent declares
        fleet.add({**fleet.get(name).doc, "tools": [f"mcp:{name}/{seed}"]})
        fleet.add({**fleet.get(name).doc, "tools": []})
    before = placements_of(fleet, tasks, sessions)
    gone, generation, unused = fleet.names_gone, fleet.generation, fleet.rows_unused
    assert gone and unused
    assert fleet.drop_unused_rows() == unused and fleet.rows_unused == 0
    assert fleet.names_gone == gone and fleet.generation == generation
    after = placements_of(fleet, tasks, sessions)
    assert without_timings(spec_records(after)) == without_timings(spec_records(before))
    assert without_timings(compact_records(after)) == without_timings(compact_records(before))
