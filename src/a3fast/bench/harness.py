"""Timing: per-task medians over interleaved rounds, so that every subject sees the same noise.

A cell is one (fleet size, subject, scenario). A warm-up round runs each subject on the tasks in
order until the cell's share of the time budget is spent (at least `min_tasks`) and fixes which
tasks the cell measures; its times are dropped (first calls fill caches: a prepared requirements
object is resolved once per fleet). Then `rounds` rounds time the same tasks again, subject after
subject, so a burst of load on a shared machine lands on all of them. Each subject is measured
warm, as in a scheduler placing task after task: when its tasks take under `WARM_PASS_S`, an
untimed pass over them precedes each timed one (otherwise the previous subject's data would have
evicted its rows from the caches). A task's time is its best over the rounds: on a shared machine
noise only ever adds time, and a burst of load lasts seconds, long enough to cover most of the
rounds of a fast subject (timeit's advice, for the same reason). A cell's figure is the median of
its tasks' times: the middle of the workload's mix. Ratios compare two cells on the tasks both
measured.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["Cell", "measure_cells", "time_each", "ratio", "WARM_PASS_S"]

#: A subject whose pass over its tasks takes less than this gets an untimed pass before each round.
WARM_PASS_S = 0.25


@dataclass
class Cell:
    size: int
    subject: str
    scenario: str
    #: per round, per task: nanoseconds
    rounds: list[list[int]] = field(default_factory=list)

    @property
    def per_task_ns(self) -> list[float]:
        """Each task's best time over the rounds."""
        n = min(len(r) for r in self.rounds)
        return [min(r[i] for r in self.rounds) for i in range(n)]

    @property
    def median_ns(self) -> float:
        return statistics.median(self.per_task_ns)

    @property
    def tasks(self) -> int:
        return min(len(r) for r in self.rounds)


def _time_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], limit: int | None, budget_ns: int,
                min_tasks: int) -> list[int]:
    out = []
    clock = time.perf_counter_ns
    deadline = clock() + budget_ns
    for i, task in enumerate(tasks):
        if limit is not None and i >= limit:
            break
        if limit is None and i >= min_tasks and clock() > deadline:
            break
        started = clock()
        fn(task)
        out.append(clock() - started)
    return out


def measure_cells(size: int, scenario: str, subjects: Sequence[tuple[str, Callable[[Any], Any]]],
                  tasks: Sequence[Any], *, rounds: int, budget_s: float, min_tasks: int) -> list[Cell]:
    """Time every subject's callable on `tasks`, interleaved round by round (see module doc)."""
    cells = [Cell(size, name, scenario) for name, _ in subjects]
    per_round_ns = int(budget_s * 1e9 / (rounds + 1))
    warmups = [_time_tasks(fn, tasks, None, per_round_ns, min_tasks) for _, fn in subjects]
    for _ in range(rounds):
        for cell, warmup, (_, fn) in zip(cells, warmups, subjects):
            if sum(warmup) < WARM_PASS_S * 1e9:
                for task in tasks[:len(warmup)]:
                    fn(task)
            cell.rounds.append(_time_tasks(fn, tasks, len(warmup), per_round_ns, min_tasks))
    return cells


def time_each(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[int]:
    """Nanoseconds of `fn(item)` for each item, in order."""
    clock = time.perf_counter_ns
    out = []
    for item in items:
        started = clock()
        fn(item)
        out.append(clock() - started)
    return out


def ratio(slow: Cell, fast: Cell) -> float:
    """How many times `fast` is faster than `slow`: medians over the tasks both measured."""
    n = min(slow.tasks, fast.tasks)
    return statistics.median(slow.per_task_ns[:n]) / statistics.median(fast.per_task_ns[:n])
