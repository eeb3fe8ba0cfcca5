"""`a3fast gen-fleet` and `a3fast gen-tasks`: the standard workload as JSON Lines."""
from __future__ import annotations

import click
import orjson

from ..workload import generate_fleet, generate_tasks
from .common import atomic_output, read_json_documents


@click.command("gen-fleet")
@click.option("--agents", type=click.IntRange(0, 10_000_000), required=True, help="How many agents.")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same fleet.")
@click.option("--out", "out_path", default=None, metavar="FILE", help="Output file (default: standard output).")
def gen_fleet(agents, seed, out_path):
    """Generate a deterministic fleet of declarations (JSON Lines)."""
    with atomic_output(out_path) as out:
        for decl in generate_fleet(agents, seed):
            out.write(orjson.dumps(decl) + b"\n")


@click.command("gen-tasks")
@click.option("--fleet", "fleet_path", required=True, metavar="FLEET", help="The fleet the tasks are drawn from.")
@click.option("--tasks", type=click.IntRange(0, 10_000_000), required=True, help="How many tasks.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_path", default=None, metavar="FILE", help="Output file (default: standard output).")
def gen_tasks(fleet_path, tasks, seed, out_path):
    """Generate deterministic requirements documents against a fleet (JSON Lines)."""
    declarations = [doc for _, doc in read_json_documents(fleet_path)]
    with atomic_output(out_path) as out:
        for task in generate_tasks(declarations, tasks, seed):
            out.write(orjson.dumps(task) + b"\n")
