"""`a3fast bench`: one table from one run — a3fast on each engine beside the baselines, with ratios."""
from __future__ import annotations

import os
import shutil
import signal
import sys
from contextlib import contextmanager
from typing import Iterator

import click
import orjson

from .common import (EXIT_NEGATIVE, EXIT_OK, BadInput, Seconds, atomic_outputs, check_not_inputs, check_outputs,
                     output_option, say)


#: The most agents (or tasks) a run generates, as `gen-fleet` and `gen-tasks` allow: past it the
#: workload does not fit in memory, and numpy refuses the arrays outright.
MAX_COUNT = 10_000_000


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())
    except ValueError:
        raise BadInput(f"--sizes: expected comma-separated agent counts such as 1000,10000, found {value!r}") from None
    if not sizes or any(n < 2 for n in sizes):
        raise BadInput(f"--sizes: expected agent counts of at least 2, found {value!r}")
    too_many = next((n for n in sizes if n > MAX_COUNT), None)
    if too_many is not None:
        raise BadInput(f"--sizes: {too_many} is not in the range 2<=x<={MAX_COUNT} (agents, as gen-fleet allows)")
    return tuple(dict.fromkeys(sizes))     # a size given twice is measured once


@contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM (`timeout`, a CI's cancel, `docker stop`) ends the run as Ctrl-C does: what was
    measured is printed and written, the servers and processes it started are stopped and its
    temporary files removed (each row's own `finally`), which a process ended by the signal
    itself skipped."""
    def interrupted(signum, frame):
        # once: a second SIGTERM while the first's cleanup runs (processes stopped, results
        # written) would cut that short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupted)
    except ValueError:          # not the main thread (a caller's own): the signal is theirs
        yield
        return
    try:
        yield
    finally:
        # a handler installed outside Python reads back as None: the default is restored then
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@click.command()
@click.option("--sizes", default=None, metavar="N,N,...",
              help="Fleet sizes in agents, each 2 to 10,000,000 [default: 1000,10000,100000; with "
                   "--quick, 1000].")
@click.option("--large-from", type=click.IntRange(2), default=1_000_000, show_default=True, metavar="N",
              help="Sizes of N agents or more are measured as large fleets: ready from JSON Lines, a "
                   "placement, snapshot save and load, each in a process of its own (a3fast.bench.large).")
@click.option("--shell-runs", type=click.IntRange(0, 100), default=3, show_default=True, metavar="N",
              help="Large fleets: run `a3fast place --fleet` and `a3fast serve --fleet` on the file N times "
                   "each (medians) beside orjson turning its lines into dicts; 0 leaves them out.")
@click.option("--distributed", "distributed", type=click.IntRange(1000, MAX_COUNT), default=None, is_flag=False,
              flag_value=200_000, metavar="N",
              help="The sharded fleet's figures instead (a3fast.bench.distributed): N agents [200,000] "
                   "loaded into 4 shards beside one Fleet, placement latency beside a Ray round trip, "
                   "place_many against one at a time, memory per shard. Needs Ray.")
@click.option("--quick", is_flag=True, help="Every scenario briefly, on small fleets: a smoke test (as in CI).")
@click.option("--json", "json_path", is_flag=False, flag_value="-", default=None, metavar="",
              help="Print the results in pytest-benchmark's JSON format on standard output (the "
                   "table goes to standard error).")
@output_option("Also write the results in pytest-benchmark's JSON format to FILE.", aliases=())
@click.option("--tasks", default=None, type=click.IntRange(1, MAX_COUNT), help="Tasks per fleet size [default: 200; quick: 30].")
@click.option("--no-memory", is_flag=True, help="Skip the peak-RSS measurement (a separate process).")
@click.option("--no-extras", is_flag=True, help="Skip the figures of the verifier and other modules.")
@click.option("--matcher", "matchers", multiple=True, metavar="CMD",
              help="Time a matcher that speaks the stdio protocol beside a3fast in process and over "
                   "the same protocol (repeatable; docs/harness.md). Sizes: the first of --sizes.")
@click.option("--seconds", type=Seconds(0.1, 3600), default=30.0, show_default=True,
              help="With --matcher: placement time allowed per subject.")
@click.option("--timeout", type=Seconds(0.1, 3600), default=30.0, show_default=True,
              help="With --matcher: seconds allowed for any one answer.")
@click.option("--record", type=click.Choice(["compact", "spec"]), default="compact", show_default=True,
              help="With --matcher: the record form asked of every subject (the place op's `record`).")
@click.option("--window", type=click.IntRange(1, 64), default=32, show_default=True,
              help="With --matcher: place requests sent before their answers are read (1: one at a time).")
def bench(sizes, large_from, shell_runs, distributed, quick, json_path, output, tasks, no_memory, no_extras, matchers,
          seconds, timeout, record, window) -> None:
    """Time matching and explaining on fleets of the standard workload, per engine and beside the
    literal per-candidate loop, a numpy boolean matrix and SQLite; print medians and ratios.
    With --matcher, time other matchers over the stdio protocol instead."""
    # `--json FILE`, the older spelling of `-o FILE`, still works
    paths = [p for p in dict.fromkeys((json_path, output)) if p is not None]
    check_outputs(paths)
    chosen = _sizes(sizes) if sizes else None
    if distributed is not None and matchers:
        raise BadInput("--distributed measures the sharded fleet alone: it takes no --matcher (run them apart)")
    for command in matchers:      # a matcher's program or files are read, never replaced by the results
        for word in _words(command):
            if os.path.isfile(word):
                check_not_inputs(paths, {"--matcher": word})
    with _terminated_as_interrupted():
        if distributed is not None:
            _bench_distributed(distributed, tasks, quick, paths)
            return
        if matchers:
            failed = _bench_matchers(list(matchers), chosen[0] if chosen else 1000, tasks or (30 if quick else 300),
                                     min(seconds, 5.0) if quick else seconds, timeout, record, paths, window)
            # a CI job that benchmarks a matcher learns from the exit code that it stopped or placed
            # wrongly, not only from the table
            sys.exit(EXIT_NEGATIVE if failed else EXIT_OK)
        _bench_tables(chosen, large_from, shell_runs, quick, tasks, no_memory, no_extras, paths)


def _words(command: str) -> list[str]:
    from ..harness.client import command_argv

    try:
        return command_argv(command)
    except ValueError as exc:
        raise BadInput(f"--matcher: {exc}") from None


def _bench_distributed(agents: int, tasks: int | None, quick: bool, paths: list[str]) -> None:
    need_extras({"ray": ("ray",)}, "a3fast bench --distributed", "the other rows need no Ray")
    from ..bench.distributed import bench_distributed, render_distributed
    from ..bench.machine import machine_info
    from ..bench.report import pytest_benchmark_document

    row = bench_distributed(agents, tasks=tasks or (30 if quick else 200), many=500 if quick else 10_000,
                            progress=lambda text: say(f"… {text}"))
    if paths:
        # pytest-benchmark's document, as -o promises: the sharded figures are no per-task samples,
        # so they go under its "a3fast" member, beside no benchmarks
        document = pytest_benchmark_document(machine_info(), [], {"distributed": row})
        data = orjson.dumps(document, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        with atomic_outputs(paths) as streams:
            for out in streams:
                out.write(data)
    click.echo(render_distributed(row), err="-" in paths)


def _bench_tables(chosen, large_from, shell_runs, quick, tasks, no_memory, no_extras, paths) -> None:
    from dataclasses import replace

    from ..bench import BenchConfig, run_bench
    from ..bench.suite import new_report

    config = BenchConfig.quick_run(chosen or (1_000,)) if quick else (BenchConfig(sizes=chosen) if chosen else BenchConfig())
    config = replace(config, memory=not no_memory, extras=not no_extras, large_from=large_from,
                     shell_runs=shell_runs,
                     **({"tasks": tasks} if tasks else {}))
    if config.extras:
        need_extras(EXTRAS_OF_THE_OTHER_SUBJECTS, "a3fast bench (its HTTP and Kubernetes rows)",
                    "--no-extras measures the rest")
    report = new_report(config)
    try:
        run_bench(config, progress=lambda text: say(f"… {text}"), report=report)
    except BaseException:
        # what was measured before the failure is kept: printed, and written where asked
        say("a3fast: the run stopped part of the way; what it measured until then:")
        _write(report, paths, partial=True)
        raise
    _write(report, paths)


#: what the other subjects' rows (`--no-extras` leaves them out) need beyond the base install:
#: the HTTP and Kubernetes rows run `a3fast serve` and talk to it with httpx
EXTRAS_OF_THE_OTHER_SUBJECTS = {"serve": ("starlette", "uvicorn", "prometheus_client"), "import": ("httpx",)}


def need_extras(extras: dict[str, tuple[str, ...]], feature: str, otherwise: str) -> None:
    """Exit 2 before measuring anything when a module of `extras` is missing, naming every extra
    to install at once."""
    import importlib.util

    missing = {extra: [m for m in modules if importlib.util.find_spec(m) is None] for extra, modules in extras.items()}
    missing = {extra: modules for extra, modules in missing.items() if modules}
    if missing:
        names = ",".join(missing)
        modules = ", ".join(m for ms in missing.values() for m in ms)
        raise BadInput(f"{feature} needs the {' and '.join(repr(e) for e in missing)} "
                       f"extra{'s' if len(missing) > 1 else ''}: pip install 'a3fast[{names}]' "
                       f"({modules} not installed; {otherwise})")


def _write(report, paths, partial: bool = False) -> None:
    from ..bench import render, to_pytest_benchmark

    if paths and partial and not _measured(report):
        # a results file with no benchmarks in it would replace whatever was there for nothing
        say("a3fast: nothing was measured, so no results were written")
        paths = []
    if paths:
        data = orjson.dumps(to_pytest_benchmark(report), default=str,
                            option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        with atomic_outputs(paths) as streams:
            for out in streams:
                out.write(data)
    click.echo(render(report), err=partial or "-" in paths)


def _measured(report) -> bool:
    return bool(report.cells or report.builds or report.parse_us or report.updates or report.memory
                or report.large or report.extras)


def _bench_matchers(commands, agents, tasks, seconds, timeout, record, paths, window=32) -> bool:
    """Run and print the bench of `commands`; whether some subject was stopped or broke the hard
    filter."""
    from ..bench.matchers import render_matchers, run_matcher_bench, to_pytest_benchmark
    from ..harness.client import MatcherFailure, command_argv

    for command in commands:
        try:
            argv = command_argv(command)
        except ValueError as exc:
            raise BadInput(f"--matcher: {exc}") from None
        # a command that cannot start is a bad option, as for `conformance --matcher`, not a
        # matcher that stopped (which the table reports)
        if shutil.which(argv[0]) is None:
            raise BadInput(f"--matcher: cannot start {command!r}: {argv[0]!r} is no command this system can run")
    try:
        result = run_matcher_bench(commands, agents=agents, tasks=tasks, budget_s=seconds, timeout=timeout, record=record,
                                   window=window, progress=lambda text: say(f"… {text}"))
    except MatcherFailure as exc:    # one that exists and still cannot start (a broken #! line, say)
        raise BadInput(f"--matcher: {exc.message}") from None
    if paths:
        data = orjson.dumps(to_pytest_benchmark(result), option=orjson.OPT_INDENT_2)
        with atomic_outputs(paths) as streams:
            for out in streams:
                out.write(data)
    click.echo(render_matchers(result), err="-" in paths)
    return any(run.failure is not None or run.broke for run in result.runs)
