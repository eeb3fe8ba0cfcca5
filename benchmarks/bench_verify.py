"""The verifier (§7) on a trace of placements at 1,000 candidates each (spec JSON, ~92 KB a
placement) — a3fast beside the baselines a caller would otherwise write.

    python -m pytest benchmarks/bench_verify.py --benchmark-columns=median,min,max

`a3fast` is `verify_file`: JSON Lines streamed line by line, each task.bound decoded in one typed
pass. `json.loads` and `orjson.loads` are the same plain-Python reading of §7 fed by each parser;
`read only` is a3fast's reading of the trace with no checks, the floor under the verifier.
The whole-issue target (1,000 placements, ~93 MB, ≥150 MB/s) is `a3fast bench`'s "verify" row.
"""
from __future__ import annotations

import json

import orjson
import pytest

from a3fast.trace import read_trace
from a3fast.verify import _TYPED, verify_file
from a3fast.bench.verify import plain_verify, write_bench_trace

PLACEMENTS, CANDIDATES = 100, 1000


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("verify") / "trace.jsonl"
    size = write_bench_trace(path, PLACEMENTS, CANDIDATES)
    assert verify_file(path) == []
    return path, size


def _throughput(benchmark, size):
    benchmark.extra_info["bytes"] = size
    benchmark.extra_info["records"] = 3 * PLACEMENTS


def test_verify_a3fast(benchmark, trace):
    path, size = trace
    _throughput(benchmark, size)
    assert benchmark(verify_file, path) == []


def test_verify_read_only(benchmark, trace):
    path, size = trace
    _throughput(benchmark, size)
    benchmark(lambda: sum(1 for _ in read_trace(path, typed=_TYPED)))


class _Parsed:
    """plain_verify fed by another parser: the same reading of §7, a different json.loads."""

    def __init__(self, loads):
        self.loads = loads

    def __call__(self, path):
        original = json.loads
        json.loads = self.loads
        try:
            with open(path, "rb") as fh:
                return plain_verify(fh)
        finally:
            json.loads = original


@pytest.mark.parametrize("parser", ["json.loads", "orjson.loads"])
def test_verify_plain_python(benchmark, trace, parser):
    path, size = trace
    _throughput(benchmark, size)
    run = (lambda p: plain_verify(open(p, "rb"))) if parser == "json.loads" else _Parsed(orjson.loads)
    assert benchmark(run, path) == []
