"""Replay: place every task of a recorded trace again — on a proposed fleet or policy, and on the
current (baseline) fleet — and say for each placement whether the decision would change, and why.

    for verdict in a3fast.replay("trace.jsonl", proposed, baseline=current):
        if verdict.changed:
            print(verdict.name, verdict.kind, verdict.before, "->", verdict.after, verdict.why())

The modules, one idea each: `verdict` (what a placement becomes), `reading` (what a replay takes
from the trace), `deciding` (placing a task again on one fleet), `explaining` (why a decision
changed), `comparing` (the two decisions of each placement and the cause of each change),
`summary` (totals, the fleet change, thresholds) and `run` (a whole replay). docs/replay.md states
what is taken from the trace and what from each fleet.
"""
from __future__ import annotations

from .comparing import UNRECORDED_OUTCOMES, UNRECORDED_SESSIONS
from .deciding import copy_fleet, parse_weights
from .run import replay, run_replay, run_replays
from .summary import (THRESHOLD_SUBJECTS, FleetChange, ReplaySummary, Threshold, fleet_change, fleet_digest,
                      parse_thresholds, summarise)
from .verdict import (AFFINITY, CHANGED_KINDS, KINDS, MOVED, NOT_IN_FLEET, SAME, SCHEDULABLE, STILL_REJECTED,
                      TIE_BREAK, UNSCHEDULABLE, Funnel, ReplayError, Verdict)

__all__ = ["replay", "Verdict", "Funnel", "ReplayError", "ReplaySummary", "KINDS", "CHANGED_KINDS",
           "SAME", "MOVED", "UNSCHEDULABLE", "SCHEDULABLE", "STILL_REJECTED", "NOT_IN_FLEET", "TIE_BREAK",
           "AFFINITY", "summarise", "copy_fleet", "parse_weights", "Threshold", "parse_thresholds",
           "run_replay", "run_replays", "THRESHOLD_SUBJECTS", "FleetChange", "fleet_change", "fleet_digest",
           "UNRECORDED_OUTCOMES", "UNRECORDED_SESSIONS"]
