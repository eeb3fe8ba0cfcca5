"""Scoring (§5, soft phase): the default scorer's components and weights, and custom scorers.

The spec leaves scoring to the runtime but asks for memory affinity, historical success rate for
the task's kind, and cost, and that every component used be recorded per candidate. a3fast's
default adds `substantiated`: the share of the task's required capabilities that the agent backs
with an `evaluation` (§3: a scheduler MAY weight unsubstantiated claims lower).

Components, each in [0, 1], higher is better:
- affinity: 1 when the agent already holds the task's session, else 0;
- success_rate: (successes + 1) / (attempts + 2) for the task's kind (0.5 with no history);
- cost: 1 / (1 + cost_ceiling_usd), 0 when the agent declares no ceiling (unknown cost ranks last);
- substantiated: evaluated required capabilities / required capabilities (1 when none required).
total = ((0.4·affinity + 0.3·success_rate) + 0.2·cost) + 0.1·substantiated; ties go to the
smallest agent name.
"""
from __future__ import annotations

import importlib
import math
import numbers
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, Protocol, Sequence

from ..errors import describe
from ..schema import Declaration, Requirements

__all__ = ["DEFAULT_WEIGHTS", "COMPONENTS", "MAX_OUTCOMES", "cost_score", "ScoringTask", "Scorer", "choose",
           "check_total_bound", "score_entry"]

#: Weights of affinity, success_rate, cost, substantiated.
DEFAULT_WEIGHTS = (0.4, 0.3, 0.2, 0.1)
COMPONENTS = ("affinity", "success_rate", "cost", "substantiated")
#: The most outcomes (attempts) a fleet counts for one agent and task kind; one more is refused
#: (docs/design.md, Reading 26). Below 2^53 - 2, so successes + 1 and attempts + 2 are exact as
#: doubles and both engines compute the same success rate, and far below int64's limit.
MAX_OUTCOMES = 10**15


def check_total_bound(weights: Sequence[float]) -> None:
    """ValueError unless a total of components from 0 to 1 stays a finite number under `weights`
    (their magnitudes add up to one): an infinite total would be written to a record as null."""
    if not math.isfinite(sum(map(abs, weights))):
        raise ValueError(f"weights: expected numbers whose magnitudes add up to a finite number, "
                         f"found {tuple(weights)!r}")


def cost_score(decl: Declaration) -> float:
    """The cost component of one agent, from its declared `cost_ceiling_usd`."""
    ceiling = decl.model.cost_ceiling_usd if decl.model else None
    if ceiling is None:
        return 0.0
    try:
        return 1.0 / (1.0 + float(Decimal(ceiling)))
    except (InvalidOperation, OverflowError):
        return 0.0


@dataclass(frozen=True)
class ScoringTask:
    """What a custom scorer is told about the task."""

    requirements: Requirements
    session: str | None
    kind: str
    #: success history of the task's kind: agent name -> (successes, attempts)
    outcomes: Callable[[str], tuple[int, int]]
    #: whether an agent holds the task's session
    holds_session: Callable[[str], bool]


class Scorer(Protocol):
    """A custom scorer: one mapping per eligible agent, each with a float `total` and the components
    that produced it (recorded as given, in the agent's `scores` entry: named by strings, with
    values JSON states as given, `score_entry`)."""

    def __call__(self, task: ScoringTask, agents: Sequence[Declaration]) -> Sequence[Mapping[str, Any]]:
        ...


#: How deep a custom score entry's values may nest (what a record's JSON writer takes, with room).
_ENTRY_DEPTH = 64


def score_entry(entry: Mapping[Any, Any]) -> dict[str, Any]:
    """A custom scorer's entry as a record states it, or ValueError saying what keeps it out of one:
    every component named by a string, every value JSON — no NaN or infinity (which JSON writers
    turn into null), integers of 64 bits, strings UTF-8 can write, lists and objects of those.
    Numbers of other types that are numbers (a numpy float64, say) are taken as the int or float
    they are."""
    out = {}
    for key, value in entry.items():
        if type(key) is not str:
            raise ValueError(f"a component named {describe(key)} (names are strings)")
        if not _writable(key):
            raise ValueError(f"a component named {describe(key)}: a string UTF-8 cannot write (a lone surrogate)")
        try:
            out[key] = _json_value(value, 0)
        except ValueError as exc:
            raise ValueError(f"component {key!r}: {exc}") from None
    return out


def _writable(text: str) -> bool:
    """Whether UTF-8 can write `text` (no lone surrogate), as every record writer must."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_value(value: Any, depth: int) -> Any:
    if value is None or type(value) is bool:
        return value
    if isinstance(value, str):
        if not _writable(value):
            raise ValueError("a string UTF-8 cannot write (a lone surrogate)")
        return str(value)
    if isinstance(value, numbers.Integral):
        number = int(value)
        if not -2**63 <= number < 2**64:
            raise ValueError(f"{describe(number)} is past 64 bits")
        return number
    if isinstance(value, numbers.Real):
        real = float(value)
        if not math.isfinite(real):
            raise ValueError(f"{describe(real)} is no JSON number")
        return real
    if depth >= _ENTRY_DEPTH and isinstance(value, (list, tuple, dict)):
        raise ValueError(f"nested more than {_ENTRY_DEPTH} deep")
    if isinstance(value, (list, tuple)):
        return [_json_value(item, depth + 1) for item in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(f"an object key {describe(key)} (keys are strings)")
            if not _writable(key):
                raise ValueError(f"an object key {describe(key)}: a string UTF-8 cannot write (a lone surrogate)")
            out[key] = _json_value(item, depth + 1)
        return out
    raise ValueError(f"a {type(value).__name__}, not a JSON value")


def choose(names: Sequence[str], totals: Sequence[float]) -> int:
    """Index of the highest total; ties go to the smallest name. -1 when there is nothing to choose."""
    best = -1
    for j, (name, total) in enumerate(zip(names, totals)):
        if best < 0 or total > totals[best] or (total == totals[best] and name < names[best]):
            best = j
    return best


def import_scorer(name: str) -> Scorer:
    """A custom scorer given by importable name, "package.module:function" (what every process of
    a sharded fleet can import). ValueError naming what is wrong."""
    module_name, sep, attribute = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not sep or not module_name or not attribute:
        raise ValueError(f"scorer: expected an importable name 'package.module:function', found {name!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"scorer {name!r}: cannot import {module_name!r} ({exc})") from None
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise ValueError(f"scorer {name!r}: {attribute!r} is not a callable of {module_name!r}")
    return found
