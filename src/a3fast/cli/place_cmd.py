"""`a3fast place`: place one task on a fleet read in bulk and write its trace (docs/design.md,
"Contracts other programs rely on")."""
from __future__ import annotations

import sys

import click

from ..record.write import placement_records
from ..trace import TraceWriter
from .common import EXIT_NEGATIVE, EXIT_OK, atomic_output, output_option
from .fleet_input import load_fleet, load_requirements


@click.command()
@click.option("--fleet", "fleet_path", required=True, metavar="FLEET",
              help="Declarations: JSON Lines or a JSON array ('-' for standard input).")
@click.option("--requirements", "requirements_path", required=True, metavar="REQ",
              help="The task's requirements document (§4), a JSON file.")
@click.option("--engine", type=click.Choice(["native", "pure"]), default=None,
              help="Matching engine (default: a3fast.ENGINE).")
@click.option("--session", default=None, help="Session the task continues (affinity only).")
@click.option("--reason-limit", type=click.IntRange(1), default=None, metavar="N",
              help="Name at most N candidates per predicate in a rejection's reason and count the "
                   "rest (departs from §6, which asks for every one; filters_failed still lists all).")
@output_option("Write the trace here (atomically) instead of standard output.")
def place(fleet_path, requirements_path, engine, session, reason_limit, output):
    """Place one task on a fleet and write the trace as JSON Lines: task.submitted, then
    task.admitted + task.bound, or task.rejected.

    Exit 0 placed, 1 unschedulable, 2 bad input.
    """
    fleet = load_fleet(fleet_path, engine)
    requirements = load_requirements(requirements_path)
    placement = fleet.place(requirements, session=session, reason_limit=reason_limit)
    with atomic_output(output) as out:
        writer = TraceWriter(out)
        for kind, content in placement_records(placement):
            writer.append(kind, content_json=content)
    rejection = placement.rejection
    if rejection is not None:
        click.echo(f"a3fast: unschedulable: {rejection['reason']}", file=sys.stderr)
    sys.exit(EXIT_OK if placement.bound else EXIT_NEGATIVE)
