"""`place_many` against placing one by one, side by side: the same fresh standard tasks (dicts, as a
caller sends them) on a fresh fleet of the standard workload, `Fleet.place` for each task in a loop
and `place_many` for the whole batch (`remember_session=False`, every core), in interleaved rounds of
one process. The target is place_many ≥ 1.6× one by one at 1,000 agents; the baseline is the loop
of the same rounds. A fresh fleet per run, so that neither reuses the other's explanations. Both
ways keep their placements until the clock stops, as a caller keeps what it placed: freeing them is
the caller's, when it lets them go, and a batch freeing two thousand at once (from memory the
caches no longer hold) would otherwise be timed against one by one's freeing each while it is
fresh."""
from __future__ import annotations

import gc
import statistics
import time
from typing import Any

from ..fleet import Fleet
from ..schema import parse_requirements
from ..workload import generate_fleet, generate_tasks

__all__ = ["bench_batching", "TARGET_BATCHING"]

#: place_many against placing one by one, at 1,000 agents.
TARGET_BATCHING = 1.6


def bench_batching(*, quick: bool = False, rounds: int = 7, workers: int | None = None) -> dict[str, Any]:
    """Medians of `rounds` interleaved runs of each way of placing, beside the target."""
    agents, n_tasks = (200, 200) if quick else (1_000, 2_000)
    rounds = 3 if quick else rounds
    declarations = generate_fleet(agents, seed=1)
    tasks = generate_tasks(declarations, n_tasks, seed=2)
    for task in tasks:      # the schema's memo of checked names warmed once, for both ways alike
        parse_requirements(task)
    wall: dict[str, list[float]] = {"one": [], "many": []}
    cpu: dict[str, list[float]] = {"one": [], "many": []}
    for _ in range(rounds):
        for way in ("one", "many"):
            fleet = Fleet()
            fleet.extend(declarations)
            gc.collect()
            kept: list[Any] = []
            started, used = time.perf_counter(), time.process_time()
            if way == "one":
                for task in tasks:
                    kept.append(fleet.place(task, remember_session=False))
            else:
                kept = fleet.place_many(tasks, remember_session=False, workers=workers)
            cpu[way].append(time.process_time() - used)
            wall[way].append(time.perf_counter() - started)
            del kept        # freed outside the clock, both ways: a caller keeps what it placed
    one, many = statistics.median(wall["one"]), statistics.median(wall["many"])
    return {"agents": agents, "tasks": n_tasks, "engine": Fleet().engine, "rounds": rounds,
            "one_us": one / n_tasks * 1e6, "many_us": many / n_tasks * 1e6,
            "one_cpu_us": statistics.median(cpu["one"]) / n_tasks * 1e6,
            "many_cpu_us": statistics.median(cpu["many"]) / n_tasks * 1e6,
            "speedup": one / many, "target_speedup": TARGET_BATCHING,
            # the target is set for 1,000 agents; a quick run's smaller fleet says nothing of it
            "met": None if quick else one / many >= TARGET_BATCHING}
