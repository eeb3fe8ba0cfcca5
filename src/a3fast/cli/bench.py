"""`a3fast bench`: one table from one run — a3fast on each engine beside the baselines, with ratios."""
from __future__ import annotations

import click
import orjson

from .common import BadInput, atomic_outputs, check_outputs, output_option


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())
    except ValueError:
        raise BadInput(f"--sizes: expected comma-separated agent counts such as 1000,10000, found {value!r}") from None
    if not sizes or any(n < 2 for n in sizes):
        raise BadInput(f"--sizes: expected agent counts of at least 2, found {value!r}")
    return sizes


@click.command()
@click.option("--sizes", default=None, metavar="N,N,...",
              help="Fleet sizes in agents [default: 1000,10000,100000; with --quick, 1000].")
@click.option("--quick", is_flag=True, help="Every scenario briefly, on small fleets: a smoke test (as in CI).")
@click.option("--json", "json_path", is_flag=False, flag_value="-", default=None, metavar="",
              help="Print the results in pytest-benchmark's JSON format on standard output (the "
                   "table goes to standard error).")
@output_option("Also write the results in pytest-benchmark's JSON format to FILE.", aliases=())
@click.option("--tasks", default=None, type=click.IntRange(1), help="Tasks per fleet size [default: 200; quick: 30].")
@click.option("--no-memory", is_flag=True, help="Skip the peak-RSS measurement (a separate process).")
@click.option("--no-extras", is_flag=True, help="Skip the figures of the verifier and other modules.")
def bench(sizes, quick, json_path, output, tasks, no_memory, no_extras) -> None:
    """Time matching and explaining on fleets of the standard workload, per engine and beside the
    literal per-candidate loop, a numpy boolean matrix and SQLite; print medians and ratios."""
    from dataclasses import replace

    from ..bench import BenchConfig, render, run_bench, to_pytest_benchmark

    # `--json FILE`, the older spelling of `-o FILE`, still works
    paths = [p for p in dict.fromkeys((json_path, output)) if p is not None]
    check_outputs(paths)
    chosen = _sizes(sizes) if sizes else None
    config = BenchConfig.quick_run(chosen or (1_000,)) if quick else BenchConfig(**({"sizes": chosen} if chosen else {}))
    config = replace(config, memory=not no_memory, extras=not no_extras,
                     **({"tasks": tasks} if tasks else {}))
    report = run_bench(config, progress=lambda text: click.echo(f"… {text}", err=True))
    table = render(report)
    if paths:
        data = orjson.dumps(to_pytest_benchmark(report), default=str,
                            option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        with atomic_outputs(paths) as streams:
            for out in streams:
                out.write(data)
    click.echo(table, err="-" in paths)
