"""Explanations people can read: a one-line verdict, per-predicate counts, and every failed predicate.

The counts come free from the first-failed sets: a predicate is *reached* by the candidates that
passed every predicate before it, and *removes* those whose first failure it is. All of it works on
a live Placement and on a record read back from a trace (spec or compact form).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import A3Error, describe, json_path
from .predicates import AGENT_REF, ANTI_AFFINITY
from .schema import parse_requirements

__all__ = ["PredicateCount", "Explained", "ExplainError", "predicate_counts", "summary_line",
           "explain_record", "all_failed", "counts_table"]


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


class ExplainError(A3Error):
    """A placement record whose §6 lists cannot be read as lists; names the seq and the JSON path."""


def explain_record(seq: int | None, kind: str, content: Any) -> Explained | None:
    """The explanation of a task.bound or task.rejected record in spec form (decode compact records
    first); None for other records and for placements recorded without the §6 lists (a resumed
    placement's scheduling, a rejection without `candidates`). ExplainError, naming the seq and the
    member, when the lists are there but not of their §6 shape; an absent `filters_passed`,
    `filters_failed` or `scores` reads as empty."""
    if not isinstance(content, Mapping):
        return None
    at = f"seq {seq}: $.content"
    if kind == "task.bound":
        if "scheduling" not in content:
            return None
        s = _mapping(content["scheduling"], f"{at}.scheduling", "the scheduling object")
        if "candidates" not in s:
            return None
        at += ".scheduling"
        candidates = _strings(s["candidates"], f"{at}.candidates", "agent names")
        predicates = _strings(s.get("filters_passed", []), f"{at}.filters_passed", "predicate strings")
        failed = _failed_pairs(s.get("filters_failed", []), f"{at}.filters_failed")
        scores = _mapping(s.get("scores", {}), f"{at}.scores", "an object of score entries")
        for name, entry in scores.items():
            where = json_path(f"{at}.scores", name) if isinstance(name, str) else f"{at}.scores[{name!r}]"
            _mapping(entry, where, "an object of score components")
        return _explained(seq, kind, predicates, candidates, failed, _chosen(s, at), scores, None)
    if kind == "task.rejected":
        if "candidates" not in content:
            return None
        candidates = _strings(content["candidates"], f"{at}.candidates", "agent names")
        failed = _failed_pairs(content.get("filters_failed", []), f"{at}.filters_failed")
        reason = content.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise _wrong(f"{at}.reason", "a string", reason)
        try:
            predicates = list(parse_requirements(content.get("requirements") or {}).predicates)
        except Exception:  # a foreign rejection's requirements: fall back to the order of what failed
            predicates = []
        return _explained(seq, kind, predicates, candidates, failed, None, {}, reason)
    return None


def _wrong(where: str, expected: str, found: Any) -> ExplainError:
    return ExplainError(f"{where}: expected {expected}, found {describe(found)}")


def _mapping(value: Any, where: str, expected: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _wrong(where, expected, value)
    return value


def _strings(value: Any, where: str, what: str) -> list[str]:
    if not isinstance(value, list):
        raise _wrong(where, f"an array of {what}", value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _wrong(f"{where}[{i}]", "a string", item)
    return value


def _failed_pairs(value: Any, where: str) -> list[Mapping[str, str]]:
    if not isinstance(value, list):
        raise _wrong(where, "an array of {candidate, predicate}", value)
    for i, pair in enumerate(value):
        _mapping(pair, f"{where}[{i}]", "an object {candidate, predicate}")
        for member in ("candidate", "predicate"):
            if not isinstance(pair.get(member), str):
                raise _wrong(f"{where}[{i}].{member}", "a string", pair.get(member))
    return value


def _chosen(scheduling: Mapping[str, Any], at: str) -> str:
    declaration = _mapping(scheduling.get("declaration"), f"{at}.declaration", "the chosen agent's declaration")
    agent = _mapping(declaration.get("agent"), f"{at}.declaration.agent", "an object with the agent's name")
    if not isinstance(agent.get("name"), str):
        raise _wrong(f"{at}.declaration.agent.name", "the chosen agent's name", agent.get("name"))
    return agent["name"]


def _explained(seq, kind, predicates, candidates, failed, chosen, scores, reason) -> Explained:
    # a count of candidates: each one once (a name listed twice is one agent), and a failure
    # counted for a candidate only, under the first predicate listed for it; what §7 tolerates
    # beyond that (a failure of no candidate, one listed twice) never makes a count negative
    considered = set(candidates)
    counted: set[str] = set()
    counts = dict.fromkeys(predicates, 0)
    for pair in failed:
        name = pair["candidate"]
        if name in considered and name not in counted:
            counted.add(name)
            counts[pair["predicate"]] = counts.get(pair["predicate"], 0) + 1
    return Explained(seq, kind, tuple(counts), len(considered), tuple(counts.values()), chosen, scores, reason)


def all_failed(fleet: Any, requirements: Any) -> dict[str, list[str]]:
    """Every predicate each ineligible agent of `fleet` fails, not only the first (derivation order);
    see `Fleet.all_failed`."""
    return fleet.all_failed(requirements)
