"""What a whole replay amounts to: totals per kind and per namespace, what lies behind the changes,
the fleet change under test and its digest, and the thresholds a CI gate holds it to."""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import orjson

from .verdict import CHANGED_KINDS, KINDS, MOVED, NOT_IN_FLEET, TIE_BREAK, Verdict

__all__ = ["ReplaySummary", "summarise", "FleetChange", "fleet_change", "fleet_digest", "Threshold",
           "parse_thresholds", "THRESHOLD_SUBJECTS"]


def _declarations(fleet: Any) -> dict[tuple[str, str], Any]:
    out = {}
    for name in fleet.names():
        decl = fleet.get(name)
        if decl is not None:
            out[(decl.agent.namespace, name)] = decl.doc
    return out


def fleet_digest(fleet: Any) -> str:
    """`sha256:` of the fleet's declarations, one canonical JSON document (keys sorted) a line in
    (namespace, name) order, followed by its weights: the same agents declaring the same things
    under the same weights give the same digest, whatever their order or the fleet's history."""
    h = hashlib.sha256()
    decls = _declarations(fleet)
    for key in sorted(decls):
        h.update(orjson.dumps(decls[key], option=orjson.OPT_SORT_KEYS) + b"\n")
    h.update(orjson.dumps([float(w) for w in fleet.weights]))
    return "sha256:" + h.hexdigest()


@dataclass
class FleetChange:
    """The fleet change under test: agents added, removed, and changed (with the members of their
    declarations that differ), and the weights before and after when they differ."""

    digest: str
    baseline_digest: str | None = None
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    weights: tuple[list[float], list[float]] | None = None

    def lines(self) -> list[str]:
        out = []
        if self.added:
            out.append(f"agents added ({len(self.added):,}): " + _few(self.added))
        if self.removed:
            out.append(f"agents removed ({len(self.removed):,}): " + _few(self.removed))
        if self.changed:
            out.append(f"agents changed ({len(self.changed):,}): " + _few(
                [f"{name} ({', '.join(members)})" for name, members in self.changed.items()]))
        if self.weights is not None:
            out.append(f"weights: {self.weights[0]} -> {self.weights[1]}")
        if not out:
            out.append("no agent and no weight differs")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "baseline_digest": self.baseline_digest, "added": self.added,
                "removed": self.removed, "changed": self.changed,
                "weights": None if self.weights is None else {"before": self.weights[0], "after": self.weights[1]}}


def _few(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n:,} more" if len(names) > n else "")


def fleet_change(proposed: Any, baseline: Any = None) -> FleetChange:
    """What differs between the baseline fleet and the proposed one (only the digest without a
    baseline: a recorded-decision replay has no fleet to compare with)."""
    change = FleetChange(fleet_digest(proposed))
    if baseline is None:
        return change
    change.baseline_digest = fleet_digest(baseline)
    old, new = _declarations(baseline), _declarations(proposed)
    change.added = [f"{ns}/{name}" for ns, name in new if (ns, name) not in old]
    change.removed = [f"{ns}/{name}" for ns, name in old if (ns, name) not in new]
    for key, doc in new.items():
        if key in old and old[key] != doc:
            before = old[key]
            members = sorted(k for k in set(doc) | set(before) if doc.get(k) != before.get(k))
            change.changed[f"{key[0]}/{key[1]}"] = members
    if tuple(baseline.weights) != tuple(proposed.weights):
        change.weights = ([float(w) for w in baseline.weights], [float(w) for w in proposed.weights])
    return change


@dataclass
class ReplaySummary:
    """Totals per kind (and per namespace for the changes), and what lies behind most changes:
    predicates, score components, agents, knock-ons and unrecorded history."""

    placements: int = 0
    kinds: Counter = field(default_factory=Counter)
    predicates: Counter = field(default_factory=Counter)
    lost: Counter = field(default_factory=Counter)      # agents that no longer get placements
    gained: Counter = field(default_factory=Counter)    # agents that get them instead
    components: Counter = field(default_factory=Counter)
    namespaces: dict = field(default_factory=dict)      # kind -> Counter of namespaces
    knock_on: int = 0                                   # changes caused by an earlier change
    unrecorded: Counter = field(default_factory=Counter)
    offered_new: int = 0                                # placements a new agent would have won
    fleet: FleetChange | None = None

    def add(self, verdict: Verdict) -> None:
        self.placements += 1
        self.kinds[verdict.kind] += 1
        if verdict.offered_new is not None:
            self.offered_new += 1
        if not verdict.changed:
            return
        self.namespaces.setdefault(verdict.kind, Counter())[verdict.namespace or "-"] += 1
        if verdict.caused_by is not None and not verdict.resumed:
            # a knock-on follows an earlier change of its session; a resumption that follows its
            # own task to where that task now runs is that task's change, not another's
            self.knock_on += 1
        if verdict.unrecorded is not None:
            self.unrecorded[verdict.unrecorded] += 1
        predicate = verdict.before_fails if verdict.before_fails not in (None, NOT_IN_FLEET) \
            else verdict.decided_by if verdict.kind != MOVED and not verdict.resumed else None
        if predicate is not None and predicate != TIE_BREAK:
            self.predicates[predicate] += 1
        if verdict.kind == MOVED and verdict.before_fails is None and verdict.decided_by:
            self.components[verdict.decided_by] += 1
        if verdict.before is not None:
            self.lost[verdict.before] += 1
        if verdict.after is not None:
            self.gained[verdict.after] += 1

    def merge(self, other: "ReplaySummary") -> None:
        """Add another replay's totals to these (the traces of several replicas replayed on the same
        fleets: every count adds up; the fleet change is the same, kept from the first)."""
        self.placements += other.placements
        self.kinds.update(other.kinds)
        self.predicates.update(other.predicates)
        self.lost.update(other.lost)
        self.gained.update(other.gained)
        self.components.update(other.components)
        for kind, counts in other.namespaces.items():
            self.namespaces.setdefault(kind, Counter()).update(counts)
        self.knock_on += other.knock_on
        self.unrecorded.update(other.unrecorded)
        self.offered_new += other.offered_new
        if self.fleet is None:
            self.fleet = other.fleet

    @property
    def changed(self) -> int:
        return sum(self.kinds[k] for k in CHANGED_KINDS)

    def share(self, kind: str) -> float:
        count = self.changed if kind == "changed" else self.kinds[kind]
        return count / self.placements if self.placements else 0.0

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.fleet is not None:
            out["fleet"] = self.fleet.to_dict()
        out.update({"placements": self.placements, "changed": self.changed,
                    "kinds": {k: self.kinds[k] for k in KINDS},
                    "namespaces": {k: dict(self.namespaces[k].most_common()) for k in CHANGED_KINDS
                                   if k in self.namespaces},
                    "knock_on": self.knock_on,
                    "unrecorded": dict(self.unrecorded),
                    "offered_new": self.offered_new,
                    "predicates": [{"predicate": p, "placements": n} for p, n in self.predicates.most_common(top)],
                    "components": [{"component": c, "placements": n} for c, n in self.components.most_common(top)],
                    "agents_lost": [{"agent": a, "placements": n} for a, n in self.lost.most_common(top)],
                    "agents_gained": [{"agent": a, "placements": n} for a, n in self.gained.most_common(top)]})
        return out


def summarise(verdicts: Iterable[Verdict]) -> ReplaySummary:
    """The totals of verdicts (of one trace or of several: a seq need not be unique)."""
    summary = ReplaySummary()
    for verdict in verdicts:
        summary.add(verdict)
    return summary


# -- thresholds for CI ---------------------------------------------------------------------------------
#: What a threshold may count: a kind of verdict, or "changed" (moved + unschedulable + schedulable).
THRESHOLD_SUBJECTS = (*KINDS, "changed")


@dataclass(frozen=True)
class Threshold:
    """`moved>1%`: fails when the count (or share of placements, with `percent`) of `subject` is
    above `limit` (`>`), or at or above it (`>=`)."""

    subject: str
    operator: str
    limit: float
    percent: bool

    def __str__(self) -> str:
        limit = f"{self.limit:g}{'%' if self.percent else ''}"
        return f"{self.subject}{self.operator}{limit}"

    def measured(self, summary: ReplaySummary) -> float:
        count = summary.changed if self.subject == "changed" else summary.kinds[self.subject]
        return 100.0 * count / summary.placements if self.percent and summary.placements else \
            (0.0 if self.percent else float(count))

    def exceeded(self, summary: ReplaySummary) -> bool:
        value = self.measured(summary)
        return value > self.limit if self.operator == ">" else value >= self.limit


def parse_thresholds(text: str) -> list[Threshold]:
    """`moved>1%,unschedulable>0` -> thresholds; ValueError names the rule that is wrong and why
    (in words that name no option: the command line and the HTTP route each say where it came from)."""
    rule = re.compile(r"\s*([a-z_]+)\s*(>=|>)\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*")
    out = []
    for part in text.split(","):
        match = rule.fullmatch(part)
        if match is None:
            raise ValueError(f"{part.strip()!r}: expected KIND>N or KIND>N% (e.g. moved>1%), "
                             f"KIND one of {', '.join(THRESHOLD_SUBJECTS)}")
        subject, operator, limit, percent = match.groups()
        if subject not in THRESHOLD_SUBJECTS:
            raise ValueError(f"{part.strip()!r}: unknown kind {subject!r} "
                             f"(one of {', '.join(THRESHOLD_SUBJECTS)})")
        out.append(Threshold(subject, operator, float(limit), bool(percent)))
    return out
