"""Benchmarks of the matching engine against the matchers a user would otherwise pick.

    from a3fast.bench import BenchConfig, run_bench, render
    print(render(run_bench(BenchConfig(sizes=(1_000,)))))

`a3fast bench` is the command-line form; `benchmarks/` holds the pytest-benchmark suites.
"""
from .report import format_time, render, targets, to_pytest_benchmark
from .suite import BenchConfig, BenchReport, run_bench

__all__ = ["BenchConfig", "BenchReport", "run_bench", "render", "targets", "to_pytest_benchmark", "format_time"]
