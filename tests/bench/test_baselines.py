"""The benchmark's baselines do a3fast's work exactly, so that its ratios compare like with like.

Each baseline must find the same candidates, the same first failed predicate per candidate (§5),
the same scores and winner, and write a §6 record equal to a3fast's (timings aside).
"""
from __future__ import annotations

import orjson
import pytest

from a3fast import Fleet
from a3fast.bench.baselines import BASELINES, disagreement
from a3fast.bench.subjects import BaselineSubject, EngineSubject
from a3fast.bench.suite import check_baselines
from a3fast.schema import parse_requirements
from a3fast.workload import generate_fleet, generate_tasks

DECLARATIONS = generate_fleet(150, seed=11)
TASKS = [parse_requirements(t) for t in generate_tasks(DECLARATIONS, 40, seed=11)]
# tasks that name agents directly and exclude them, with a stranger among them
TASKS += [parse_requirements(t) for t in (
    {"agentRef": DECLARATIONS[3]["agent"]["name"]},
    {"agentRef": "stranger", "capabilities": [{"name": "order.investigate", "version": 1}]},
    {"exclude": [DECLARATIONS[0]["agent"]["name"], "stranger"]},
    {},
)]


@pytest.fixture(scope="module")
def fleet():
    fleet = Fleet()
    fleet.extend(DECLARATIONS)
    return fleet


@pytest.fixture(scope="module", params=BASELINES, ids=lambda cls: cls.name)
def baseline(request):
    return request.param(DECLARATIONS)


def test_baseline_finds_the_same_candidates_and_first_failures(fleet, baseline):
    for req in TASKS:
        p = fleet.place(req, remember_session=False)
        candidates, eligible, failed = baseline.explain(req)
        names = baseline.names
        assert [names[i] for i in candidates] == p.candidates
        assert [names[i] for i in eligible] == p.eligible
        assert [{"candidate": names[i], "predicate": pr} for pr, ids in zip(req.predicates, failed)
                for i in ids] == p.filters_failed


def test_baseline_scores_and_chooses_as_the_default_scorer(fleet, baseline):
    for req in TASKS:
        p = fleet.place(req, remember_session=False)
        best, eligible, rows = baseline.place(req)
        assert (baseline.names[best] if best >= 0 else None) == p.agent
        assert eligible == list(p.scores.ids)
        assert [r[0] for r in rows] == list(p.scores.total)


def test_baseline_record_equals_a3fasts_without_timings(fleet, baseline):
    bound = 0
    for req in TASKS:
        p = fleet.place(req, remember_session=False)
        record = baseline.scheduling_json(req)
        if not p.bound:
            assert record is None
            continue
        bound += 1
        ours = orjson.loads(p.scheduling_json())
        del ours["timings"]
        assert orjson.loads(record) == ours
    assert bound >= 10


def test_every_baseline_is_checked_to_decide_as_the_engine_before_it_is_timed(fleet):
    place = lambda req: fleet.place(req, remember_session=False)  # noqa: E731
    for cls in BASELINES:
        assert disagreement(cls(DECLARATIONS), place, TASKS) is None
        # one that scores otherwise is named, and the bench times nothing
        other = cls(DECLARATIONS, weights=(0.0, 0.0, 1.0, 0.0))
        found = disagreement(other, place, TASKS)
        assert found is not None and f"the {cls.name} baseline decides task" in found and "totals differ" in found
        engine = EngineSubject("pure", DECLARATIONS)
        with pytest.raises(RuntimeError, match="otherwise than a3fast"):
            check_baselines([engine, BaselineSubject(other)], TASKS)
        check_baselines([engine, BaselineSubject(cls(DECLARATIONS))], TASKS)


def test_a_baseline_refuses_an_agent_declared_twice():
    # a fleet keeps the later declaration in the earlier place; a list would match both
    with pytest.raises(ValueError, match="'agent-000001' is declared twice"):
        BASELINES[0]([*DECLARATIONS[:3], {**DECLARATIONS[5], "agent": DECLARATIONS[1]["agent"]}])
