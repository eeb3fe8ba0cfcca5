"""Worlds: a fleet and a sequence of changes and placements, generated from a seed.

A world is what the matching suite plays through a matcher: `steps` are `("put", [declarations])`,
`("delete", name)` and `("place", requirements)`, in order, from an empty fleet. The vocabulary is
the standard workload's (`a3fast.workload`); sizes vary from a single agent to a few dozen, and
agents join, are replaced and leave between placements, so a matcher's bookkeeping is exercised as
well as its predicates.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

from .. import workload

__all__ = ["World", "random_world", "world_from_case", "live_fleet"]

Step = tuple[str, Any]


@dataclass
class World:
    """`label` names it in reports (`world 7 (seed 123)` or a vector's id)."""

    label: str
    steps: list[Step]
    #: the expected result of each placement, by its index among the placements, where a vector
    #: states one (random worlds have none: the literal reading of §5 is the expectation)
    expected: dict[int, Any] = field(default_factory=dict)

    def placements(self) -> int:
        return sum(1 for kind, _ in self.steps if kind == "place")

    def agents(self) -> int:
        return len({d["agent"]["name"] for kind, arg in self.steps if kind == "put" for d in arg})

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "steps": [{"op": kind, ("declarations" if kind == "put" else
                                                            "name" if kind == "delete" else
                                                            "requirements"): arg}
                                               for kind, arg in self.steps]}


def live_fleet(steps: list[Step]) -> dict[str, dict[str, Any]]:
    """The declarations live after `steps`, by name, in join order."""
    live: dict[str, dict[str, Any]] = {}
    for kind, arg in steps:
        if kind == "put":
            for doc in arg:
                live[doc["agent"]["name"]] = doc
        elif kind == "delete":
            live.pop(arg, None)
    return live


def random_world(index: int, seed: int, max_agents: int = 40, placements: int = 10) -> World:
    """World `index` of the stream that `seed` starts: the same for the same (seed, index)."""
    world_seed = (seed * 1_000_003 + index) % workload.MAX_SEED
    rng = random.Random(world_seed)
    size = rng.choice((1, 2, 3, 5, 8, rng.randint(1, max_agents), rng.randint(1, max_agents)))
    pool = workload.generate_fleet(size + placements, seed=world_seed)
    tasks = workload.generate_tasks(pool, placements, seed=world_seed)
    steps: list[Step] = [("put", pool[:size])]
    live = {d["agent"]["name"]: d for d in pool[:size]}
    spare = pool[size:]
    for task in tasks:
        roll = rng.random()
        if roll < 0.25 and spare:
            doc = spare.pop()
            steps.append(("put", [doc]))
            live[doc["agent"]["name"]] = doc
        elif roll < 0.35 and spare and live:
            # a replacement: another declaration under an existing agent's name and namespace
            name = rng.choice(sorted(live))
            doc = copy.deepcopy(spare.pop())
            doc["agent"] = dict(live[name]["agent"])
            steps.append(("put", [doc]))
            live[name] = doc
        elif roll < 0.5 and len(live) > 1:
            name = rng.choice(sorted(live))
            steps.append(("delete", name))
            del live[name]
        steps.append(("place", task))
    return World(f"world {index} (seed {seed})", steps)


def world_from_case(case) -> World:
    """A matching vector (a3fast.conformance.MatchingCase) as a world of one placement."""
    return World(case.id, [("put", list(case.fleet)), ("place", case.requirements)], {0: case.expected})
