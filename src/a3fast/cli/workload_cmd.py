"""`a3fast gen-fleet` and `a3fast gen-tasks`: the standard workload as JSON Lines."""
from __future__ import annotations

import click
import orjson

from ..workload import MAX_SEED, generate_fleet, generate_tasks
from .common import atomic_output, check_not_inputs, output_option, progress_bar
from .fleet_input import load_fleet

SEED = click.IntRange(0, MAX_SEED)


@click.command("gen-fleet")
@click.option("--agents", type=click.IntRange(0, 10_000_000), required=True, help="How many agents.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="The same seed gives the same fleet.")
@output_option("Output file (default: standard output).")
def gen_fleet(agents, seed, output):
    """Generate a deterministic fleet of declarations (JSON Lines)."""
    with progress_bar(agents, "generating agents") as update:
        declarations = generate_fleet(agents, seed, progress=update)
    with atomic_output(output) as out:
        for decl in declarations:
            out.write(orjson.dumps(decl) + b"\n")


@click.command("gen-tasks")
@click.option("--fleet", "fleet_path", required=True, metavar="FLEET",
              help="The fleet the tasks are drawn from (§3 declarations, checked as `place` checks them).")
@click.option("--tasks", type=click.IntRange(0, 10_000_000), required=True, help="How many tasks.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="The same seed gives the same tasks (for the same fleet).")
@output_option("Output file (default: standard output).")
def gen_tasks(fleet_path, tasks, seed, output):
    """Generate deterministic requirements documents against a fleet (JSON Lines)."""
    # the fleet as `place` builds it (a name in two namespaces refused, a repeated name replaced by
    # its later declaration): tasks drawn from a declaration the fleet does not keep could ask for
    # what no agent of it offers
    check_not_inputs([output], {"--fleet": fleet_path})
    declarations = [decl.doc for decl in load_fleet(fleet_path, None)]
    with atomic_output(output) as out:
        for task in generate_tasks(declarations, tasks, seed):
            out.write(orjson.dumps(task) + b"\n")
