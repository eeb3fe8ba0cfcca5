"""A replay end to end: `replay` yields a verdict per placement as the trace is read; `run_replay`
runs a whole one as the command, the service and the benchmark do; `run_replays` runs several traces
(one per replica of a service) as one replay whose counts add up."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator, Sequence

import orjson

from ..errors import describe
from ..fleet.bulk_load import collector_paused
from ..fleet.placement import Route
from .comparing import Comparer
from .deciding import Side, copy_fleet, parse_weights
from .reading import Reader, trace_items
from .summary import ReplaySummary, fleet_change
from .verdict import CHANGED_KINDS, ReplayError, Verdict

__all__ = ["replay", "run_replay", "run_replays", "is_trace_list"]


def replay(records: Any, fleet: Any, *, baseline: Any = None, weights: Any = None,
           route: Route | None = None, copy: bool = True, scorer: Any = None,
           offer_new: bool = False) -> Iterator[Verdict]:
    """Replay every recorded placement of `records` in trace order, and yield a Verdict for each
    (changed or not), as the trace is read.

    `records`: a path, the trace's bytes (JSON Lines or a JSON array), a binary file, an iterable of
    record dicts, or an iterable of bytes chunks of JSON Lines; spec or compact form, or both.
    `fleet`: the fleet under test. With `baseline` (the current fleet) each task is placed on both
    and only the decisions that differ between them are changes; without it, each decision on
    `fleet` is compared with the recorded one. With `copy` (the default) the replay places on copies,
    so the fleets given are left as they were. `weights` replaces the default scorer's weights of
    `fleet` (four numbers, a mapping of components or "name=value,..."), `scorer` its custom scorer,
    and `route` is applied on it to every task on top of what it was recorded with (a route only
    adds requirements); all three are the policy under test, so the baseline keeps its own. Each
    placement is offered the recorded candidates found in each fleet; `offer_new` offers it the
    agents new to it as well (otherwise they are counted in `Verdict.offered_new`).

    `records` may also be a list of trace paths (the traces of the replicas of one service): each is
    replayed as its own trace, in the order given, on its own copy of the fleets (a replica keeps its
    own sessions), and each verdict carries its file's path in `Verdict.trace`.

    Raises ReplayError (naming the line or seq and the JSON path) for a trace that cannot be read or
    a placement whose requirements are not §4 requirements, and when `route` would change a
    requirement a task stated; ValueError for bad weights.
    """
    if is_trace_list(records):
        _check_arguments(fleet, baseline, route, scorer)     # here: the traces are read lazily
        return _each_trace(list(records), fleet, baseline, weights, route, copy, scorer, offer_new)
    comparer, items, _ = _prepare(records, fleet, baseline, weights, route, copy, scorer, offer_new)
    return _verdicts(comparer, items)


def is_trace_list(records: Any) -> bool:
    """Whether `records` is a list (or tuple) of trace paths rather than one trace's records."""
    return isinstance(records, (list, tuple)) and bool(records) and \
        all(isinstance(r, (str, os.PathLike)) for r in records)


def _each_trace(paths: list[Any], fleet: Any, baseline: Any, weights: Any, route: Route | None, copy: bool,
                scorer: Any, offer_new: bool) -> Iterator[Verdict]:
    for i, path in enumerate(paths):
        label = os.fspath(path)
        # every trace but the last is placed on copies: one trace's sessions are not another's
        mine = copy or i < len(paths) - 1
        comparer, items, _ = _prepare(path, fleet, baseline, weights, route, mine, scorer, offer_new)
        for verdict in _verdicts(comparer, items):
            yield dataclasses.replace(verdict, trace=label)


def _check_arguments(fleet: Any, baseline: Any, route: Any, scorer: Any) -> None:
    """TypeError naming the argument that is not what a replay takes, before anything is read."""
    for name, value in (("fleet", fleet), ("baseline", baseline)):
        if (value is not None or name == "fleet") and \
                not all(hasattr(value, a) for a in ("place", "names", "weights", "scorer")):
            raise TypeError(f"{name}: expected an a3fast.Fleet, found "
                            f"{describe(value) if value is None or isinstance(value, (str, dict, list)) else type(value).__name__}")
    if route is not None and not isinstance(route, Route):
        raise TypeError(f"route: expected a Route, found {describe(route)}")
    if scorer is not None and not callable(scorer):
        raise TypeError(f"scorer: expected a callable (a Scorer), found {describe(scorer)}")


def _prepare(records: Any, fleet: Any, baseline: Any, weights: Any, route: Route | None, copy: bool,
             scorer: Any, offer_new: bool) -> tuple[Comparer, Iterator[Any], Any]:
    _check_arguments(fleet, baseline, route, scorer)
    new_weights = parse_weights(weights, tuple(fleet.weights))
    target = copy_fleet(fleet) if copy else fleet
    if new_weights is not None:
        target.weights = new_weights
    if scorer is not None:
        target.scorer = scorer
    before = None
    if baseline is not None:
        # the baseline is copied when placing on the fleets given would make one fleet both sides
        current = copy_fleet(baseline) if copy or baseline is fleet else baseline
        new = frozenset(target.names()) - frozenset(current.names())
        before = Side(current, None)
        after = Side(target, route, offer_new=offer_new, new=new)
    else:
        after = Side(target, route, offer_new=offer_new)
    reader = Reader()
    comparer = Comparer(reader, after, before, route.name if route is not None else None)
    return comparer, trace_items(records), (target, before.fleet if before is not None else None)


#: Placements read ahead before they are decided. Reading a run of placements and then deciding it
#: keeps each part's working set warm; one at a time, reading and deciding evict each other's (a
#: tenth to a fifth of a replay's time at 1,000 agents, docs/performance.md). What is read ahead is
#: held, records and all, so the run stays short.
READ_AHEAD = 64


def _verdicts(comparer: Comparer, items: Iterator[Any]) -> Iterator[Verdict]:
    """The verdicts in trace order. A run of placements is read, then decided; a failure while
    reading is raised after the verdicts of the placements read before it, where reading one at a
    time would have raised it (and not at all when the caller stops before it)."""
    verdict = comparer.verdict
    placements = comparer.reader.placements(items)
    more = True
    while more:
        block: list[Any] = []
        failure: Exception | None = None
        try:
            for recorded in placements:
                block.append(recorded)
                if len(block) == READ_AHEAD:
                    break
            else:
                more = False
        except Exception as exc:   # the trace is read no further
            failure, more = exc, False
        for recorded in block:
            yield verdict(recorded)
        if failure is not None:
            raise failure


def run_replay(records: Any, fleet: Any, *, changes: Any = None, keep: int = 1_000,
               until: int | None = None, check: Any = None, baseline: Any = None, weights: Any = None,
               route: Route | None = None, copy: bool = True, scorer: Any = None,
               offer_new: bool = False, trace: str | None = None) -> tuple[ReplaySummary, list[Verdict]]:
    """Replay a whole trace (see `replay`, whose options the rest are): the summary — led by the
    fleet change under test and the fleet's digest — and `keep` changed verdicts, moves first (the
    first moves in trace order, then the first that became unschedulable, then schedulable).
    `changes`, a binary file, receives every changed verdict as a line of JSON; `until` stops after
    that seq; `check(summary)` is called every 256 placements and may raise to stop the replay; `trace`
    labels every changed verdict (`Verdict.trace`), kept or written. The cyclic garbage collector is
    paused meanwhile."""
    summary = ReplaySummary()
    kept: dict[str, list[Verdict]] = {kind: [] for kind in CHANGED_KINDS}
    comparer, items, (target, current) = _prepare(records, fleet, baseline, weights, route, copy, scorer,
                                                  offer_new)
    summary.fleet = fleet_change(target, current)
    # every placement makes short-lived, acyclic objects (its record, requirements, placement,
    # verdict); the collections they would trigger rescan the fleet's long-lived objects each time,
    # a quarter of a replay's time at 1,000 agents
    with collector_paused():
        for verdict in _verdicts(comparer, items):
            if until is not None and verdict.seq > until:
                break
            summary.add(verdict)
            if verdict.changed:
                if trace is not None:
                    verdict = dataclasses.replace(verdict, trace=trace)
                if changes is not None:
                    changes.write(_json_line(verdict.to_dict()))
                bucket = kept[verdict.kind]
                if len(bucket) < keep:
                    bucket.append(verdict)
            if check is not None and summary.placements % 256 == 0:
                check(summary)
    return summary, [v for kind in CHANGED_KINDS for v in kept[kind]][:keep]


def run_replays(traces: Sequence[Any], fleet: Any, *, labels: Sequence[str] | None = None,
                changes: Any = None, keep: int = 1_000, check: Any = None, baseline: Any = None,
                weights: Any = None, route: Route | None = None, copy: bool = True, scorer: Any = None,
                offer_new: bool = False) -> tuple[ReplaySummary, list[tuple[str, ReplaySummary]], list[Verdict]]:
    """Replay several traces as one replay: the traces each replica of a service writes. Each is its
    own sequence (its seq starts at 1, its compact records refer to its own snapshots), so each is
    replayed as `run_replay` replays one trace, in the order given, on its own copy of the fleets
    (with `copy=False` only the last is placed on the fleets given). Returns the combined summary
    (every count the sum of the traces'), each trace's own summary with its label, and `keep`
    changed verdicts, moves first across all traces; every verdict changed and kept carries its
    trace's label (`labels`, else each trace's path) in `Verdict.trace`, and so does each line
    written to `changes`. A ReplayError is raised with `trace` set to the label of the trace it is
    about."""
    names = list(labels) if labels is not None else [os.fspath(t) for t in traces]
    if len(names) != len(traces):
        raise ValueError(f"{len(traces)} traces but {len(names)} labels")
    combined = ReplaySummary()
    each: list[tuple[str, ReplaySummary]] = []
    kept: dict[str, list[Verdict]] = {kind: [] for kind in CHANGED_KINDS}
    for i, (records, label) in enumerate(zip(traces, names)):
        mine = copy or i < len(traces) - 1
        try:
            summary, shown = run_replay(records, fleet, changes=changes, keep=keep, check=check,
                                        baseline=baseline, weights=weights, route=route, copy=mine,
                                        scorer=scorer, offer_new=offer_new, trace=label)
        except ReplayError as exc:
            exc.trace = label
            raise
        each.append((label, summary))
        combined.merge(summary)
        for verdict in shown:
            bucket = kept[verdict.kind]
            if len(bucket) < keep:
                bucket.append(verdict)
    return combined, each, [v for kind in CHANGED_KINDS for v in kept[kind]][:keep]


def _json_line(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:   # what orjson refuses (an integer beyond 64 bits in recorded requirements)
        import json

        return json.dumps(value).encode() + b"\n"
