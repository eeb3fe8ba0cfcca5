"""When `place_many` cuts a wave across threads: only for runs that carry enough of the engine's
work to pay for a thread (`pipeline.min_run`), and the placements are the same either way."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from a3fast.fleet import pipeline

from test_place_many import record, world


class CountedPool(ThreadPoolExecutor):
    """A ThreadPoolExecutor that counts the pools the driver starts."""
    started = 0

    def __init__(self, *args, **kwargs):
        type(self).started += 1
        super().__init__(*args, **kwargs)


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
def test_a_batch_starts_threads_only_for_runs_that_carry_enough_work(engine, monkeypatch, remember_session):
    monkeypatch.setattr(pipeline, "ThreadPoolExecutor", CountedPool)
    monkeypatch.setattr(CountedPool, "started", 0)
    one, tasks = world(engine, 29)
    expected = [record(one.place(t, remember_session=remember_session)) for t in tasks]
    agents = len(one.names())
    longest = max(map(len, pipeline.waves_of([t.get("session") for t in tasks], remember_session)))
    # the work a run of the longest wave would carry, cut in two: just short of a thread's worth,
    # then just enough
    for work, threads in ((longest // 2 * agents + 1, 0), (longest // 2 * agents, 1)):
        monkeypatch.setattr(pipeline, "MIN_RUN_WORK", work)
        many, _ = world(engine, 29)
        before = CountedPool.started
        got = [record(p) for p in many.place_many(tasks, workers=2, remember_session=remember_session)]
        assert CountedPool.started - before == threads
        assert got == expected


def test_a_resumption_never_starts_a_thread(engine, monkeypatch):
    monkeypatch.setattr(pipeline, "ThreadPoolExecutor", CountedPool)
    monkeypatch.setattr(CountedPool, "started", 0)
    fleet, tasks = world(engine, 30)
    earlier = [p for p in fleet.place_many(tasks[:80], workers=1) if p.bound]
    started = CountedPool.started
    stages = pipeline.ResumingStages(engine, None, None)
    assert stages.min_run() > len(tasks)
    resumed = [fleet.resume(p) for p in earlier[:3]]
    assert [p.agent for p in resumed] == [p.agent for p in earlier[:3]]
    assert CountedPool.started == started
