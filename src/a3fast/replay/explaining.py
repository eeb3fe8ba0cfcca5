"""Why a decision changed: the funnels and score entries of the two decisions, and the component or
predicate that decided between them."""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence, TypeGuard

from pyroaring import BitMap

from ..explain import predicate_counts
from ..fleet.placement import Placement
from ..predicates import first_failed
from ..record.compact import KEY as COMPACT_KEY
from ..fleet.scoring import COMPONENTS
from ..trace import TraceContentError
from .verdict import NOT_IN_FLEET, TIE_BREAK, Funnel

__all__ = ["funnel_of", "scores_of", "recorded_lists", "last_removed", "deciding_component",
           "weights_of", "first_failed_on", "number"]


def funnel_of(p: Placement) -> Funnel:
    expl = p.explanation
    counts = predicate_counts(expl.candidates_count, p.predicates, expl.failed_counts())
    return Funnel(expl.candidates_count, expl.eligible_count, tuple(counts))


def _funnel(candidates: int, predicates: Sequence[str], removed: Sequence[int]) -> Funnel:
    return Funnel(candidates, candidates - sum(removed), tuple(predicate_counts(candidates, predicates, removed)))


def scores_of(p: Placement, names: list[str]) -> dict[str, dict[str, Any]]:
    """The score entries of the named agents that are eligible in `p`."""
    if not p.bound:
        return {}
    index = p.index
    if p.custom_scores:
        wanted = set(names)
        return {index.name(aid): dict(entry) for aid, entry in zip(p.scores.ids, p.scores.entries)
                if index.name(aid) in wanted}
    scores = index.score_map(p.scores)
    return {name: dict(scores[name]) for name in names if name in scores}


def recorded_lists(recorded: Any, reader: Any, names: list[str]) -> tuple[Funnel | None, dict[str, Any]]:
    """The recorded funnel, and the recorded score entries of `names` (those that were scored);
    (None, {}) for a record without the §6 lists (a resumption) or whose lists cannot be read."""
    try:
        content = recorded.record.content
        if COMPACT_KEY in content:
            return _compact_lists(reader.member(recorded.record, content), names)
        return _spec_lists(recorded, content, names)
    except (TraceContentError, TypeError, KeyError, AttributeError, ValueError):
        return None, {}


def _compact_lists(member: Any, names: list[str]) -> tuple[Funnel, dict[str, Any]]:
    # each candidate once, under the first predicate that lists it, as `_spec_lists` counts
    candidates = member.candidates
    seen = BitMap()
    removed = []
    for ids in member.failed:
        new = (ids & candidates) - seen
        removed.append(len(new))
        seen |= new
    funnel = _funnel(len(candidates), member.predicates, removed)
    scores: dict[str, Any] = {}
    table = member.names
    for name in names:
        try:
            aid = table.index(name)
        except ValueError:
            continue
        if aid in member.score_ids:
            at = member.score_ids.rank(aid) - 1
            scores[name] = {column: values[at] for column, values in member.score_columns}
    return funnel, scores


def _spec_lists(recorded: Any, content: Mapping[str, Any], names: list[str]) -> tuple[Funnel | None, dict[str, Any]]:
    if recorded.kind == "task.bound":
        holder = content["scheduling"]
        if "candidates" not in holder:
            return None, {}
        predicates = list(holder.get("filters_passed") or ())
    else:
        holder = content
        if "candidates" not in holder:
            return None, {}
        predicates = list(recorded.requirements.predicates)
    # each candidate once, under the first failure listed for it, as `a3fast explain` counts: what
    # §7 tolerates beyond that (a failure of no candidate, a candidate listed twice) never makes a
    # count negative
    considered = set(holder["candidates"])
    counted: set[str] = set()
    counts: Counter[str] = Counter()
    for pair in holder.get("filters_failed") or ():
        name = pair["candidate"]
        if name in considered and name not in counted:
            counted.add(name)
            counts[pair["predicate"]] += 1
    predicates += [p for p in counts if p not in predicates]
    funnel = _funnel(len(considered), predicates, [counts.get(p, 0) for p in predicates])
    scores = holder.get("scores") or {} if recorded.kind == "task.bound" else {}
    return funnel, {name: dict(scores[name]) for name in names if name in scores}


def last_removed(funnel: Funnel) -> str | None:
    """The predicate after which no candidate remains (None when there were no candidates at all)."""
    for count in funnel.predicates:
        if count.removed and count.removed == count.reached:
            return count.predicate
    return None


def weights_of(fleet: Any, p: Placement) -> dict[str, float] | None:
    if p.custom_scores:
        return None
    return dict(zip(COMPONENTS, fleet.weights))


def deciding_component(winner: Mapping[str, Any], loser: Mapping[str, Any],
                       weights: Mapping[str, float] | None) -> str:
    """The component that gives the winner its largest (weighted) lead, or TIE_BREAK for equal totals."""
    if winner.get("total") == loser.get("total"):
        return TIE_BREAK
    best, lead = None, 0.0
    for name, value in winner.items():
        other = loser.get(name)
        if name == "total" or not number(value) or not number(other):
            continue
        gain = (value - other) * (weights.get(name, 1.0) if weights is not None else 1.0)
        if best is None or gain > lead:
            best, lead = name, gain
    return best if best is not None and lead > 0 else "total"


def first_failed_on(fleet: Any, agent: str, predicates: Sequence[str]) -> str | None:
    """The agent's first failed predicate on `fleet` (derivation order), NOT_IN_FLEET if it is not
    there, None if it satisfies every one."""
    decl = fleet.get(agent)
    if decl is None:
        return NOT_IN_FLEET
    return first_failed(decl, predicates)


def number(value: Any) -> TypeGuard[float]:
    """A JSON number (not a bool): what a score entry's component is to be compared as."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
