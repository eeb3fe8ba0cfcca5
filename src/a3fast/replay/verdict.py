"""What replaying one placement gives: a Verdict, its kinds, and the funnel it carries."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import A3Error
from ..explain import PredicateCount

__all__ = ["SAME", "MOVED", "UNSCHEDULABLE", "SCHEDULABLE", "STILL_REJECTED", "KINDS", "CHANGED_KINDS",
           "NOT_IN_FLEET", "TIE_BREAK", "AFFINITY", "ReplayError", "RouteReplayError", "Funnel", "Verdict",
           "unchanged"]

#: The decision is the same on both sides.
SAME = "same"
#: Another agent would be chosen.
MOVED = "moved"
#: Bound before; no agent would be eligible now.
UNSCHEDULABLE = "unschedulable"
#: Rejected before; an agent would be chosen now.
SCHEDULABLE = "schedulable"
#: Rejected before, and rejected again.
STILL_REJECTED = "still_rejected"
KINDS = (SAME, MOVED, UNSCHEDULABLE, SCHEDULABLE, STILL_REJECTED)
CHANGED_KINDS = (MOVED, UNSCHEDULABLE, SCHEDULABLE)
#: What the earlier agent's first failed predicate is said to be when it has left the fleet.
NOT_IN_FLEET = "not in the fleet"
#: Decided by a tie of totals, broken by the smallest agent name (a3fast.fleet.scoring.choose).
TIE_BREAK = "tie (smallest name)"
#: The score component a session's holder gains: what a knock-on change is decided by.
AFFINITY = "affinity"


class ReplayError(A3Error):
    """A trace (or a record in it) that cannot be replayed; the message names the line or seq and
    the JSON path, and what was expected and found. `trace`: the label of the trace it is about,
    when several are replayed as one (`run_replays`)."""

    trace: str | None = None


class RouteReplayError(ReplayError):
    """The route under test cannot be applied to a recorded task (it would change what the task
    asks rather than add to it): the route's fault, not the trace's."""


@dataclass(frozen=True)
class Funnel:
    """One placement's filter funnel: candidates, and per predicate how many reached and were removed."""

    candidates: int
    eligible: int
    predicates: tuple[PredicateCount, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "eligible": self.eligible,
                "predicates": [{"predicate": c.predicate, "reached": c.reached, "removed": c.removed}
                               for c in self.predicates]}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What replaying one recorded placement gives.

    `kind` is one of KINDS. `before`/`after` are the agent chosen before (as recorded, or on the
    baseline fleet) and after (on the fleet under test); None when rejected. `task` names the task
    (its `task.submitted` id, or a pod's `namespace/name`) and `namespace` is the namespace changes
    are counted under (the pod's, else the earlier agent's, else the later one's).

    For a changed placement the explanation is filled in: `decided_by` — for MOVED with both agents
    eligible after, the score component that decided (the largest weighted gain of the new agent
    over the earlier one; AFFINITY for a knock-on change that the new agent leads on it), or TIE_BREAK; for UNSCHEDULABLE, the
    predicate that now removes the last candidates; for SCHEDULABLE, the predicate that removed the
    last ones before. `before_fails` is the earlier agent's first failed predicate on the fleet under
    test (NOT_IN_FLEET if it left), when it is no longer eligible. `caused_by` is the seq of the
    earlier change this one follows from: the change that moved the task's session (a knock-on), or
    the placement a resumption resumes. `unrecorded` says what the change comes from that the trace
    does not record (recorded-decision mode only), `offered_new` names an agent outside the
    placement's offered candidates that would have won had it been offered. `scores_*` hold the two
    agents' score entries before and after, `funnel_*` the two funnels (None before for a resumption).
    `trace` names the trace file the placement was recorded in, when several are replayed together
    (each is its own sequence: a seq is only unique within its file).
    """

    seq: int
    kind: str
    before: str | None
    after: str | None
    requirements: Mapping[str, Any]
    session: str | None = None
    route: str | None = None
    resumed: bool = False
    decided_by: str | None = None
    before_fails: str | None = None
    scores_before: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scores_after: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    funnel_before: Funnel | None = None
    funnel_after: Funnel | None = None
    task: str | None = None
    namespace: str | None = None
    caused_by: int | None = None
    unrecorded: str | None = None
    offered_new: str | None = None
    trace: str | None = None

    @property
    def changed(self) -> bool:
        return self.kind in CHANGED_KINDS

    def why(self) -> str:
        """One line saying why the decision changed ('' for an unchanged one)."""
        head = self._why()
        if not head:
            return head
        if self.caused_by is not None:
            head += (f" (resuming the placement of seq {self.caused_by})" if self.resumed
                     else f" (follows from the change at seq {self.caused_by}, which moved session {self.session})")
        if self.unrecorded is not None:
            head += f" (unrecorded: {self.unrecorded})"
        return head

    def _why(self) -> str:
        if self.kind == MOVED:
            if self.before_fails is not None:
                gone = ("has left the fleet" if self.before_fails == NOT_IN_FLEET
                        else f"now fails {self.before_fails}")
                return f"{self.before} {gone}; {self.after} chosen instead"
            if self.resumed:
                return f"resumes on {self.after}, where its task is now placed"
            return f"{self.after} outscores {self.before} on {self.decided_by}"
        if self.kind == UNSCHEDULABLE:
            if self.resumed and self.caused_by is not None and self.before_fails is None:
                return "its task is no longer placed, so it cannot resume"
            head = (f"{self.decided_by} now removes the last candidates" if self.decided_by
                    else "no candidates remain")
            if self.before_fails is not None:
                gone = ("has left the fleet" if self.before_fails == NOT_IN_FLEET
                        else f"now fails {self.before_fails}")
                head += f"; {self.before} {gone}"
            return head
        if self.kind == SCHEDULABLE:
            head = f"{self.after} is eligible now"
            return head + (f" (before, {self.decided_by} removed the last candidates)"
                           if self.decided_by else "")
        return ""

    @property
    def name(self) -> str:
        """How the change is named: the task's identity with its seq (and its trace file, when several
        are replayed), or the seq alone."""
        where = f"{self.trace} seq {self.seq}" if self.trace is not None else f"seq {self.seq}"
        return f"{self.task} ({where})" if self.task else where

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "kind": self.kind, "before": self.before, "after": self.after}
        if self.trace is not None:
            out["trace"] = self.trace
        if self.task is not None:
            out["task"] = self.task
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.resumed:
            out["resumed"] = True
        if self.route is not None:
            out["route"] = self.route
        if self.session is not None:
            out["session"] = self.session
        if self.offered_new is not None:
            out["offered_new"] = self.offered_new
        if self.changed:
            out["why"] = self.why()
            out["decided_by"] = self.decided_by
            out["before_fails"] = self.before_fails
            out["caused_by"] = self.caused_by
            out["unrecorded"] = self.unrecorded
            out["scores_before"] = dict(self.scores_before)
            out["scores_after"] = dict(self.scores_after)
            out["funnel_before"] = self.funnel_before.to_dict() if self.funnel_before else None
            out["funnel_after"] = self.funnel_after.to_dict() if self.funnel_after else None
            out["requirements"] = dict(self.requirements)
        return out


_new_verdict = object.__new__
_SETTERS = {name: getattr(Verdict, name).__set__ for name in Verdict.__slots__}
_DEFAULTS = [(_SETTERS[name], None) for name in
             ("decided_by", "before_fails", "funnel_before", "funnel_after", "caused_by", "unrecorded",
              "trace")]
_PUT = [_SETTERS[name] for name in ("seq", "kind", "before", "after", "requirements", "session", "route",
                                     "scores_before", "scores_after", "resumed", "task", "namespace",
                                     "offered_new")]


def unchanged(seq: int, kind: str, agent: str | None, requirements: Mapping[str, Any],
              session: str | None, route: str | None, resumed: bool = False,
              offered_new: str | None = None) -> Verdict:
    """The Verdict of an unchanged placement (SAME or STILL_REJECTED), filled in through its slots:
    a frozen dataclass's own __init__ sets each field through object.__setattr__, a measurable share
    of a replay where nearly every placement is unchanged. An unchanged placement is not named (its
    task is read only for changes)."""
    v = _new_verdict(Verdict)
    put = _PUT
    put[0](v, seq)
    put[1](v, kind)
    put[2](v, agent)
    put[3](v, agent)
    put[4](v, requirements)
    put[5](v, session)
    put[6](v, route)
    put[7](v, {})
    put[8](v, {})
    put[9](v, resumed)
    put[10](v, None)
    put[11](v, None)
    put[12](v, offered_new)
    for setter, value in _DEFAULTS:
        setter(v, value)
    return v
