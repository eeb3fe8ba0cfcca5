"""`a3fast place`: place one task on a fleet read in bulk and write its trace (docs/design.md,
"Contracts other programs rely on")."""
from __future__ import annotations

import sys

import click

from ..record.write import placement_records
from ..schema import MAX_TEXT, is_text
from ..trace import TraceWriter
from .common import EXIT_NEGATIVE, EXIT_OK, BadInput, atomic_output, check_not_inputs, output_option, say, shown
from .fleet_input import load_fleet, load_requirements


def _session(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A session names the task in its records, so it is a text as §4's `session` is (reading 10;
    an argument that is not UTF-8 arrives holding lone surrogates, which no record can carry)."""
    if value is not None and not is_text(value):
        raise click.BadParameter(f"expected a non-empty UTF-8 text of at most {MAX_TEXT} characters and no "
                                 f"control characters, found '{shown(value)[:60]}'")
    return value


@click.command()
@click.option("--fleet", "fleet_path", required=True, metavar="FLEET",
              help="Declarations: JSON Lines or a JSON array ('-' for standard input).")
@click.option("--requirements", "requirements_path", required=True, metavar="REQ",
              help="The task's requirements document (§4), a JSON file.")
@click.option("--engine", type=click.Choice(["native", "pure"]), default=None,
              help="Matching engine (default: a3fast.ENGINE).")
@click.option("--session", default=None, callback=_session,
              help="Session the task continues (affinity only).")
@click.option("--reason-limit", type=click.IntRange(1), default=None, metavar="N",
              help="Name at most N candidates per predicate in a rejection's reason and count the "
                   "rest (departs from §6, which asks for every one; filters_failed still lists all).")
@output_option("Write the trace here (atomically) instead of standard output.")
def place(fleet_path, requirements_path, engine, session, reason_limit, output):
    """Place one task on a fleet and write the trace as JSON Lines: task.submitted, then
    task.admitted + task.bound, or task.rejected.

    Exit 0 placed, 1 unschedulable, 2 bad input.
    """
    if fleet_path == "-" and requirements_path == "-":
        raise BadInput("standard input is read once: give the fleet or the requirements as a file")
    check_not_inputs([output], {"--fleet": fleet_path, "--requirements": requirements_path})
    fleet = load_fleet(fleet_path, engine)
    requirements = load_requirements(requirements_path)
    placement = fleet.place(requirements, session=session, reason_limit=reason_limit)
    with atomic_output(output) as out:
        writer = TraceWriter(out)
        for kind, content in placement_records(placement):
            writer.append(kind, content_json=content)
    rejection = placement.rejection
    if rejection is not None:
        say(f"a3fast: unschedulable: {rejection['reason']}")
    sys.exit(EXIT_OK if placement.bound else EXIT_NEGATIVE)
