"""The replay benchmark measures what it says: every placement of the recorded trace replayed, the
revoked clearance changing some, and the read-only baseline measured beside it."""
from __future__ import annotations

from a3fast.bench.replay import bench_replay


def test_replay_bench_replays_every_placement_beside_reading_the_trace(engine):
    figures = bench_replay(agents=300, placements=400, repeat=1, engine=engine)
    assert (figures["engine"], figures["agents"], figures["placements"]) == (engine, 300, 400)
    assert 0 < figures["changed"] < 400
    assert figures["replay_s"] > 0 and figures["read_only_s"] > 0
    assert figures["replay_over_read"] == figures["replay_s"] / figures["read_only_s"]
    assert figures["replay_us_per_placement"] == figures["replay_s"] / 400 * 1e6
    # baseline mode on the recording fleet finds the same changes as the recorded decisions
    assert figures["baseline_changed"] == figures["changed"] and figures["baseline_s"] > 0


def test_quick_replay_bench_stays_small():
    figures = bench_replay(quick=True)
    assert figures["placements"] == 2_000
