"""`a3fast replay`: place every task of a trace again on a proposed fleet or policy — and, with
`--baseline`, on the current fleet — and say which decisions would change and why.

Several traces (one per replica of the Kubernetes extender) are each replayed as their own sequence
and reported as one replay: the counts add up, `--fail-on` judges the sum, and every change names
its trace (`Verdict.trace`). `-` (standard input) may be one of them, once.

Exit codes: 0 within the `--fail-on` thresholds (or none given), 1 beyond one of them, 2 bad input
(an empty trace or fleet too, unless `--allow-empty`), 141 when standard output is closed before
everything was written (never 1: a closed pipe is not a threshold's verdict).
`--json` prints one object: `{"trace" (the one trace, or null with several), "traces", "fleet",
"baseline", "summary": {fleet, placements, changed, kinds, namespaces, knock_on, unrecorded,
offered_new, predicates, components, agents_lost, agents_gained}, "thresholds": [{rule, measured,
exceeded}], "files": [{"trace", "summary"}] (each trace's own summary, without the fleet),
"changes": [verdict, ...]}` (the first `--show` changed placements, moves first; `-o` writes every
one as JSON Lines, in trace order, trace after trace).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from ..errors import describe, printable, quoted
from ..files import display_name, input_source, require_kind, shown_text, why_not_a_file
from ..framing import ARRAY, framed
from .common import (EXIT_NEGATIVE, EXIT_OK, BadInput, atomic_outputs, check_not_inputs, check_outputs, closed_output,
                     json_option, output_option, say)

#: Changed placements kept for the page and the terminal (every one is written with -o).
KEPT = 1_000


@click.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--fleet", "fleet_path", required=True, metavar="PROPOSED",
              help="The fleet under test: declarations (JSON Lines or a JSON array) or a snapshot (Fleet.save).")
@click.option("--baseline", "baseline_path", default=None, metavar="CURRENT",
              help="The current fleet: place every task on it too and report only the decisions that differ "
                   "(without it, each decision is compared with the recorded one).")
@click.option("--offer-new", is_flag=True, default=False,
              help="Offer each placement the agents new to it as well (otherwise they are only counted).")
@click.option("--allow-empty", is_flag=True, default=False,
              help="Accept a trace with no placements or a fleet with no agents (exit 2 otherwise).")
@click.option("--weights", default=None, metavar="W",
              help="Scoring weights: four numbers (affinity,success_rate,cost,substantiated) or NAME=VALUE pairs.")
@click.option("--route", "route_path", default=None, metavar="FILE",
              help='A route {"name", "adds"} applied to every task on top of what it was recorded with.')
@output_option("Every changed placement as JSON Lines, one verdict a line (replaced atomically).", aliases=())
@click.option("--report", "report_path", default=None, metavar="FILE",
              help="The replay as one self-contained HTML page (replaced atomically).")
@json_option("One JSON object: summary, thresholds and the changes shown (its fields: docs/replay.md).")
@click.option("--fail-on", "fail_on", default=None, metavar="RULES",
              help="Exit 1 beyond any of these, e.g. 'moved>1%,unschedulable>0' "
                   "(kinds: same, moved, unschedulable, schedulable, still_rejected, changed).")
@click.option("--show", type=click.IntRange(0), default=10, show_default=True, metavar="N",
              help="Changed placements shown in detail (terminal and --json).")
@click.option("--engine", type=click.Choice(["native", "pure"]), default=None,
              help="Matching engine of the new fleet the trace is placed on again (default: a3fast.ENGINE).")
def replay(traces, fleet_path, baseline_path, offer_new, allow_empty, weights, route_path, output, report_path,
           as_json, fail_on, show, engine):
    """Replay each TRACE (spec or compact; several: one per replica, each its own sequence) on the
    fleet PROPOSED (and CURRENT) and show every decision that would change."""
    from ..replay import ReplayError, parse_thresholds, parse_weights, run_replay, run_replays

    thresholds = []
    if fail_on is not None:
        try:
            thresholds = parse_thresholds(fail_on)
        except ValueError as exc:
            raise BadInput(f"--fail-on: {exc}") from None
    if output == "-" and as_json:
        raise BadInput("-o - and --json would both go to standard output; give the changes a file")
    if report_path == "-":
        raise BadInput("--report needs a file: the page is not written to standard output")
    if list(traces).count("-") > 1:
        raise BadInput("-: standard input can be read only once; give the other traces as files")
    seen: dict[Path, str] = {}
    for trace in traces:
        if trace == "-":
            continue
        if not Path(trace).is_file():
            raise BadInput(f"{trace}: cannot read: {why_not_a_file(trace)}")
        if Path(trace).resolve() in seen:
            raise BadInput(f"{trace}: given twice (as {seen[Path(trace).resolve()]}): each trace is replayed once")
        seen[Path(trace).resolve()] = trace
    files = [p for p in (output, report_path) if p is not None and p != "-"]
    check_outputs(files)
    for path in files:
        if Path(path).resolve() in seen:
            raise BadInput(f"{path}: an output must not replace the trace it reads")
    for option, path in (("--fleet", fleet_path), ("--baseline", baseline_path), ("--route", route_path)):
        if path == "-":       # read whole and named by its file (its digest), as a trace is not
            raise BadInput(f"{option}: a file (standard input is read only for a trace)")
    check_not_inputs(files, {"--fleet": fleet_path, "--baseline": baseline_path, "--route": route_path})
    for trace in traces:
        require_kind(trace, "trace")
    route = _route(route_path) if route_path is not None else None
    fleet = _fleet(fleet_path, engine)
    baseline = _fleet(baseline_path, engine) if baseline_path is not None else None
    if not allow_empty:
        for path, which in ((fleet_path, fleet), (baseline_path, baseline)):
            if which is not None and len(which) == 0:
                raise BadInput(f"{path}: the fleet has no agents (--allow-empty accepts that)")
    sources: list[Any] = []
    for trace in traces:
        if trace == "-":
            # streamed: JSON Lines go to the replay line by line (a JSON array is one value, read whole)
            stdin = framed(input_source(trace))
            sources.append(stdin.whole() if stdin.form == ARRAY else stdin.stream())
        else:
            sources.append(trace)
    labels = [_label(t) for t in traces]

    targets = [output] if output is not None else []
    if report_path is not None:
        targets.append(report_path)
    try:
        parse_weights(weights, fleet.weights)   # checked before any output is begun
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    with atomic_outputs(targets) as streams:
        changes = streams[0] if output is not None else None
        options = dict(changes=changes, keep=KEPT, weights=weights, route=route, copy=False, baseline=baseline,
                       offer_new=offer_new)
        try:
            if len(traces) == 1:
                summary, kept = run_replay(sources[0], fleet, **options)
                each = [(labels[0], summary)]
            else:
                summary, each, kept = run_replays(sources, fleet, labels=labels, **options)
        except ReplayError as exc:
            raise BadInput(f"{exc.trace or labels[0]}: {exc}") from None
        if not allow_empty:
            for label, part in each:
                if part.placements == 0:
                    raise BadInput(f"{label}: the trace holds no placement (task.bound or task.rejected) "
                                   f"to replay (--allow-empty accepts that)")
        if report_path is not None:
            from ..report.replay_page import render_replay

            policy = _policy(weights, route)
            html = render_replay(summary, kept, trace=", ".join(_name(t) for t in traces),
                                 fleet=_name(fleet_path), policy=policy, thresholds=thresholds,
                                 baseline=_name(baseline_path) if baseline_path is not None else None,
                                 traces=each)
            streams[-1].write(html.encode("utf-8"))

    exceeded = [t for t in thresholds if t.exceeded(summary)]
    try:
        if as_json:
            click.echo(_dumps({"trace": shown_text(traces[0]) if len(traces) == 1 else None,
                               "traces": [shown_text(t) for t in traces], "fleet": shown_text(fleet_path),
                               "baseline": shown_text(baseline_path) if baseline_path is not None else None,
                               "summary": summary.to_dict(),
                               "thresholds": [_threshold_json(t, summary) for t in thresholds],
                               "files": [_file_json(label, part) for label, part in each],
                               "changes": [v.to_dict() for v in kept[:show]]}).decode())
        else:
            echo = (lambda line: say(line)) if output == "-" else click.echo
            for line in summary_lines(summary, kept[:show], ", ".join(labels), fleet_path, thresholds,
                                      baseline_path, each=each if len(each) > 1 else ()):
                echo(printable(line))    # what a trace names, shown escaped (as `verify` does)
        sys.stdout.flush()
    except BrokenPipeError:
        closed_output()
    sys.exit(EXIT_NEGATIVE if exceeded else EXIT_OK)


def _label(trace: str) -> str:
    """How a trace is named in messages, changes and the summary: a name that is not UTF-8 with its
    bytes escaped (`files.shown_text`), as every JSON document and page of a3fast writes it."""
    return display_name(trace)


def _name(path: str) -> str:
    """A trace's or a fleet's file name as the page shows it (escaped as `_label`)."""
    return "standard input" if path == "-" else shown_text(Path(path).name)


def _file_json(label: str, summary: Any) -> dict[str, Any]:
    """One trace's part of a replay of several: its own totals (the fleet change is the replay's)."""
    part = summary.to_dict()
    part.pop("fleet", None)
    return {"trace": label, "summary": part}


def _threshold_json(threshold: Any, summary: Any) -> dict[str, Any]:
    return {"rule": str(threshold), "measured": threshold.measured(summary),
            "exceeded": threshold.exceeded(summary)}


def _policy(weights: str | None, route: Any) -> str:
    parts = []
    if weights is not None:
        parts.append(f"weights {weights}")
    if route is not None:
        parts.append(f"route {route.name}")
    return ", ".join(parts)


def summary_lines(summary: Any, shown: list[Any], trace: str, fleet: str, thresholds: list[Any],
                  baseline: str | None = None, each: Any = ()) -> list[str]:
    """The terminal summary: the fleet change under test and its digest, totals per kind (with the
    namespaces of the changes), each trace's own totals when several are replayed (`each`: label
    and summary), what lies behind most changes, and the first changes with their before/after
    funnels."""
    from ..replay import KINDS

    n = summary.placements
    change = summary.fleet
    lines = []
    if change is not None:
        lines.append(f"fleet under test: {fleet} {change.digest}")
        if baseline is not None:
            lines.append(f"baseline: {baseline} {change.baseline_digest}")
            lines += ["  " + line for line in change.lines()]
    against = f"on {fleet} against {baseline}" if baseline is not None else f"against {fleet} (recorded decisions)"
    of = f"{len(each)} traces ({trace})" if len(each) > 1 else trace
    lines.append(f"replayed {n:,} placements of {of} {against}: "
                 f"{summary.changed:,} would change ({100 * summary.share('changed'):.2f}%)")
    labels = {"same": "same agent", "moved": "another agent", "unschedulable": "newly unschedulable",
              "schedulable": "newly schedulable", "still_rejected": "rejected as before"}
    for kind in KINDS:
        namespaces = summary.namespaces.get(kind)
        where = ""
        if namespaces:
            where = "  " + ", ".join(f"{ns} {c:,}" for ns, c in namespaces.most_common(4))
            where += f" and {len(namespaces) - 4:,} more namespaces" if len(namespaces) > 4 else ""
        lines.append(f"  {labels[kind]:<20} {summary.kinds[kind]:>9,}{where}")
    for label, part in each:
        lines.append(f"  of which {label}: {part.placements:,} placements, {part.changed:,} would change "
                     f"({100 * part.share('changed'):.2f}%)")
    if summary.knock_on:
        lines.append(f"knock-on changes (following an earlier change of their session): {summary.knock_on:,}")
    for what, count in summary.unrecorded.most_common():
        lines.append(f"changes from {what} (not in the trace): {count:,}")
    if summary.offered_new:
        lines.append(f"would have been offered: a new agent would win {summary.offered_new:,} placements "
                     f"(--offer-new offers them)")
    if summary.predicates:
        lines.append("behind most changes: " + ", ".join(f"{p} ({c:,})" for p, c in summary.predicates.most_common(5)))
    if summary.components:
        lines.append("deciding score components: " + ", ".join(f"{p} ({c:,})" for p, c in summary.components.most_common(4)))
    if summary.lost:
        lines.append("agents losing placements: " + ", ".join(f"{a} ({c:,})" for a, c in summary.lost.most_common(5)))
    if summary.gained:
        lines.append("agents gaining placements: " + ", ".join(f"{a} ({c:,})" for a, c in summary.gained.most_common(5)))
    if shown:
        more = f" (the first {len(shown)}; -o FILE writes all {summary.changed:,})" if len(shown) < summary.changed else ""
        lines.append(f"changes, moves first{more}:")
    for v in shown:
        lines.append(f"  {v.name} {v.kind}: {v.before or 'rejected'} -> {v.after or 'rejected'}: {v.why()}")
        lines += _funnel_lines(v)
    for t in thresholds:
        measured = t.measured(summary)
        value = f"{measured:.2f}%" if t.percent else f"{measured:,.0f}"
        lines.append(f"fail-on {t}: {value}, {'beyond' if t.exceeded(summary) else 'within'}")
    return lines


def _funnel_lines(v: Any) -> list[str]:
    """The before/after funnel side by side: reached and removed per predicate."""
    after = v.funnel_after
    before = v.funnel_before
    if after is None:
        return []
    rows = {c.predicate: [c, None] for c in (before.predicates if before else ())}
    for c in after.predicates:
        rows.setdefault(c.predicate, [None, None])[1] = c
    width = max([len(p) for p in rows] + [9])
    out = [f"    {'predicate'.ljust(width)}  {'before reached/removed':>22}  {'after reached/removed':>22}"]
    for predicate, (b, a) in rows.items():
        left = f"{b.reached:,}/{b.removed:,}" if b is not None else "-"
        right = f"{a.reached:,}/{a.removed:,}" if a is not None else "-"
        out.append(f"    {predicate.ljust(width)}  {left:>22}  {right:>22}")
    out.append(f"    {'eligible'.ljust(width)}  {(str(before.eligible) if before else '-'):>22}  {after.eligible:>22,}")
    return out


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:
        import json

        return json.dumps(value).encode()


def _fleet(path: str, engine: str | None) -> Any:
    """The new fleet: a snapshot (`Fleet.save`), or declarations as a JSON array or JSON Lines, read
    in bulk as `a3fast place` reads a fleet."""
    from ..errors import SnapshotError
    from ..files import is_special, sniff_kind
    from ..fleet import Fleet
    from .fleet_input import load_fleet

    # told by its first bytes, which a pipe (`<(...)`) gives back to the reader after them
    if sniff_kind(path).name == "snapshot":
        if is_special(path):
            raise BadInput(f"{path}: a fleet snapshot is read from a file, not a pipe or device "
                           f"(write it to a file first)")
        try:
            fleet = Fleet.load(path, engine=engine)
            # a snapshot's declarations are checked when first read; a replay reads every one (its
            # digest), so it reads them here, where a bad one is told as this file's
            for name in fleet.names():
                fleet.get(name)
            return fleet
        except SnapshotError as exc:
            raise BadInput(str(exc) if str(exc).startswith(path) else f"{path}: {exc}") from None
    return load_fleet(path, engine)


def _route(path: str) -> Any:
    """A route file: {"name": ..., "adds": {...}}."""
    from ..fleet.placement import Route, RouteError
    from ..files import read_json

    require_kind(path, "a route")
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: $: expected a route {{\"name\", \"adds\"}}, found {describe(doc)}")
    unknown = [k for k in doc if k not in ("name", "adds")]
    if unknown:
        raise BadInput(f"{path}: $: expected only 'name' and 'adds' in a route, found member {quoted(unknown[0])}")
    if not isinstance(doc.get("name"), str) or not doc.get("name"):
        raise BadInput(f"{path}: $.name: expected the route's name (a non-empty string), found "
                       f"{describe(doc['name']) if 'name' in doc else 'nothing'}")
    adds = doc.get("adds")
    if not isinstance(adds, dict) or not adds:
        raise BadInput(f"{path}: $.adds: expected an object of requirements the route adds, found "
                       f"{describe(adds) if 'adds' in doc else 'nothing'}")
    try:
        route = Route(doc["name"], adds)
        from ..schema import parse_requirements

        parse_requirements({"v": "1.0", **adds})  # what it adds must itself be §4 requirements
    except RouteError as exc:
        raise BadInput(f"{path}: {exc}") from None
    except Exception as exc:  # SchemaError: name the path inside adds
        problems = getattr(exc, "problems", None)
        if problems:
            raise BadInput([f"{path}: $.adds{p.path[1:]}: expected {p.expected}, found {p.found}" for p in problems]) from None
        raise
    return route
