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


def churning_compact_trace(path, agents: int, placements: int) -> None:
    """A compact trace of `placements` rejections, one agent joining the fleet before each: every
    record writes a fleet snapshot based on the one before, as a3fast's writer does."""
    from a3fast import Fleet, TraceWriter

    fleet = Fleet()
    fleet.extend([{"v": "1.0", "agent": {"name": f"agent-{i:05d}", "namespace": "ns"},
                   "capabilities": [{"name": "x.a", "version": 1}], "clearances": []} for i in range(agents)])
    with TraceWriter(path, form="compact") as writer:
        for k in range(placements):
            fleet.add({"v": "1.0", "agent": {"name": f"new-{k}", "namespace": "ns"}, "capabilities": [],
                       "clearances": []})
            writer.write(fleet.place({"v": "1.0", "capabilities": [{"name": "x.b", "version": 1}]},
                                     reason_limit=1))


def test_a_compact_trace_whose_fleet_churns_keeps_each_name_once(tmp_path):
    # each based snapshot used to copy its base's names: memory grew as snapshots x fleet size
    from a3fast import read_records

    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    # both past a chain of based snapshots, so both hold a whole table written again; the long
    # one five more
    churning_compact_trace(short, 5_000, 80)
    churning_compact_trace(long, 5_000, 400)
    peaks = []
    for path in (short, long):
        tracemalloc.start()
        try:
            assert verify_file(path) == []
            assert sum(1 for _ in read_records(path)) > 0
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # 320 more snapshots of 5,000 names, five of them whole: a copy each would be over 12 MB of
    # lists alone, the five whole tables over 1.5 MB of names and maps
    assert peaks[1] - peaks[0] < 1024 * 1024, peaks
