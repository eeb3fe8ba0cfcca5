"""The sharded fleet's figures beside their floors (`a3fast bench --distributed`), in one run:

- load: `Fleet.load_jsonl` of a file of the standard workload, then the shards' actors started
  (their own row) and `ShardedFleet.extend_jsonl` of the same file into them (target: the fleet
  ready, start included, in at most 1.5 times the one Fleet's load);
- latency: `ShardedFleet.place` p50 against the floor, a Ray actor round trip (a method that does
  nothing, on one of the same shards), and where the rest goes: the shards' own stages (explain to
  choose, timed inside the shard), one shard's score_task round trip (stages + serialising the
  answer + Ray), and the coordinator's merge and build (the place p50 less the slowest round trip);
- batching: `place_many` placements per second against one at a time, and a batch of `many`
  distinct tasks (10,000) through `place_many` — its placements/s, its compact records' (the
  `Encoder`) — beside one Fleet's `place_many` of the same batch, whose placements it must equal
  (target: at least 5,000 placements/s);
- memory: each shard's resident set and index bytes.

Ray must be installed; a local Ray of 2 CPUs is started unless one is running.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any, Callable

__all__ = ["bench_distributed", "render_distributed"]


def _write(path: str, agents: int, seed: int, tasks: int) -> list[dict]:
    import orjson

    from ..workload import generate_fleet, generate_tasks

    declarations = generate_fleet(agents, seed)
    with open(path, "wb") as out:
        for decl in declarations:
            out.write(orjson.dumps(decl) + b"\n")
    return generate_tasks(declarations[:20_000], tasks, seed)


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_distributed(agents: int = 200_000, shards: int = 4, tasks: int = 200, seed: int = 7,
                      progress: Callable[[str], None] = lambda text: None, many: int = 10_000) -> dict[str, Any]:
    """The rows above, measured on `agents` agents in `shards` shards (see the module docstring)."""
    import ray

    from ..distributed import ShardedFleet
    from ..fleet import Fleet

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _node_ip_address="127.0.0.1")
    out: dict[str, Any] = {"agents": agents, "shards": shards, "many_tasks": many}
    with tempfile.TemporaryDirectory(prefix="a3fast-bench-shards-") as work:
        path = os.path.join(work, "fleet.jsonl")
        progress(f"writing {agents:,} agents")
        task_docs = _write(path, agents, seed, 20 + tasks + many)
        out["jsonl_bytes"] = os.path.getsize(path)
        progress("Fleet.load_jsonl")
        started = time.perf_counter()
        one = Fleet.load_jsonl(path)
        out["one_load_s"] = time.perf_counter() - started
        expected = [one.place(t, remember_session=False).agent for t in task_docs[:20]]
        progress(f"starting {shards} shards, then ShardedFleet.extend_jsonl into them")
        started = time.perf_counter()
        sharded = ShardedFleet(shards, state_dir=os.path.join(work, "state"), timeout=300)
        out["shards_start_s"] = time.perf_counter() - started
        started = time.perf_counter()
        sharded.extend_jsonl(path)
        out["sharded_load_s"] = time.perf_counter() - started
        out["load_phases_s"] = dict(sharded.load_phases)
        out["load_ratio"] = out["sharded_load_s"] / out["one_load_s"]
        out["ready_ratio"] = (out["shards_start_s"] + out["sharded_load_s"]) / out["one_load_s"]
        out["load_agents_per_s_per_shard"] = agents / out["sharded_load_s"] / shards
        try:
            out["same_placements"] = [sharded.place(t, remember_session=False).agent for t in task_docs[:20]] == expected
            _latency(sharded, task_docs[20:20 + tasks], out, progress)
            _many(one, sharded, task_docs[20 + tasks:], out, progress)
            states = sharded.shard_states()
            out["shard_rss_bytes"] = [s["rss_bytes"] for s in states]
            out["shard_index_bytes"] = [s["index_nbytes"] for s in states]
        finally:
            sharded.close()
    return out


def _many(one: Any, sharded: Any, task_docs: list[dict], out: dict[str, Any],
          progress: Callable[[str], None]) -> None:
    """A batch of distinct tasks through both fleets' place_many (the same starting state: no
    placement before held a session), the sharded placements' compact records, and whether both
    fleets placed every task alike (the first 100 records compared whole, timings aside)."""
    from ..record.compact import Encoder
    from ..record.write import placement_records

    progress(f"place_many of {len(task_docs):,} tasks, sharded and one Fleet")
    started = time.perf_counter()
    placed = sharded.place_many(task_docs)
    out["many_place_s"] = time.perf_counter() - started
    out["many_per_s"] = len(task_docs) / out["many_place_s"]
    encoder, seq, size = Encoder(), 1, 0
    started = time.perf_counter()
    for placement in placed:
        written = encoder.encode_placement(seq, placement)
        seq += len(written)
        size += sum(len(content) for _, content in written)
    out["many_compact_s"] = time.perf_counter() - started
    out["many_compact_bytes_per_task"] = size / max(len(task_docs), 1)
    out["many_with_compact_per_s"] = len(task_docs) / (out["many_place_s"] + out["many_compact_s"])
    started = time.perf_counter()
    expected = one.place_many(task_docs)
    one_place_s = time.perf_counter() - started
    out["one_many_per_s"] = len(task_docs) / one_place_s
    started = time.perf_counter()
    encoder, seq = Encoder(), 1
    for placement in expected:
        seq += len(encoder.encode_placement(seq, placement))
    out["one_many_with_compact_per_s"] = len(task_docs) / (one_place_s + time.perf_counter() - started)
    same = [p.agent for p in placed] == [p.agent for p in expected]
    for got, want in zip(placed[:100], expected[:100]):
        same = same and [(k, _untimed(c)) for k, c in placement_records(got)] == \
            [(k, _untimed(c)) for k, c in placement_records(want)]
    out["many_same_placements"] = same


def _untimed(content: bytes) -> bytes:
    """A record's content without its measured `timings` member."""
    import re

    return re.sub(rb',?"timings":\{[^{}]*\}', b"", content)


def _latency(many: Any, task_docs: list[dict], out: dict[str, Any], progress: Callable[[str], None]) -> None:
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self, value: Any = None) -> Any:
            return value

    echo = getattr(Echo, "remote")()  # an actor class: ray.remote adds `remote`, which its stubs may not show
    ray.get(echo.ping.remote())
    progress("Ray round trips, one shard's score_task, placements")
    trips, shard_trips, stages, places = [], [], [], []
    shard = many.shard_actor(0)
    for task in task_docs:
        started = time.perf_counter()
        ray.get(echo.ping.remote())
        trips.append(time.perf_counter() - started)
        started = time.perf_counter()
        answer = ray.get(shard.score_task.remote(task, None))
        shard_trips.append(time.perf_counter() - started)
        stages.append(answer.stages_ns / 1e9)
        started = time.perf_counter()
        many.place(task, remember_session=False)
        places.append(time.perf_counter() - started)
    out["ray_round_trip_ms"] = _p50_ms(trips)
    out["shard_stages_ms"] = _p50_ms(stages)
    out["shard_round_trip_ms"] = _p50_ms(shard_trips)
    out["place_p50_ms"] = _p50_ms(places)
    out["place_vs_ray"] = out["place_p50_ms"] / out["ray_round_trip_ms"]
    out["merge_and_build_ms"] = max(0.0, out["place_p50_ms"] - out["shard_round_trip_ms"])
    progress("place_many against one at a time")
    started = time.perf_counter()
    for task in task_docs:
        many.place(task, remember_session=False)
    one_at_a_time = len(task_docs) / (time.perf_counter() - started)
    started = time.perf_counter()
    many.place_many(task_docs, remember_session=False)
    batched = len(task_docs) / (time.perf_counter() - started)
    out["place_per_s"] = one_at_a_time
    out["place_many_per_s"] = batched
    out["place_many_ratio"] = batched / one_at_a_time
    ray.kill(echo)


def render_distributed(row: dict[str, Any]) -> str:
    """The rows beside their targets, as text."""
    def mark(ok: bool) -> str:
        return "met" if ok else "NOT met"

    phases = ", ".join(f"{name} {seconds:.2f}" for name, seconds in row["load_phases_s"].items())
    lines = [f"sharded fleet: {row['agents']:,} agents in {row['shards']} shards "
             f"({row['jsonl_bytes'] / 1e6:.0f} MB of JSON Lines)",
             f"  load       Fleet.load_jsonl {row['one_load_s']:.2f} s; shards started in {row['shards_start_s']:.2f} s, "
             f"then ShardedFleet.extend_jsonl {row['sharded_load_s']:.2f} s = {row['load_ratio']:.2f}x; ready "
             f"(start + load) {row['ready_ratio']:.2f}x (target <= 1.5x: {mark(row['ready_ratio'] <= 1.5)}); "
             f"{row['load_agents_per_s_per_shard']:,.0f} agents/s per shard",
             f"  load steps {phases} s",
             f"  latency    place p50 {row['place_p50_ms']:.2f} ms; Ray round trip {row['ray_round_trip_ms']:.2f} ms "
             f"= {row['place_vs_ray']:.1f}x (target <= 3 ms: {mark(row['place_p50_ms'] <= 3)}, "
             f"<= 3x: {mark(row['place_vs_ray'] <= 3)})",
             f"  where      shard stages {row['shard_stages_ms']:.2f} ms; one shard's round trip "
             f"{row['shard_round_trip_ms']:.2f} ms (stages + answer serialised + Ray); merge and build "
             f"{row['merge_and_build_ms']:.2f} ms",
             f"  batching   place_many {row['place_many_per_s']:,.0f}/s; one at a time {row['place_per_s']:,.0f}/s "
             f"= {row['place_many_ratio']:.1f}x (target >= 4x: {mark(row['place_many_ratio'] >= 4)})",
             f"  batch      place_many of {row['many_tasks']:,} tasks {row['many_per_s']:,.0f}/s (target >= 5,000/s: "
             f"{mark(row['many_per_s'] >= 5000)}); with compact records {row['many_with_compact_per_s']:,.0f}/s "
             f"({row['many_compact_bytes_per_task'] / 1e3:,.0f} KB a task); one Fleet {row['one_many_per_s']:,.0f}/s, "
             f"with compact records {row['one_many_with_compact_per_s']:,.0f}/s; same placements: {row['many_same_placements']}",
             f"  memory     per shard RSS {', '.join(f'{b / 2**20:.0f}' for b in row['shard_rss_bytes'] if b)} MiB; "
             f"index {', '.join(f'{b / 2**20:.0f}' for b in row['shard_index_bytes'])} MiB",
             f"  same placements as one Fleet: {row['same_placements']}"]
    return "\n".join(lines)
