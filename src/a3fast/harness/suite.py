"""The matching suite over the protocol: the matching vectors, then a seeded stream of random worlds,
through one matcher command; failures of random worlds are shrunk before they are reported."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

from .client import MatcherFailure
from .session import Failure, Session
from .shrink import shrink
from .worlds import World, random_world, world_from_case

__all__ = ["SuiteReport", "run_matching_suite", "SHRINK_AT_MOST"]

#: Failures shrunk per run (each shrink replays the world many times); later ones are reported as found.
SHRINK_AT_MOST = 3


@dataclass
class SuiteReport:
    passed: int = 0
    failures: list[tuple[Failure, Failure | None]] = field(default_factory=list)   # (found, shrunk)
    placements: int = 0
    seconds: float = 0.0


def run_matching_suite(command: str, cases, worlds: int, seed: int, timeout: float,
                       report: Callable[[str], None] = lambda line: None,
                       shrink_budget_s: float = 20.0) -> SuiteReport:
    """Run the vectors' cases and `worlds` random worlds; `report` is told of each world that
    passed (for --verbose). MatcherFailure("start") when the matcher cannot be started at all."""
    out = SuiteReport()
    started = time.perf_counter()
    session = Session(command, timeout)
    try:
        session.start()
        todo: list[tuple[World, bool]] = [(world_from_case(c), False) for c in cases]
        todo += [(random_world(i, seed), True) for i in range(worlds)]
        for world, shrinkable in todo:
            failure = session.play(world)
            if failure is None:
                out.passed += 1
                report(f"ok   {world.label}")
                continue
            if failure.check == "start":
                raise MatcherFailure("start", failure.differences[0][1])
            shrunk = None
            if shrinkable and failure.check not in ("timeout", "crashed") and \
                    sum(1 for _, s in out.failures if s is not None) < SHRINK_AT_MOST:
                shrunk = shrink(session, failure, budget_s=shrink_budget_s)
            out.failures.append((failure, shrunk))
    finally:
        out.placements = session.placements
        session.close()
    out.seconds = time.perf_counter() - started
    return out


def describe_failure(found: Failure, shrunk: Failure | None) -> list[str]:
    lines = [f"FAIL {found.describe()}"]
    if shrunk is not None:
        world = shrunk.world
        lines.append(f"  shrunk to {world.agents()} agent(s), {len(world.steps)} step(s), "
                     f"{world.placements()} placement(s): {shrunk.describe()}")
        lines.append("  world: " + json.dumps(world.to_json()["steps"], separators=(",", ":")))
    return lines
