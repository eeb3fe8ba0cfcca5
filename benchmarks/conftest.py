"""pytest-benchmark suites: `python -m pytest benchmarks` collects every `bench_*.py` here.

    python -m pytest benchmarks --benchmark-columns=median,min,max --benchmark-group-by=group
    A3FAST_BENCH_SIZES=1000,10000,100000 python -m pytest benchmarks/bench_placement.py

`a3fast bench` runs the same comparison in one process and prints one table with ratios.
"""
from __future__ import annotations

import pytest


def pytest_collect_file(file_path, parent):
    # bench_*.py are benchmark modules; a file named on the command line is collected by pytest itself
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
