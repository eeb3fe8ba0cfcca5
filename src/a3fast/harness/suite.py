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

#: A matcher that crashed or hung this many times is not given the rest of the worlds.
GIVE_UP_AFTER = 3
#: Failing worlds listed one by one; the rest are counted.
LIST_AT_MOST = 20
#: Failures shrunk per run (each shrink replays the world many times); later ones are reported as found.
SHRINK_AT_MOST = 3


@dataclass
class SuiteReport:
    passed: int = 0
    #: (found, shrunk): shrunk is None when the failure was not shrunk (see Failure.unreproducible)
    failures: list[tuple[Failure, Failure | None]] = field(default_factory=list)
    placements: int = 0
    seconds: float = 0.0
    not_run: int = 0            # worlds left out after the matcher crashed or hung GIVE_UP_AFTER times
    not_run_random: int = 0     # of which random worlds (the rest: the vectors' cases)


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
        shrink_tries = 0
        todo: list[tuple[World, bool]] = [(world_from_case(c), False) for c in cases]
        todo += [(random_world(i, seed), True) for i in range(worlds)]
        lost = 0
        for done, (world, shrinkable) in enumerate(todo):
            if lost >= GIVE_UP_AFTER:
                out.not_run = len(todo) - done
                out.not_run_random = sum(shrinkable for _, shrinkable in todo[done:])
                break
            failure = session.play(world)
            if failure is None:
                out.passed += 1
                report(f"ok   {world.label}")
                continue
            if failure.check == "start":
                raise MatcherFailure("start", failure.differences[0][1])
            lost += failure.check in ("timeout", "crashed")
            shrunk = None
            if shrinkable and failure.check not in ("timeout", "crashed") and shrink_tries < SHRINK_AT_MOST:
                shrink_tries += 1
                shrunk = shrink(session, failure, budget_s=shrink_budget_s)
                if shrunk is None:
                    failure.unreproducible = True
            out.failures.append((failure, shrunk))
    finally:
        out.placements = session.placements
        session.close()
    out.seconds = time.perf_counter() - started
    return out


def describe_failures(failures: list[tuple[Failure, Failure | None]]) -> list[str]:
    lines = [line for found, shrunk in failures[:LIST_AT_MOST] for line in describe_failure(found, shrunk)]
    if len(failures) > LIST_AT_MOST:
        lines.append(f"… and {len(failures) - LIST_AT_MOST} more failing worlds")
    return lines


def describe_failure(found: Failure, shrunk: Failure | None) -> list[str]:
    lines = [f"FAIL {found.describe()}"]
    if found.unreproducible:
        lines.append("  (not shown by a new matcher process given this world alone: the matcher kept "
                     "something from an earlier world)")
    if shrunk is not None:
        world = shrunk.world
        lines.append(f"  shrunk to {world.agents()} agent(s), {len(world.steps)} step(s), "
                     f"{world.placements()} placement(s): {shrunk.describe()}")
        lines.append("  world: " + json.dumps(world.to_json()["steps"], separators=(",", ":")))
    return lines
