"""Fleet.place_many: a batch on several threads gives the placements of one at a time, in order."""
from __future__ import annotations

import random
import threading

import pytest

from a3fast import SchemaError
from a3fast.fleet import Fleet
from a3fast.workload import generate_fleet, generate_tasks


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
