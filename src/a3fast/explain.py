"""Explanations people can read: a one-line verdict, per-predicate counts, and every failed predicate.

The counts come free from the first-failed sets: a predicate is *reached* by the candidates that
passed every predicate before it, and *removes* those whose first failure it is. All of it works on
a live Placement and on a record read back from a trace (spec or compact form).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .predicates import AGENT_REF, ANTI_AFFINITY
from .schema import parse_requirements


__all__ = ["PredicateCount", "Explained", "predicate_counts", "summary_line", "explain_record",
           "all_failed", "counts_table"]


@dataclass(frozen=True)
class PredicateCount:
    predicate: str
    reached: int
    removed: int


@dataclass(frozen=True)
class Explained:
    """One placement's explanation, whatever it was read from."""

    seq: int | None
    kind: str
    predicates: tuple[str, ...]
    candidates: int
    failed_counts: tuple[int, ...]
    chosen: str | None
    scores: Mapping[str, Mapping[str, Any]]
    reason: str | None = None

    @property
    def eligible(self) -> int:
        return self.candidates - sum(self.failed_counts)

    def counts(self) -> list[PredicateCount]:
        return predicate_counts(self.candidates, self.predicates, self.failed_counts)

    def summary(self) -> str:
        return summary_line(self.eligible, self.candidates, self.predicates, self.failed_counts, self.chosen)


def predicate_counts(candidates: int, predicates: Sequence[str], failed: Sequence[int]) -> list[PredicateCount]:
    out, reached = [], candidates
    for predicate, removed in zip(predicates, failed):
        out.append(PredicateCount(predicate, reached, removed))
        reached -= removed
    return out


def summary_line(eligible: int, candidates: int, predicates: Sequence[str], failed: Sequence[int],
                 chosen: str | None) -> str:
    """"3/1000 agents eligible: 612 lack capability:x/2, 301 lack clearance:y; chose a" — in the
    style of a scheduler event, ordered by derivation order."""
    parts = [f"{count} excluded by {p}" if p.startswith(ANTI_AFFINITY + ":")
             else f"{count} not {p}" if p.startswith(AGENT_REF + ":")
             else f"{count} lack {p}"
             for p, count in zip(predicates, failed) if count]
    head = f"{eligible}/{candidates} agents eligible"
    tail = f"; chose {chosen}" if chosen is not None else "; unschedulable"
    return head + (": " + ", ".join(parts) if parts else "") + tail


def counts_table(counts: Sequence[PredicateCount]) -> list[str]:
    """Nomad-style lines: how many candidates reached each predicate and how many it removed."""
    width = max([len(c.predicate) for c in counts] + [9])
    lines = [f"  {'predicate'.ljust(width)}  {'reached':>8}  {'removed':>8}"]
    lines += [f"  {c.predicate.ljust(width)}  {c.reached:8d}  {c.removed:8d}" for c in counts]
    return lines


def explain_record(seq: int | None, kind: str, content: Any) -> Explained | None:
    """The explanation of a task.bound or task.rejected record in spec form (decode compact records
    first); None for other records, resumed placements and records without the §6 lists."""
    if not isinstance(content, Mapping):
        return None
    if kind == "task.bound":
        s = content.get("scheduling")
        if not isinstance(s, Mapping) or not isinstance(s.get("candidates"), list):
            return None
        predicates = s.get("filters_passed") if isinstance(s.get("filters_passed"), list) else []
        failed = s.get("filters_failed") if isinstance(s.get("filters_failed"), list) else []
        declaration = s.get("declaration") if isinstance(s.get("declaration"), Mapping) else {}
        agent = declaration.get("agent") if isinstance(declaration.get("agent"), Mapping) else {}
        chosen = agent.get("name") if isinstance(agent.get("name"), str) else None
        scores = s.get("scores") if isinstance(s.get("scores"), Mapping) else {}
        return _explained(seq, kind, predicates, s["candidates"], failed, chosen, scores, None)
    if kind == "task.rejected" and isinstance(content.get("candidates"), list):
        failed = content.get("filters_failed") if isinstance(content.get("filters_failed"), list) else []
        try:
            predicates = list(parse_requirements(content.get("requirements") or {}).predicates)
        except Exception:  # a foreign rejection's requirements: fall back to what failed
            predicates = []
        reason = content.get("reason") if isinstance(content.get("reason"), str) else None
        return _explained(seq, kind, predicates, content["candidates"], failed, None, {}, reason)
    return None


def _explained(seq, kind, predicates, candidates, failed, chosen, scores, reason) -> Explained:
    order = [p for p in predicates if isinstance(p, str)]
    counts = dict.fromkeys(order, 0)
    for pair in failed:
        if isinstance(pair, Mapping) and isinstance(pair.get("predicate"), str):
            counts[pair["predicate"]] = counts.get(pair["predicate"], 0) + 1
    return Explained(seq, kind, tuple(counts), len(candidates), tuple(counts.values()), chosen, scores, reason)


def all_failed(fleet: Any, requirements: Any) -> dict[str, list[str]]:
    """Every predicate each ineligible agent of `fleet` fails, not only the first (derivation order);
    see `Fleet.all_failed`."""
    return fleet.all_failed(requirements)
