"""Placement on fleets of the standard workload: each scenario on each engine and each baseline.

Scenarios (as in `a3fast bench`): (a) filter + first-failed explanation, (b) a whole placement with
the default score (record compact; also from a requirements dict), (c) a placement with its §6 JSON
bytes. Each benchmark call places the next task of a fixed task list, so a figure is over the
workload's mix of tasks. Fleet sizes come from A3FAST_BENCH_SIZES (default 1000,10000).
"""
from __future__ import annotations

import itertools
import os
from functools import lru_cache

import pytest

from a3fast.bench.baselines import BASELINES
from a3fast.bench.suite import check_baselines
from a3fast.bench.subjects import FROM_DICT, SCENARIOS, EngineSubject, build_subjects
from a3fast.engines import available_engines
from a3fast.schema import parse_declaration, parse_requirements
from a3fast.workload import generate_fleet, generate_tasks

SIZES = tuple(int(n) for n in os.environ.get("A3FAST_BENCH_SIZES", "1000,10000").split(","))
ENGINES = available_engines()
SUBJECTS = ENGINES + tuple(cls.name for cls in BASELINES)
TASKS = 200


@lru_cache(maxsize=None)
def world(size: int):
    """Declarations, task documents, prepared tasks and every subject for one size."""
    declarations = generate_fleet(size)
    docs = generate_tasks(declarations, TASKS)
    built = build_subjects(declarations, ENGINES)
    prepared = [parse_requirements(d) for d in docs]
    check_baselines(built, prepared)     # the rows compare the same work, or none is timed
    return declarations, docs, prepared, {s.name: s for s in built}


def cycling(fn, tasks):
    """A no-argument callable that runs `fn` on the next task each time."""
    it = itertools.cycle(tasks)
    return lambda: fn(next(it))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_placement(benchmark, scenario, subject, size):
    _, docs, prepared, subjects = world(size)
    fn = subjects[subject].task(scenario)
    if fn is None:
        pytest.skip(f"{subject} has no {scenario!r} form")
    benchmark.group = f"{SCENARIOS[scenario]} @ {size:,} agents"
    tasks = docs if scenario in FROM_DICT else prepared
    for task in tasks:   # warm: a prepared requirements object is resolved once per fleet
        fn(task)
    benchmark(cycling(fn, tasks))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("operation", ["remove + add back", "replace"])
def test_one_agent_update(benchmark, engine, operation):
    size = max(SIZES)
    declarations = world(size)[0]
    subject = EngineSubject(engine, declarations)
    fleet = subject.fleet
    parsed = [parse_declaration(d) for d in declarations[:TASKS]]
    others = [d for d in declarations[TASKS:2 * TASKS]]
    benchmark.group = f"one-agent update @ {size:,} agents"
    if operation == "replace":
        swaps = [parse_declaration({**o, "agent": d.doc["agent"]}) for d, o in zip(parsed, others)]
        benchmark(cycling(fleet.add, swaps))
    else:
        def remove_and_add_back(decl):
            fleet.remove(decl.agent.name)
            fleet.add(decl)

        benchmark(cycling(remove_and_add_back, parsed))
    assert len(fleet) == size


@pytest.mark.parametrize("engine", ENGINES)
def test_fleet_build(benchmark, engine):
    size = max(SIZES)
    parsed = [parse_declaration(d) for d in world(size)[0]]
    benchmark.group = f"fleet build from parsed declarations @ {size:,} agents"
    benchmark.pedantic(EngineSubject, args=(engine, parsed), rounds=3, iterations=1)
