"""The placing cycle driver: every placement of a fleet is a batch of tasks run through its stages.

A single placement is a batch of one. `drive` is the one path of `Fleet.place`, `place_many`,
`Fleet.scored` (what a shard of a sharded fleet answers with), and so of the service's place
routes, stdio `place` lines and replays, which all call those:

    prepare  every task parsed, routed and restricted before any is placed (an invalid one
             places nothing)
    waves    the tasks cut into waves that may be decided together: with `remember_session`, the
             n-th task of a session goes in wave n, since a bound placement's held session changes
             the affinity of the session's next task; every other task goes in the first
    decide   explain, score and choose for a whole wave (the engine's batch call, its loops on
             `workers` threads with the GIL released)
    build    the Placements of the wave, in order
    hold     a bound placement makes its agent hold the task's session (`Stages.hold`, the one
             place that rule is applied); `generation` is numbered as if the tasks ran one by one

What a fleet brings is a `Stages`: `LocalStages` (a3fast.fleet.pipeline) over one process's
index.
"""
from __future__ import annotations

import os
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ..schema import Requirements, parse_requirements
from .bulk_load import collector_paused
from .pipeline import MIN_RUN, CycleState
from .placement import Placement, Route
from .scoring import Scorer

__all__ = ["Stages", "drive", "waves_of"]

Task = Mapping[str, Any] | Requirements


@runtime_checkable
class Stages(Protocol):
    """The stages a fleet's placements go through (see the module docstring)."""

    def prepare(self, requirements: Task, session: str | None, route: Route | None,
                reason_limit: int | None, kind: str | None, scorer: Scorer | None,
                candidates: Iterable[str] | None) -> CycleState:
        """Parse once, apply the route, resolve the session and the candidates (SchemaError,
        RouteError, ValueError before anything is placed)."""

    def decide(self, states: list[CycleState], pool: Executor | None = None, parts: int = 1) -> None:
        """explain, score and choose for tasks that do not depend on one another; `pool` and
        `parts`: threads the engine's loops may be spread on."""

    def build(self, state: CycleState, generation: int) -> Placement:
        """The Placement of a decided cycle."""

    def hold(self, agent: str, session: str) -> bool:
        """The agent holds the session; True when it did not hold it yet."""


def waves_of(sessions: Sequence[str | None], remember_session: bool) -> list[list[int]]:
    """Task positions in waves, each in order: with `remember_session` the n-th task of a session
    in wave n (it must see what the (n-1)-th made its agent hold); every other task in wave 0."""
    if not remember_session:
        return [list(range(len(sessions)))]
    waves: list[list[int]] = [[]]
    seen: dict[str, int] = {}
    for i, session in enumerate(sessions):
        wave = 0
        if session is not None:
            wave = seen.get(session, 0)
            seen[session] = wave + 1
            if wave == len(waves):
                waves.append([])
        waves[wave].append(i)
    return waves


def drive(stages: Stages, tasks: Sequence[Task], sessions: Sequence[str | None] | None,
          generation: int, *, route: Route | None = None, reason_limit: int | None = None,
          kind: str | None = None, scorer: Scorer | None = None,
          candidates: Iterable[str] | None = None, remember_session: bool = True,
          workers: int | None = 1, build: bool = True) -> tuple[list[Any], int]:
    """Place `tasks` (with `sessions` beside them, or their own) in order through `stages`.

    Returns the Placements (the decided cycle states when not `build`: nothing is held and nothing
    changes) and the fleet's generation after the sessions the placements made their agents hold.
    `workers`: threads for the engine's loops (None: one per core); a pool is started only for a
    wave long enough to hand a run of at least MIN_RUN tasks to each thread.
    """
    if sessions is not None and len(sessions) != len(tasks):
        for task in tasks:      # an invalid task is named before a miscounted batch
            if type(task) is not Requirements:
                parse_requirements(task)
        raise ValueError(f"sessions: {len(sessions)} for {len(tasks)} tasks")
    if len(tasks) == 1:
        return _drive_one(stages, tasks[0], sessions[0] if sessions is not None else None, generation,
                          route, reason_limit, kind, scorer, candidates, remember_session, build)
    with collector_paused():
        return _drive_batch(stages, tasks, sessions, generation, route, reason_limit, kind, scorer,
                            candidates, remember_session, workers, build)


def _drive_one(stages: Stages, task: Task, session: str | None, generation: int, route: Route | None,
               reason_limit: int | None, kind: str | None, scorer: Scorer | None,
               candidates: Iterable[str] | None, remember_session: bool, build: bool) -> tuple[list[Any], int]:
    """`drive` for a batch of one: the same stages, without waves or a pool."""
    state = stages.prepare(task, session, route, reason_limit, kind, scorer, candidates)
    stages.decide([state])
    if not build:
        return [state], generation
    p = stages.build(state, generation)
    if remember_session and state.session is not None and p.agent is not None and stages.hold(p.agent, state.session):
        generation += 1
    return [p], generation


def _drive_batch(stages: Stages, tasks: Sequence[Task], sessions: Sequence[str | None] | None,
                 generation: int, route: Route | None, reason_limit: int | None, kind: str | None,
                 scorer: Scorer | None, candidates: Iterable[str] | None, remember_session: bool,
                 workers: int | None, build: bool) -> tuple[list[Any], int]:
    """`drive` for a batch, with the cyclic collector paused: a batch's cycle states and Placements
    all live until it returns, and every collection they would trigger rescans them for nothing."""
    prepare = stages.prepare
    if sessions is None:
        states = [prepare(t, None, route, reason_limit, kind, scorer, candidates) for t in tasks]
    else:
        states = [prepare(t, s, route, reason_limit, kind, scorer, candidates) for t, s in zip(tasks, sessions)]
    waves = [[states[i] for i in wave] for wave in
             waves_of([state.session for state in states], remember_session and build)]
    n = max(1, min(workers or os.cpu_count() or 1, len(states)))
    # a pool only when some wave can be cut into runs long enough to hand over (MIN_RUN): for a
    # smaller batch, starting and ending the pool costs more than the whole batch saves
    pool = (ThreadPoolExecutor(n - 1, thread_name_prefix="a3fast-place")
            if n > 1 and max(map(len, waves)) >= 2 * MIN_RUN else None)
    try:
        if not build:
            for wave in waves:
                stages.decide(wave, pool, n)
            return states, generation
        made: dict[int, tuple[Placement, bool]] = {}
        for wave in waves:
            stages.decide(wave, pool, n)
            for state in wave:
                p = stages.build(state, generation)
                made[id(state)] = p, (remember_session and state.session is not None
                                      and p.agent is not None and stages.hold(p.agent, state.session))
    finally:
        if pool is not None:
            pool.shutdown()
    placements = []
    for state in states:     # numbered in the tasks' order, as one by one would number them
        p, held = made[id(state)]
        p.generation = generation
        generation += held
        placements.append(p)
    return placements, generation
