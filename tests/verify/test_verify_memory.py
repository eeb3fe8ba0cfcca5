"""Verifying JSON Lines keeps one record in memory at a time: peak memory does not grow with the
trace's length (only by the few bytes per placement a later resumed placement may cite)."""
from __future__ import annotations

import tracemalloc

from a3fast.verify import verify_file
from a3fast.bench.verify import write_bench_trace


def peak_bytes(path) -> int:
    tracemalloc.start()
    try:
        assert verify_file(path) == []
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_does_not_grow_with_the_length_of_the_trace(tmp_path):
    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    short_size = write_bench_trace(short, placements=20, candidates=200)
    long_size = write_bench_trace(long, placements=200, candidates=200)
    peak_short, peak_long = peak_bytes(short), peak_bytes(long)
    assert long_size > 9 * short_size
    # Ten times the trace; the peak may grow by what is kept per placement (a few hundred bytes),
    # never by a share of the trace itself.
    assert peak_long - peak_short < 200 * 1024, (peak_short, peak_long)
    assert peak_long < long_size / 10
