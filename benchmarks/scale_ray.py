"""Measurements behind docs/scale.md: a ShardedFleet on a local Ray against one Fleet, and trace
archives verified on Ray tasks against serially. Bounded; prints one JSON object.

    python benchmarks/scale_ray.py --agents 100000 --shards 4 --placements 200 --traces 8

Every number is a median (p50) or p90 over the repetitions, measured in this one run, beside Ray's
own round-trip floor (a no-op actor call, and a no-op call to every shard at once).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import ray

import a3fast
from a3fast.distributed import ShardedFleet, verify_archive
from a3fast.record.write import placement_records
from a3fast.trace import TraceWriter
from a3fast.verify import verify_file
from a3fast.workload import generate_fleet, generate_tasks


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def ms(ns_values):
    return {"p50_ms": round(pct(ns_values, 0.5) / 1e6, 4), "p90_ms": round(pct(ns_values, 0.9) / 1e6, 4)}


@ray.remote(num_cpus=0)
class Noop:
    def call(self, x=None):
        return x


def round_trip_floor(shards: int, n: int) -> dict:
    actors = [Noop.remote() for _ in range(shards)]
    ray.get([a.call.remote() for a in actors])
    one, every = [], []
    for _ in range(n):
        t = time.perf_counter_ns()
        ray.get(actors[0].call.remote())
        one.append(time.perf_counter_ns() - t)
    for _ in range(n):
        t = time.perf_counter_ns()
        ray.get([a.call.remote() for a in actors])
        every.append(time.perf_counter_ns() - t)
    for a in actors:
        ray.kill(a)
    return {"one_actor": ms(one), f"all_{shards}_actors": ms(every)}


def sharded_placements(declarations, tasks, shards: int) -> dict:
    started = time.perf_counter()
    fleet = ShardedFleet(shards=shards, state_dir=tempfile.mkdtemp(prefix="a3fast-scale-"))
    made = time.perf_counter()
    step = 50_000
    for i in range(0, len(declarations), step):
        fleet.extend(declarations[i:i + step])
    loaded = time.perf_counter()
    for t in tasks[:10]:                         # warm: first placements of a task kind
        fleet.place(t, remember_session=False)
    total, gather, decide, shard_max, record = [], [], [], [], []
    bound = 0
    for t in tasks:
        t0 = time.perf_counter_ns()
        p = fleet.place(t, remember_session=False)
        t1 = time.perf_counter_ns()
        total.append(t1 - t0)
        gather.append(p.gather_ns)
        decide.append(p.select_ns)
        shard_max.append(max(a.explain_ns for a in p.explanation._answers))
        t2 = time.perf_counter_ns()
        for _ in placement_records(p):
            pass
        record.append(time.perf_counter_ns() - t2)
        bound += p.bound
    states = fleet.shard_states()
    out = {
        "shards": shards, "agents": len(declarations), "start_s": round(made - started, 2),
        "load_s": round(loaded - made, 2), "bound": bound, "placements": len(tasks),
        "placement": ms(total), "gather": ms(gather), "decide_merge": ms(decide),
        "slowest_shard_explain": ms(shard_max),
        "transport_and_coordinator": ms([g - s for g, s in zip(gather, shard_max)]),
        "records_with_merge": ms(record),
        "per_shard": [{"live": s["live"], "rss_mib": round(s["rss_bytes"] / 2**20, 1),
                       "index_mib": round(s["index_nbytes"] / 2**20, 1)} for s in states],
    }
    fleet.close()
    return out


def single_placements(declarations, tasks) -> dict:
    fleet = a3fast.Fleet()
    fleet.extend(declarations)
    for t in tasks[:10]:
        fleet.place(t, remember_session=False)
    total, record = [], []
    for t in tasks:
        t0 = time.perf_counter_ns()
        p = fleet.place(t, remember_session=False)
        total.append(time.perf_counter_ns() - t0)
        t1 = time.perf_counter_ns()
        for _ in placement_records(p):
            pass
        record.append(time.perf_counter_ns() - t1)
    return {"agents": len(declarations), "placement": ms(total), "records": ms(record),
            "index_mib": round(fleet.index_nbytes() / 2**20, 1)}


def archive(n_files: int, agents: int, tasks: int, root: Path) -> dict:
    paths = []
    for seed in range(n_files):
        declarations = generate_fleet(agents, seed)
        fleet = a3fast.Fleet()
        fleet.extend(declarations)
        path = root / f"trace-{seed}.jsonl"
        with open(path, "wb") as fh:
            writer = TraceWriter(fh)
            for t in generate_tasks(declarations, tasks, seed):
                for kind, content in placement_records(fleet.place(t)):
                    writer.append(kind, content_json=content)
        paths.append(str(path))
    size = sum(os.path.getsize(p) for p in paths)
    serial, parallel = [], []
    for _ in range(3):
        t = time.perf_counter()
        expected = [verify_file(p) for p in paths]
        serial.append(time.perf_counter() - t)
        t = time.perf_counter()
        got = [r.findings for r in verify_archive(paths)]
        parallel.append(time.perf_counter() - t)
        assert got == expected
    s, p = statistics.median(serial), statistics.median(parallel)
    return {"files": n_files, "mib": round(size / 2**20, 1), "serial_s": round(s, 3),
            "ray_2_workers_s": round(p, 3), "speedup": round(s / p, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--placements", type=int, default=200)
    ap.add_argument("--traces", type=int, default=8)
    ap.add_argument("--trace-agents", type=int, default=2000)
    ap.add_argument("--trace-tasks", type=int, default=1500)
    ap.add_argument("--skip-single", action="store_true")
    args = ap.parse_args()
    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    out = {"ray": ray.__version__, "cpus": os.cpu_count(), "ray_start_s": round(time.perf_counter() - t, 2)}
    out["round_trip_floor"] = round_trip_floor(args.shards, 300)
    declarations = generate_fleet(args.agents, 0)
    tasks = generate_tasks(declarations, args.placements, 1)
    out["sharded"] = sharded_placements(declarations, tasks, args.shards)
    if not args.skip_single:
        out["single"] = single_placements(declarations, tasks)
    del declarations
    if args.traces:
        with tempfile.TemporaryDirectory() as root:
            out["archive"] = archive(args.traces, args.trace_agents, args.trace_tasks, Path(root))
    ray.shutdown()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
