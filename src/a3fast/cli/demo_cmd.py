"""`a3fast demo`: place a stream of tasks on a generated fleet, write the trace, explain, verify."""
from __future__ import annotations

import collections
import os
import time
from pathlib import Path

import click

from ..files import is_special, shown_text
from ..fleet import Fleet
from ..record.write import placement_records
from ..schema import parse_requirements
from ..trace import TraceWriter
from ..workload import MAX_SEED, generate_fleet, generate_tasks
from .common import BadInput, atomic_output, check_outputs, output_option


def decisive_predicate(placement) -> str | None:
    """The predicate that removed the last candidates of an unschedulable task."""
    remaining = placement.explanation.candidates_count
    for predicate, count in zip(placement.predicates, placement.explanation.failed_counts()):
        remaining -= count
        if remaining == 0 and count:
            return predicate
    return None


#: How the demo names score components in words (higher is better for each).
COMPONENT_WORDS = {"affinity": "session affinity", "success_rate": "success rate",
                   "cost": "cost score (a cheaper ceiling)", "substantiated": "substantiated claims"}


def explain_in_words(placement) -> str:
    """One decision told as a reviewer would read its record (§6)."""
    s = placement.scheduling
    lines = [f"A task required {', '.join(s['filters_passed']) or 'nothing'}."]
    lines.append("  " + placement.summary() + ".")
    ranked = sorted(s["scores"].items(), key=lambda kv: (-kv[1]["total"], kv[0]))
    for name, entry in ranked[:3]:
        parts = ", ".join(f"{k} {v:.3g}" for k, v in entry.items() if k != "total")
        lines.append(f"  {name}: total {entry['total']:.3f} ({parts})")
    if len(ranked) > 1:
        (w, we), (r, re) = ranked[0], ranked[1]
        diffs = [k for k in we if k != "total" and we[k] != re[k]]
        better = [COMPONENT_WORDS.get(k, k) for k in diffs if we[k] > re[k]]
        # on equal totals the components decided nothing: the tie goes to the smaller name
        # (scoring.choose; docs/design.md), whichever component the winner is ahead on
        why = ("an equal total and the smaller name" if we["total"] == re["total"] or not better
               else f"higher {' and '.join(better)}")
        lines.append(f"  {w} won over {r} on {why}.")
    else:
        lines.append(f"  {placement.agent} was the only eligible agent.")
    return "\n".join(lines)


def verification_text(trace_path: str) -> str:
    """The verifier's verdict on the trace just written (§7)."""
    try:
        from ..verify import summarise, verify_file
    except ImportError:
        return "verification: the verifier is not part of this build"
    return summarise(verify_file(trace_path))


def report_path(trace_path: str) -> str:
    """Where the trace's HTML report goes: beside it, the trace's name with `.html`."""
    target = Path(trace_path).with_suffix(".html")
    if target == Path(trace_path):  # a trace named *.html keeps its name; the page goes beside it
        target = Path(f"{trace_path}.html")
    return str(target)


def report_text(trace_path: str) -> str:
    """Write the trace's HTML report beside it and say where."""
    from ..report import render

    target = report_path(trace_path)
    html = render(trace_path, name=shown_text(Path(trace_path).name))
    with atomic_output(target) as out:
        out.write(html.encode("utf-8"))
    return f"report: {shown_text(target)} (one self-contained page; open it in a browser)"


def _missing_directories(folder: str) -> list[str]:
    """The directories of `folder` that do not exist yet, deepest first."""
    missing = []
    while folder and not os.path.exists(folder):
        if os.path.basename(folder) not in (".", ".."):   # `new/..` makes `new`, only that is removed
            missing.append(folder)
        parent = os.path.dirname(folder.rstrip(os.sep))
        if parent == folder:
            break
        folder = parent
    return missing


#: Where the demo writes when not told: a directory of its own, which the repository's .gitignore
#: covers (the trace of the default run is about 46 MB).
DEFAULT_TRACE = "a3fast-demo/trace.jsonl"


@click.command()
@click.option("--agents", type=click.IntRange(1, 1_000_000), default=1000, show_default=True,
              help="Agents in the generated fleet (the standard workload, a3fast.workload).")
@click.option("--tasks", type=click.IntRange(1, 10_000_000), default=500, show_default=True,
              help="Tasks generated against the fleet and placed one after another.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Seed of the fleet and the tasks: the same seed gives the same run.")
@click.option("--engine", type=click.Choice(["native", "pure"]), default=None,
              help="Matching engine (default: a3fast.ENGINE).")
@output_option("Where the trace is written (replaced atomically; its directory is made if missing). "
               "The HTML report goes beside it.", aliases=("--trace",), default=DEFAULT_TRACE)
def demo(agents, tasks, seed, engine, output):
    """Place a stream of tasks on a generated fleet, write the trace, and report."""
    if output == "-":
        raise BadInput("--output: the demo reports on standard output; give the trace a file")
    if is_special(output):
        # the demo reads its trace back for the report and the verdict: a pipe would hang it, and
        # /dev/null would be judged valid having held nothing
        raise BadInput(f"--output {shown_text(output)}: not a regular file; the demo reads its trace back "
                       f"to report on it, so give the trace a file")
    if os.path.basename(output) in ("", ".", ".."):
        raise BadInput(f"--output {shown_text(output)!r}: names a directory; give the trace a file name "
                       "(the report goes beside it)")
    folder = os.path.dirname(output)
    made = _missing_directories(folder)
    try:
        if made:
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as exc:
                raise BadInput(f"{shown_text(folder)}: cannot make the trace's directory: "
                               f"{exc.strerror or exc}") from None
        check_outputs([output, report_path(output)])     # both, before either is written
    except BadInput:
        for directory in made:     # a refused run leaves nothing behind, its directories neither
            if not os.path.isdir(directory):   # deepest first: one a failed makedirs never made
                continue
            try:
                os.rmdir(directory)
            except OSError:
                break
        raise
    trace_path = output
    declarations = generate_fleet(agents, seed)
    fleet = Fleet(engine=engine)
    started = time.perf_counter()
    fleet.extend(declarations)
    build_s = time.perf_counter() - started
    requirements = [parse_requirements(t) for t in generate_tasks(declarations, tasks, seed)]

    started = time.perf_counter()
    placements = [fleet.place(r) for r in requirements]
    place_s = time.perf_counter() - started

    started = time.perf_counter()
    with atomic_output(trace_path) as out:
        writer = TraceWriter(out)
        for p in placements:
            for kind, content in placement_records(p):
                writer.append(kind, content_json=content)
    write_s = time.perf_counter() - started
    size = os.path.getsize(trace_path)      # the file as written, each record's line and all

    bound = sum(p.bound for p in placements)
    rejected = [p for p in placements if not p.bound]
    by_kind = collections.Counter((decisive_predicate(p) or "none").split(":")[0] for p in rejected)
    by_predicate = collections.Counter(decisive_predicate(p) for p in rejected)

    click.echo(f"a3fast demo — engine {fleet.engine}, {agents:,} agents (built in {build_s * 1e3:.0f} ms), "
               f"{tasks:,} tasks")
    click.echo(f"placed {bound:,}, unschedulable {len(rejected):,}: "
               f"{tasks / place_s:,.0f} placements/s with full explanations kept compact "
               f"({place_s / tasks * 1e6:.1f} µs each)")
    click.echo(f"trace {shown_text(trace_path)}: {size / 1e6:.1f} MB of spec JSON written at "
               f"{tasks / write_s:,.0f} placements/s")
    if rejected:
        click.echo("unschedulable, by the predicate that removed the last candidates:")
        for kind, count in by_kind.most_common():
            click.echo(f"  {count:6d}  {kind}")
        top = ", ".join(f"{p} ({n})" for p, n in by_predicate.most_common(3))
        click.echo(f"  most often: {top}")
    example = next((p for p in placements if p.scheduling is not None and len(p.scheduling["scores"]) > 1), None) or \
        next((p for p in placements if p.bound), None)
    if example is not None:
        click.echo("one decision, explained:")
        click.echo(explain_in_words(example))
    # The verdict stays the last line (scripts read it); the page is written just before it.
    click.echo(report_text(trace_path))
    click.echo(verification_text(trace_path))
