"""`a3fast explain`: the placements of a trace in words, counts, and (with a fleet) every failure."""
from __future__ import annotations

import click

from ..explain import all_failed, counts_table, explain_record
from .common import BadInput, EXIT_OK
from .fleet_input import load_fleet
from .trace_input import read_records


@click.command()
@click.argument("trace", default="-")
@click.option("--seq", type=int, default=None, help="Explain the placement recorded at this seq in detail.")
@click.option("--all-failed", "all_failed_flag", is_flag=True,
              help="Every predicate each ineligible candidate fails, not only the first (needs --fleet).")
@click.option("--fleet", "fleet_path", default=None, metavar="FLEET",
              help="The fleet the trace was placed on (a trace carries only the chosen declaration).")
def explain(trace, seq, all_failed_flag, fleet_path):
    """Explain placements: a verdict line per placement, or one in detail with --seq."""
    if all_failed_flag and fleet_path is None:
        raise BadInput("--all-failed needs --fleet: a trace carries only the chosen agent's declaration")
    found = False
    for record_seq, kind, content in read_records(trace, decode=True):
        if seq is not None and record_seq != seq:
            continue
        explained = explain_record(record_seq, kind, content)
        if explained is None:
            if seq is not None:
                raise BadInput(f"{trace}: seq {seq} is a {kind} record, not a placement with an explanation")
            continue
        found = True
        click.echo(f"seq {record_seq} {kind}: {explained.summary()}")
        if seq is None:
            continue
        for line in counts_table(explained.counts()):
            click.echo(line)
        ranked = sorted(explained.scores.items(), key=lambda kv: (-_total(kv[1]), kv[0]))
        for name, entry in ranked[:5]:
            parts = ", ".join(f"{k} {v}" for k, v in entry.items())
            click.echo(f"  score {name}: {parts}")
        if explained.reason:
            click.echo(f"  reason: {explained.reason}")
        if all_failed_flag:
            fleet = load_fleet(fleet_path, None)
            requirements = (content.get("scheduling") or {}).get("requirements") if kind == "task.bound" \
                else content.get("requirements")
            for name, predicates in all_failed(fleet, requirements or {}).items():
                click.echo(f"  {name} fails {', '.join(predicates)}")
    if not found:
        raise BadInput(f"{trace}: no placement with an explanation" + (f" at seq {seq}" if seq is not None else ""))
    return EXIT_OK


def _total(entry) -> float:
    total = entry.get("total") if isinstance(entry, dict) else None
    return float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else float("-inf")
