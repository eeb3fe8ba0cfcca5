"""`a3fast bench --distributed N` runs bounded and prints every row beside its floor or target, in
a process of its own (its own local Ray)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distributed_worlds import ray_or_fail

pytestmark = pytest.mark.slow


@pytest.fixture()
def ray():
    """The ray module (the benchmark starts a Ray of its own, in its own process)."""
    return ray_or_fail()


def test_bench_distributed_prints_every_row_beside_its_target(ray, tmp_path):
    out = tmp_path / "rows.json"
    run = subprocess.run([sys.executable, "-m", "a3fast", "bench", "--distributed", "2000", "--tasks", "12",
                          "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = run.stdout
    for row in ("load       Fleet.load_jsonl", "shards started in", "ready (start + load)", "target <= 1.5x",
                "load steps deal", "Ray round trip", "target <= 3 ms", "shard stages", "merge and build",
                "place_many", "target >= 4x", "batch      place_many of 10,000 tasks", "with compact records",
                "same placements: True", "memory     per shard", "same placements as one Fleet: True"):
        assert row in text, row
    document = json.loads(out.read_text())     # pytest-benchmark's document, the figures under a3fast
    assert document["benchmarks"] == [] and {"machine_info", "commit_info", "datetime"} <= set(document)
    rows = document["a3fast"]["distributed"]
    assert rows["agents"] == 2000 and rows["shards"] == 4 and rows["same_placements"] is True
    assert rows["many_same_placements"] is True and rows["many_per_s"] > 0 and rows["shards_start_s"] > 0
    assert set(rows["load_phases_s"]) == {"deal", "read", "check", "commit", "number"}
    assert rows["place_p50_ms"] > 0 and rows["ray_round_trip_ms"] > 0 and rows["sharded_load_s"] > 0
