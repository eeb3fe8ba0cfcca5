"""Shrinking a failing world to the smallest one that still shows the same wrong placement.

In turn, while the failure persists (the same check fails at the world's last placement): cut the
steps after the failing placement, drop earlier placements, drop agents (every put and delete of
them), drop single changes, and drop requirements (each capability, clearance, tool, the residency,
the model, agentRef, each exclude entry) from the failing placement — each by delta debugging
(halves first, then smaller pieces), to a fixed point or the trial budget.
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable, Sequence, TypeVar

from .session import Failure, Session
from .worlds import Step, World

__all__ = ["shrink", "minimise"]

T = TypeVar("T")

#: Requirement fields dropped whole, and list fields dropped entry by entry.
_SCALARS = ("residency", "model", "agentRef", "session")
_LISTS = ("capabilities", "clearances", "tools", "exclude")


def minimise(items: Sequence[T], still_fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal sublist of `items` for which `still_fails` holds (Zeller's ddmin, complements only)."""
    items = list(items)
    chunks = 2
    while len(items) >= 1:
        size = max(1, len(items) // chunks)
        reduced = False
        for start in range(0, len(items), size):
            rest = items[:start] + items[start + size:]
            if still_fails(rest):
                items, chunks, reduced = rest, max(chunks - 1, 2), True
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(items), chunks * 2)
    return items


def shrink(session: Session, failure: Failure, budget_s: float = 20.0, max_trials: int = 400) -> Failure | None:
    """The smallest failing world found from `failure`'s, and its failure; None when the failure
    does not show on a new matcher process (it depends on what earlier worlds left behind)."""
    deadline = time.monotonic() + budget_s
    trials = 0
    best = failure
    check = failure.check

    def fails(steps: list[Step]) -> bool:
        nonlocal trials, best
        if trials >= max_trials or time.monotonic() > deadline:
            return False
        if not steps or steps[-1][0] != "place":
            return False
        trials += 1
        world = World(failure.world.label + ", shrunk", steps)
        found = session.play(world)
        if found is not None and found.check == check and found.step == len(steps):
            best = found
            return True
        return False

    steps = list(failure.world.steps[:failure.step])
    session.fresh = False
    if not fails(steps):
        # the failure needs what an earlier world left in the matcher: shrink from a new process
        # each time (slower, and bounded by the same budget)
        session.fresh = True
        if not fails(steps):
            session.fresh = False
            return None
    try:
        while True:
            before = _size(steps)
            steps = _drop_placements(steps, fails)
            steps = _drop_agents(steps, fails)
            steps = minimise(steps[:-1], lambda kept: fails(kept + [steps[-1]])) + [steps[-1]]
            steps = _drop_requirements(steps, fails)
            steps = _drop_declaration_entries(steps, fails)
            if _size(steps) >= before or trials >= max_trials or time.monotonic() > deadline:
                break
        if not session.fresh:
            # what is reported must show the failure from a new process too
            session.fresh = True
            confirmed = session.play(best.world)
            if confirmed is None or confirmed.check != check:
                return None
    finally:
        session.fresh = False
    return best


def _size(steps: list[Step]) -> tuple[int, int]:
    return len(steps), sum(len(arg) + len(_entries([(kind, arg)])) if kind == "put" else 1 for kind, arg in steps) + \
        sum(len(_requirement_parts(arg)) for kind, arg in steps if kind == "place")


#: Declaration fields whose entries are dropped one by one.
_DECLARED = ("capabilities", "clearances", "tools", "residency")


def _entries(steps: list[Step]) -> list[tuple[int, int, str, int]]:
    """Every droppable entry of every declaration: (step, declaration, field, index)."""
    out = []
    for s, (kind, arg) in enumerate(steps):
        if kind == "put":
            for d, doc in enumerate(arg):
                for f in _DECLARED:
                    if isinstance(doc.get(f), list):
                        out += [(s, d, f, i) for i in range(len(doc[f]))]
    return out


def _with_entries(steps: list[Step], keep: set) -> list[Step]:
    out: list[Step] = []
    for s, (kind, arg) in enumerate(steps):
        if kind != "put":
            out.append((kind, arg))
            continue
        docs = []
        for d, doc in enumerate(arg):
            doc = dict(doc)
            for f in _DECLARED:
                if isinstance(doc.get(f), list):
                    doc[f] = [e for i, e in enumerate(doc[f]) if (s, d, f, i) in keep]
                    if not doc[f] and f in ("tools", "residency"):
                        del doc[f]
            docs.append(doc)
        out.append((kind, docs))
    return out


def _drop_declaration_entries(steps: list[Step], fails) -> list[Step]:
    entries = _entries(steps)
    kept = set(minimise(entries, lambda keep: fails(_with_entries(steps, set(keep)))))
    return _with_entries(steps, kept)


def _drop_placements(steps: list[Step], fails) -> list[Step]:
    earlier = [i for i, (kind, _) in enumerate(steps[:-1]) if kind == "place"]
    kept = minimise(earlier, lambda keep: fails(_without_indices(steps, set(earlier) - set(keep))))
    return _without_indices(steps, set(earlier) - set(kept))


def _without_indices(steps: list[Step], drop: set[int]) -> list[Step]:
    return [s for i, s in enumerate(steps) if i not in drop]


def _drop_agents(steps: list[Step], fails) -> list[Step]:
    names = list(dict.fromkeys(d["agent"]["name"] for kind, arg in steps if kind == "put" for d in arg))
    kept = set(minimise(names, lambda keep: fails(_only_agents(steps, set(keep)))))
    return _only_agents(steps, kept)


def _only_agents(steps: list[Step], names: set[str]) -> list[Step]:
    out: list[Step] = []
    for kind, arg in steps:
        if kind == "put":
            docs = [d for d in arg if d["agent"]["name"] in names]
            if docs:
                out.append((kind, docs))
        elif kind == "delete":
            if arg in names:
                out.append((kind, arg))
        else:
            out.append((kind, arg))
    return out


def _requirement_parts(requirements: dict[str, Any]) -> list[tuple[str, int | None]]:
    parts: list[tuple[str, int | None]] = [(f, None) for f in _SCALARS if f in requirements]
    for f in _LISTS:
        if isinstance(requirements.get(f), list):
            parts += [(f, i) for i in range(len(requirements[f]))]
    return parts


def _requirements_with(requirements: dict[str, Any], keep: list[tuple[str, int | None]]) -> dict[str, Any]:
    kept = set(keep)
    out = copy.deepcopy(requirements)
    for f in _SCALARS:
        if f in out and (f, None) not in kept:
            del out[f]
    for f in _LISTS:
        if isinstance(out.get(f), list):
            entries = [e for i, e in enumerate(out[f]) if (f, i) in kept]
            if entries:
                out[f] = entries
            else:
                del out[f]
    return out


def _drop_requirements(steps: list[Step], fails) -> list[Step]:
    requirements = steps[-1][1]
    parts = _requirement_parts(requirements)
    kept = minimise(parts, lambda keep: fails(steps[:-1] + [("place", _requirements_with(requirements, keep))]))
    return steps[:-1] + [("place", _requirements_with(requirements, kept))]
