"""The service measured: `python benchmarks/bench_service.py [--quick]`.

Starts real `a3fast serve` processes on 127.0.0.1 (bounded in count and time) and reports medians:
placements over HTTP with compact records (closed-loop throughput with an async httpx load
generator, then p50/p99 at a fixed 1,000 req/s), over --stdio, Kubernetes filter+prioritize for
5,000 NodeNames, restart time (until /readyz) with 100,000 agents in the state directory, and
in-process Fleet.place on the same fleet and tasks, for the per-request overhead.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from service_process import Server  # noqa: E402

import a3fast  # noqa: E402
from a3fast.workload import generate_fleet, generate_tasks  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def closed_loop(url, bodies, seconds, concurrency=32):
    done = 0
    async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=concurrency)) as client:
        stop = time.perf_counter() + seconds

        async def worker(w):
            nonlocal done
            k = w
            while time.perf_counter() < stop:
                r = await client.post("/v1/place?record=compact", content=bodies[k % len(bodies)])
                assert r.status_code == 200
                done += 1
                k += concurrency
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return done / (time.perf_counter() - started)


async def fixed_rate(url, bodies, rate, count):
    latencies = []
    limits = httpx.Limits(max_connections=256)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def one(k):
            t = time.perf_counter()
            r = await client.post("/v1/place?record=compact", content=bodies[k % len(bodies)])
            assert r.status_code == 200
            latencies.append(time.perf_counter() - t)
        start = time.perf_counter()
        tasks = []
        for k in range(count):
            delay = start + k / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(k)))
        await asyncio.gather(*tasks)
    return latencies


class Report(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        print(f"{key:60s} {value:12.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--restart-agents", type=int, default=100_000)
    args = ap.parse_args()
    seconds = 2 if args.quick else 5
    fleet_docs = generate_fleet(1000, seed=1)
    tasks = generate_tasks(fleet_docs, 200, seed=2)
    bodies = [orjson.dumps({"requirements": t}) for t in tasks]
    report = Report()
    with tempfile.TemporaryDirectory() as tmp:
        fleet_file = Path(tmp) / "fleet.jsonl"
        fleet_file.write_bytes(b"\n".join(orjson.dumps(d) for d in fleet_docs))

        # in process
        fleet = a3fast.Fleet()
        fleet.extend(fleet_docs)
        times = []
        for k in range(2000):
            t = time.perf_counter()
            fleet.place(tasks[k % len(tasks)], remember_session=False)
            times.append(time.perf_counter() - t)
        report["in-process Fleet.place p50 (us)"] = statistics.median(times) * 1e6

        s = Server("--fleet", str(fleet_file), "--state", str(Path(tmp) / "http"), "--fsync", "group")
        try:
            report["HTTP placements/s (32 clients, compact)"] = asyncio.run(closed_loop(s.url, bodies, seconds))
            lat = asyncio.run(fixed_rate(s.url, bodies, 1000, 1000 * seconds))
            report["HTTP p50 at 1,000 req/s (ms)"] = pct(lat, 0.5) * 1e3
            report["HTTP p99 at 1,000 req/s (ms)"] = pct(lat, 0.99) * 1e3
            names = [f"node-{k}" for k in range(5000)]
            k8s = []
            pod = {"metadata": {"name": "p", "uid": "u", "annotations": {
                "a3.dev/requirements": orjson.dumps(tasks[0]).decode()}}}
            client = s.client
            for _ in range(50 if args.quick else 200):
                t = time.perf_counter()
                client.post("/k8s/filter", content=orjson.dumps({"Pod": pod, "NodeNames": names}))
                client.post("/k8s/prioritize", content=orjson.dumps({"Pod": pod, "NodeNames": names}))
                k8s.append(time.perf_counter() - t)
            report["k8s filter+prioritize, 5,000 NodeNames, p50 (ms)"] = statistics.median(k8s) * 1e3
        finally:
            s.stop()

        count = 2000 * seconds
        lines = b"".join(b'{"op":"place","record":"compact",' + bodies[k % len(bodies)][1:] + b"\n"
                         for k in range(count))
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", "--fleet", str(fleet_file)],
                           input=lines, capture_output=True, timeout=300)
        total = time.perf_counter() - t
        assert r.stdout.count(b'"ok":true') == count, r.stderr[-500:]
        report["stdio placements/s (incl. start and 1,000-agent load)"] = count / total

        big = Path(tmp) / "big.jsonl"
        big.write_bytes(b"\n".join(orjson.dumps(d) for d in generate_fleet(args.restart_agents, seed=3)))
        state = Path(tmp) / "big"
        s = Server("--fleet", str(big), "--state", str(state), timeout=600)
        s.stop()                                   # leaves a snapshot
        t = time.perf_counter()
        s = Server("--state", str(state), timeout=600)
        report[f"restart to ready, {args.restart_agents:,} agents (s)"] = time.perf_counter() - t
        s.stop()


if __name__ == "__main__":
    main()
