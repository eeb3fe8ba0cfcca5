"""Comparing two decisions of each recorded placement — the recorded one or the baseline fleet's,
and the fleet under test's — and naming the cause of every change."""
from __future__ import annotations

from typing import Any, Mapping

from .deciding import Decision, Side
from .explaining import (deciding_component, first_failed_on, funnel_of, last_removed, number,
                         recorded_lists, scores_of, weights_of)
from .reading import Reader, Recorded
from .verdict import (AFFINITY, MOVED, NOT_IN_FLEET, SAME, SCHEDULABLE, STILL_REJECTED,
                      UNSCHEDULABLE, Verdict, unchanged)

__all__ = ["Comparer", "UNRECORDED_OUTCOMES", "UNRECORDED_SESSIONS"]

#: What a recorded-decision replay says a change comes from when the trace does not record it.
UNRECORDED_OUTCOMES = "outcomes the fleet holds"
UNRECORDED_SESSIONS = "sessions the fleet held before the trace"
_UNRECORDED = {"success_rate": UNRECORDED_OUTCOMES, AFFINITY: UNRECORDED_SESSIONS}


class Comparer:
    """Decides each placement on the fleet under test (`after`) and, in baseline mode, on the
    baseline fleet (`before`; None compares with the recorded decision), and makes its Verdict.

    A change to a placement with a session is remembered per session, by the agent it placed the
    task on (on the fleet under test) and the agent it took the task from: a later move of the same
    session is a knock-on of the latest such change that explains its agents' affinity — one that
    placed the session on the new agent, whose affinity grew, or took it from the earlier agent,
    whose affinity fell — when that growth decided it (`_decisive`; docs/replay.md, "What a change
    is attributed to"). Only a change is explained in full."""

    def __init__(self, reader: Reader, after: Side, before: Side | None, route_name: str | None):
        self.reader = reader
        self.after = after
        self.before = before
        self.route_name = route_name
        #: per session: agent -> the seq of the latest change that placed the session's task on it
        #: (on the fleet under test), and agent -> the latest that took it from it
        self.moved_to: dict[str, dict[str, int]] = {}
        self.moved_from: dict[str, dict[str, int]] = {}

    def verdict(self, recorded: Recorded) -> Verdict:
        route_name = self.route_name if self.route_name is not None else recorded.route
        if recorded.resumed:
            return self._resumed(recorded, route_name)
        after, before = self.after, self.before
        b = after.decide(recorded)
        offered_new = after.new_winner(recorded)
        if before is None:
            a = None
            agent_before = recorded.agent
        else:
            a = before.decide(recorded)
            agent_before = a.agent
        if b.agent == agent_before:
            after.settle(recorded, b)
            if a is not None:
                before.settle(recorded, a)  # type: ignore[union-attr]
            doc = (b.placement.requirements.doc if b.placement is not None
                   else recorded.requirements.doc if after.route is None
                   else after.route.apply(recorded.requirements).doc)
            return unchanged(recorded.seq, SAME if b.agent is not None else STILL_REJECTED, b.agent, doc,
                             recorded.session, route_name, offered_new=offered_new)
        return self._changed(recorded, a, b, route_name, offered_new)

    # -- a change, explained -----------------------------------------------------------------------
    def _changed(self, recorded: Recorded, a: Decision | None, b: Decision, route_name: str | None,
                 offered_new: str | None) -> Verdict:
        after_p = self.after.place(recorded, b)
        before_agent = recorded.agent if a is None else a.agent
        named = [n for n in (before_agent, after_p.agent) if n is not None]
        if a is None:
            funnel_before, then_scores = recorded_lists(recorded, self.reader, named)
        else:
            before_p = self.before.place(recorded, a)  # type: ignore[union-attr]
            funnel_before, then_scores = funnel_of(before_p), scores_of(before_p, named)
        funnel_after = funnel_of(after_p)
        now_scores = scores_of(after_p, named)
        after_agent = after_p.agent
        weights = weights_of(self.after.fleet, after_p)
        decided_by = before_fails = None
        if before_agent is not None and before_agent not in now_scores:
            before_fails = first_failed_on(self.after.fleet, before_agent, after_p.predicates) or NOT_IN_FLEET
        if after_agent is None:
            kind = UNSCHEDULABLE
            decided_by = last_removed(funnel_after)
        elif before_agent is None:
            kind = SCHEDULABLE
            decided_by = last_removed(funnel_before) if funnel_before is not None else None
        else:
            kind = MOVED
            if before_fails is None:
                decided_by = deciding_component(now_scores[after_agent], now_scores[before_agent], weights)
        session = after_p.session
        caused_by = None
        moved_by = kind == MOVED and before_fails is None     # both agents eligible after: scores decided
        if session is not None:
            if moved_by and _decisive(AFFINITY, then_scores, now_scores, after_agent, before_agent, weights):
                caused_by = self._knocked_on_by(session, then_scores, now_scores, after_agent, before_agent)
                if caused_by is not None and (_lead(AFFINITY, now_scores, after_agent, before_agent) or 0) > 0:
                    decided_by = AFFINITY
            if after_agent is not None:
                self.moved_to.setdefault(session, {})[after_agent] = recorded.seq
            if before_agent is not None:
                self.moved_from.setdefault(session, {})[before_agent] = recorded.seq
        unrecorded = None
        if a is None and moved_by and caused_by is None:
            # what the trace does not record, when its growth decided the move: of the components
            # that depend on it, the one whose lead grew the most
            grown = [(_grew(c, then_scores, now_scores, after_agent, before_agent, weights), c) for c in _UNRECORDED
                     if _decisive(c, then_scores, now_scores, after_agent, before_agent, weights)]
            if grown:
                unrecorded = _UNRECORDED[max(grown)[1]]
        task, namespace = self._named(recorded, before_agent, after_agent)
        return Verdict(recorded.seq, kind, before_agent, after_agent, after_p.requirements.doc, session,
                       route_name, decided_by=decided_by, before_fails=before_fails, scores_before=then_scores,
                       scores_after=now_scores, funnel_before=funnel_before, funnel_after=funnel_after,
                       task=task, namespace=namespace, caused_by=caused_by, unrecorded=unrecorded,
                       offered_new=offered_new)

    def _knocked_on_by(self, session: str, then_scores: Mapping[str, Mapping[str, Any]],
                       now_scores: Mapping[str, Mapping[str, Any]], winner: str | None,
                       loser: str | None) -> int | None:
        """The latest earlier change of `session` that explains the affinity the move's agents
        gained or lost: one that placed the session on the new agent (whose affinity grew), or took
        it from the earlier one (whose affinity fell); None when no change of the replay did."""
        found = []
        gained = _change(AFFINITY, then_scores, now_scores, winner)
        lost = _change(AFFINITY, then_scores, now_scores, loser)
        if winner is not None and (gained is None or gained > 0):
            found.append(self.moved_to.get(session, {}).get(winner))
        if loser is not None and lost is not None and lost < 0:
            found.append(self.moved_from.get(session, {}).get(loser))
        seqs = [seq for seq in found if seq is not None]
        return max(seqs) if seqs else None

    def _named(self, recorded: Recorded, before: str | None, after: str | None) -> tuple[str | None, str | None]:
        task, namespace = recorded.identity()
        if namespace is None:
            for side, agent in ((self.before, before), (self.after, before), (self.after, after)):
                if agent is not None and side is not None:
                    namespace = side.fleet.namespace_of(agent) if hasattr(side.fleet, "namespace_of") else None
                    if namespace is not None:
                        break
        return task, namespace

    # -- a resumption --------------------------------------------------------------------------------
    def _resumed(self, recorded: Recorded, route_name: str | None) -> Verdict:
        """A resumption (§6: no candidates weighed) follows its task: on each side it resumes on the
        agent that side placed the task on, if that agent still satisfies every matched predicate."""
        b, matched = self.after.resume(recorded)
        if self.before is None:
            before_agent = recorded.agent
            follows = self.after.follows_change(recorded)
        else:
            a, _ = self.before.resume(recorded)
            before_agent = a.agent
            follows = self.after.follows_change(recorded) or self.before.follows_change(recorded)
        self.after.note(recorded, b.agent)
        if self.before is not None:
            self.before.note(recorded, before_agent)
        doc, session = matched.doc, recorded.session
        if b.agent == before_agent:
            return unchanged(recorded.seq, SAME if b.agent is not None else STILL_REJECTED, b.agent, doc,
                             session, route_name, resumed=True)
        if b.agent is None:
            kind = UNSCHEDULABLE
        elif before_agent is None:
            kind = SCHEDULABLE
        else:
            kind = MOVED
        unmet = b.fails
        task, namespace = self._named(recorded, before_agent, b.agent)
        return Verdict(recorded.seq, kind, before_agent, b.agent, doc, session, route_name, resumed=True,
                       decided_by=None if unmet in (None, NOT_IN_FLEET) else unmet, before_fails=unmet,
                       task=task, namespace=namespace,
                       caused_by=recorded.resumes if follows else None)


def _lead(component: str, scores: Mapping[str, Mapping[str, Any]], winner: str | None,
          loser: str | None) -> float | None:
    """How far `winner` leads `loser` on `component` in `scores` (None when either has no number
    for it: not eligible on that side, or a scorer without that component)."""
    if winner is None or loser is None:
        return None
    ours, theirs = scores.get(winner), scores.get(loser)
    if ours is None or theirs is None:
        return None
    mine, other = ours.get(component), theirs.get(component)
    if not number(mine) or not number(other):
        return None
    return mine - other


def _change(component: str, then_scores: Mapping[str, Mapping[str, Any]],
            now_scores: Mapping[str, Mapping[str, Any]], agent: str | None) -> float | None:
    """How much `agent`'s `component` changed from the earlier decision to the later (None when
    either decision holds no number for it)."""
    if agent is None:
        return None
    then, now = then_scores.get(agent), now_scores.get(agent)
    if then is None or now is None:
        return None
    before, after = then.get(component), now.get(component)
    return after - before if number(before) and number(after) else None


def _grew(component: str, then_scores: Mapping[str, Mapping[str, Any]],
          now_scores: Mapping[str, Mapping[str, Any]], winner: str | None, loser: str | None,
          weights: Mapping[str, float] | None) -> float:
    """How much the winner's weighted lead on `component` grew (its lead now, when the earlier
    decision holds none)."""
    now = _lead(component, now_scores, winner, loser) or 0.0
    then = _lead(component, then_scores, winner, loser)
    weight = weights.get(component, 1.0) if weights is not None else 1.0
    return (now - (then if then is not None else 0.0)) * weight


def _decisive(component: str, then_scores: Mapping[str, Mapping[str, Any]],
              now_scores: Mapping[str, Mapping[str, Any]], winner: str | None, loser: str | None,
              weights: Mapping[str, float] | None) -> bool:
    """Whether a move to `winner` from `loser` comes from a change in `component`: the winner's lead
    on it grew between the two decisions, and with its lead as it was the winner would not win (by
    the totals now, less the growth weighted as the fleet under test weighs it; equal totals go to
    the smaller name). A lead that did not change cannot explain a move, whatever else did (the
    weights under test, another component). Without the earlier decision's entries (a record that
    does not carry them) a lead the winner holds now is taken as the cause, the only evidence there
    is."""
    now = _lead(component, now_scores, winner, loser)
    if now is None:
        return False
    if _lead(component, then_scores, winner, loser) is None:
        return now > 0
    grew = _grew(component, then_scores, now_scores, winner, loser, weights)
    if grew <= 0:
        return False
    assert winner is not None and loser is not None     # both have leads
    total, other = now_scores[winner].get("total"), now_scores[loser].get("total")
    if not number(total) or not number(other):
        return True
    margin = total - other - grew
    # the totals and the growth are sums of rounded products: a margin within rounding of 0 is a
    # tie, which goes to the smaller name
    if abs(margin) <= 1e-9 * max(1.0, abs(total), abs(other)):
        return winner > loser
    return margin < 0

