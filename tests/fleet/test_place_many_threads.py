"""When `place_many` cuts a wave across threads: only for runs that carry enough of the engine's
work to pay for a thread (`pipeline.min_run`), and the placements are the same either way."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from a3fast.fleet import pipeline

from test_place_many import record, world


class CountedPool(ThreadPoolExecutor):
    """A ThreadPoolExecutor that counts the pools the driver starts and the length of each run it
    hands them: the Python step submits `index.place_batch(jobs, weights)`, the compiled one
    `wave.run(start, end)`."""
    started = 0
    runs: list[int] = []

    def __init__(self, *args, **kwargs):
        type(self).started += 1
        super().__init__(*args, **kwargs)

    def submit(self, fn, /, *args, **kwargs):
        type(self).runs.append(len(args[0]) if isinstance(args[0], list) else args[1] - args[0])
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def counted(monkeypatch) -> type[CountedPool]:
    monkeypatch.setattr(pipeline, "ThreadPoolExecutor", CountedPool)
    monkeypatch.setattr(CountedPool, "started", 0)
    monkeypatch.setattr(CountedPool, "runs", [])
    return CountedPool


def test_min_run_hands_a_thread_enough_of_the_engines_work():
    assert pipeline.min_run(0) == pipeline.min_run(1) == pipeline.MIN_RUN_WORK
    for agents in (1_000, 10_000, 100_000, 1_000_000, 3 * pipeline.MIN_RUN_WORK):
        run = pipeline.min_run(agents)
        assert run >= pipeline.MIN_RUN
        # the shortest run that carries the work, or MIN_RUN where a shorter one would
        assert run * agents >= pipeline.MIN_RUN_WORK
        assert run == pipeline.MIN_RUN or (run - 1) * agents < pipeline.MIN_RUN_WORK
    assert pipeline.min_run(1_000) == 2_500 and pipeline.min_run(100_000) == pipeline.MIN_RUN


@pytest.mark.parametrize("remember_session", [True, False])
def test_a_batch_starts_threads_only_for_runs_that_carry_enough_work(engine, monkeypatch, counted,
                                                                     remember_session):
    one, tasks = world(engine, 29)
    expected = [record(one.place(t, remember_session=remember_session)) for t in tasks]
    agents = len(one.names())
    longest = max(map(len, pipeline.waves_of([t.get("session") for t in tasks], remember_session)))
    half = longest // 2
    assert half >= pipeline.MIN_RUN
    # the work a run of half the longest wave carries: one agent-task short of a thread's worth,
    # then just enough
    for work, pools in ((half * agents + 1, 0), (half * agents, 1)):
        monkeypatch.setattr(pipeline, "MIN_RUN_WORK", work)
        many, _ = world(engine, 29)
        started, runs = counted.started, len(counted.runs)
        got = [record(p) for p in many.place_many(tasks, workers=2, remember_session=remember_session)]
        assert counted.started - started == pools
        handed = counted.runs[runs:]
        # with a pool, the longest wave's second half went to its thread, and every run handed
        # over carried a thread's worth
        assert bool(handed) == bool(pools)
        assert all(run >= pipeline.min_run(agents) for run in handed)
        assert got == expected


def test_no_run_handed_to_a_thread_is_shorter_than_min_run(engine, monkeypatch, counted):
    # 130 tasks on 4 threads with runs of at least 32: cut by a ceiling step they would be
    # 33, 33, 33 and 31; as near one length as may be, 32, 32, 33 and 33
    one, tasks = world(engine, 33)
    tasks = tasks[:130]
    monkeypatch.setattr(pipeline, "MIN_RUN_WORK", pipeline.MIN_RUN * len(one.names()))
    expected = [record(one.place(t, remember_session=False)) for t in tasks]
    many, _ = world(engine, 33)
    got = [record(p) for p in many.place_many(tasks, workers=4, remember_session=False)]
    assert got == expected
    assert sorted(counted.runs) == [32, 33, 33]      # the first run, 32 tasks, on the calling thread


def test_resumptions_in_a_batch_start_no_thread(engine, counted):
    fleet, tasks = world(engine, 30)
    earlier = next(p for p in fleet.place_many(tasks[:20], workers=1) if p.bound)
    decl = fleet.get(earlier.agent)
    stages = pipeline.ResumingStages(engine, decl, orjson.dumps(decl.doc))
    resumptions = [pipeline.Resumption(earlier, seq) for seq in range(4 * pipeline.MIN_RUN)]
    placements, _ = pipeline.drive(stages, resumptions, None, fleet.generation, workers=2)
    assert [p.agent for p in placements] == [earlier.agent] * len(resumptions)
    assert all(p.resumed for p in placements)
    assert counted.started == 0


class WithoutMinRun:
    """Stages written before the protocol asked for `min_run`: a fleet's own, but for it."""

    def __init__(self, stages):
        self._stages = stages

    def __getattr__(self, name):
        if name == "min_run":
            raise AttributeError(name)
        return getattr(self._stages, name)


def test_stages_without_min_run_are_cut_by_min_run_alone(engine, monkeypatch, counted):
    one, tasks = world(engine, 34)
    expected = [record(one.place(t, remember_session=False)) for t in tasks]
    many, _ = world(engine, 34)
    placements, _ = pipeline.drive(WithoutMinRun(many._stages), tasks, None, many.generation,
                                   remember_session=False, workers=2)
    assert [record(p) for p in placements] == expected
    assert counted.started == 1      # a wave of 150 is two runs of MIN_RUN or more
