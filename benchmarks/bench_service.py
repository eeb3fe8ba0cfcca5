"""The service measured: `python benchmarks/bench_service.py [--quick]`.

Real `a3fast serve` processes on 127.0.0.1; every phase is bounded in time and stops by itself even
if the server falls behind (requests still open at the deadline are counted as missed, never
awaited). Load comes from `wrk` when installed (C, keep-alive; its own ceiling is measured against
a trivial route) and otherwise from the asyncio keep-alive client of `a3fast.bench.http_client`,
which also drives the fixed-rate phase (open loop: a request's latency counts from when it was due, so a server that falls behind
shows it). Reports:

- in-process Fleet.place and the in-process service path (Operations.place), the per-request floor;
- HTTP placements/s with compact records at saturation (no state dir, --fsync never/group/always)
  and a trivial route (/healthz) as the HTTP floor;
- p50/p99 at a fixed 1,000 req/s (--fsync group);
- --stdio placements/s (after start);
- Kubernetes filter+prioritize with 5,000 NodeNames, p50;
- restart to /readyz with 100,000 agents in the state directory, with where the time goes.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from service_process import Server  # noqa: E402

import a3fast  # noqa: E402
from a3fast.bench.http_client import HOST, closed_loop, fixed_rate, percentile as pct, request_bytes, run  # noqa: E402
from a3fast.workload import generate_fleet, generate_tasks  # noqa: E402

#: requests a saturation phase sends at most (it stops at its time limit before that)
MAX_REQUESTS = 1_000_000


def wrk(url: str, seconds: int, connections: int, body_file: Path | None) -> dict:
    """Requests/s and latency percentiles from wrk (POST of body_file, or GET)."""
    script = None
    if body_file is not None:
        script = body_file.with_suffix(".lua")
        script.write_text(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                          f'local f = io.open("{body_file}", "rb"); wrk.body = f:read("*a"); f:close()\n')
    args = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if script is not None:
        args[1:1] = ["-s", str(script)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 30).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"non-2xx answers under load: {out}")

    def ms(label):
        value, unit = re.search(rf"{label}\s+([\d.]+)(us|ms|s)", out).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    return {"rate": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": ms(" 50%"), "p99": ms(" 99%")}


class Report:
    def __init__(self):
        self.rows = []

    def __setitem__(self, key, value):
        self.rows.append((key, value))
        print(f"{key:72s} {value:12.2f}", flush=True)


def saturate(report, label, port, requests, body_file, seconds, connections=32, path="/v1/place?record=compact"):
    if shutil.which("wrk"):
        r = wrk(f"http://{HOST}:{port}{path}", seconds, connections, body_file)
        report[f"{label}: per s (wrk, {connections} conns)"] = r["rate"]
        report[f"{label}: p50 / p99 (ms)  p50"] = r["p50"]
        report[f"{label}: p50 / p99 (ms)  p99"] = r["p99"]
    else:
        measured = run(closed_loop(port, requests, MAX_REQUESTS, seconds, connections))
        report[f"{label}: per s (asyncio client, {connections} conns)"] = measured.per_s
        report[f"{label}: p50 (ms)"] = pct(measured.latencies_s, 0.5) * 1e3
        report[f"{label}: p99 (ms)"] = pct(measured.latencies_s, 0.99) * 1e3


def in_process(report, fleet_docs, tasks, bodies):
    fleet = a3fast.Fleet()
    fleet.extend(fleet_docs)
    times = []
    for k in range(3000):
        t = time.perf_counter()
        fleet.place(tasks[k % len(tasks)], remember_session=False)
        times.append(time.perf_counter() - t)
    report["in-process Fleet.place, p50 (us)"] = statistics.median(times) * 1e6

    from a3fast.service.operations import Operations
    from a3fast.service.problems import parse_json
    from a3fast.service.state import ServiceState

    state = ServiceState(None)
    state.open()
    state.put_agents([a3fast.parse_declaration(d) for d in fleet_docs])
    ops = Operations(state)

    async def place_all():
        out = []
        for k in range(3000):
            t = time.perf_counter()
            body = parse_json(bodies[k % len(bodies)])
            body["record"] = "compact"
            (await ops.place(body)).framed(b'{"records":', b"}")    # the answer as the app frames it
            out.append(time.perf_counter() - t)
        return out
    report["in-process service path (parse, place, records, trace, JSON), p50 (us)"] = (
        statistics.median(asyncio.run(place_all())) * 1e6)
    state.close()


def stdio(report, fleet_file, bodies, count):
    lines = [b'{"op":"place","record":"compact",' + bodies[k % len(bodies)][1:] + b"\n" for k in range(count)]
    proc = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--fleet", str(fleet_file)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(120, proc.kill)        # bounded: never waits on a stuck server
    timer.start()
    try:
        proc.stdin.write(lines[0])
        proc.stdin.flush()
        proc.stdout.readline()                     # started and loaded
        t = time.perf_counter()
        writer = threading.Thread(target=lambda: (proc.stdin.write(b"".join(lines)), proc.stdin.close()))
        writer.start()
        ok = sum(b'"ok":true' in proc.stdout.readline() for _ in range(count))
        elapsed = time.perf_counter() - t
        writer.join()
        proc.wait(timeout=30)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    assert ok == count, proc.stderr.read()[-500:]
    report["--stdio placements/s (pipelined, after start)"] = count / elapsed


def k8s(report, tmp, tasks, rounds):
    docs = generate_fleet(5000, seed=4)
    fleet_file = tmp / "k8s.jsonl"
    fleet_file.write_bytes(b"\n".join(orjson.dumps(d) for d in docs))
    names = [d["agent"]["name"] for d in docs]
    s = Server("--fleet", str(fleet_file), timeout=120)
    try:
        times = []
        for k in range(rounds):
            pod = {"metadata": {"name": f"p{k}", "uid": f"u{k}", "annotations": {
                "a3.dev/requirements": orjson.dumps(tasks[k % len(tasks)]).decode()}}}
            body = orjson.dumps({"Pod": pod, "NodeNames": names})
            t = time.perf_counter()
            assert s.client.post("/k8s/filter", content=body).status_code == 200
            assert s.client.post("/k8s/prioritize", content=body).status_code == 200
            times.append(time.perf_counter() - t)
        report["k8s filter+prioritize, 5,000 NodeNames, p50 (ms)"] = statistics.median(times) * 1e3
    finally:
        s.stop()


def restart(report, tmp, agents):
    from a3fast.service.state import ServiceState

    docs = generate_fleet(agents, seed=3)
    state_dir = tmp / "big"
    state = ServiceState(state_dir)
    state.open()
    state.put_agents([a3fast.parse_declaration(d) for d in docs])
    state.close()                                  # leaves a snapshot and an empty journal
    t = time.perf_counter()
    s = Server("--state", str(state_dir), timeout=120)
    report[f"restart to /readyz, {agents:,} agents (s)"] = time.perf_counter() - t
    s.stop()

    # where the time goes, in process
    from a3fast.durable.statedir import StateDir

    t0 = time.perf_counter()
    recovered = StateDir(state_dir).recover()
    t1 = time.perf_counter()
    a3fast.Fleet.load(recovered.snapshot)
    t2 = time.perf_counter()
    report["  of which: recover the state directory (checkpoint, journal) (s)"] = t1 - t0
    report["  of which: Fleet.load of the snapshot the checkpoint names (s)"] = t2 - t1
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import a3fast.service.app, uvicorn"], check=True, timeout=60)
    report["  of which: interpreter start and imports (s)"] = time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="2 s phases instead of 5 s")
    ap.add_argument("--restart-agents", type=int, default=100_000)
    args = ap.parse_args()
    seconds = 2 if args.quick else 5
    fleet_docs = generate_fleet(1000, seed=1)
    tasks = generate_tasks(fleet_docs, 200, seed=2)
    bodies = [orjson.dumps({"requirements": t}) for t in tasks]
    requests = [request_bytes("/v1/place?record=compact", b) for b in bodies]
    report = Report()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fleet_file = tmp / "fleet.jsonl"
        fleet_file.write_bytes(b"\n".join(orjson.dumps(d) for d in fleet_docs))
        body_file = tmp / "body.json"
        body_file.write_bytes(bodies[0])

        in_process(report, fleet_docs, tasks, bodies)

        for label, extra in [("HTTP, no state dir", []),
                             ("HTTP, --fsync never", ["--fsync", "never"]),
                             ("HTTP, --fsync group", ["--fsync", "group"]),
                             ("HTTP, --fsync always", ["--fsync", "always"])]:
            state_args = ["--state", str(tmp / label.split()[-1])] if extra else []
            s = Server("--fleet", str(fleet_file), *state_args, *extra)
            port = int(s.url.rsplit(":", 1)[1])
            try:
                if not extra:
                    saturate(report, "HTTP trivial route GET /healthz", port, [request_bytes("/healthz", None)],
                             None, seconds, path="/healthz")
                saturate(report, f"{label}, placements", port, requests, body_file, seconds)
                if extra == ["--fsync", "group"]:
                    saturate(report, f"{label}, placements", port, requests, body_file, seconds, 128)
                    fixed = run(fixed_rate(port, requests, 1000, seconds))
                    report[f"{label}, 1,000 req/s: p50 (ms)"] = pct(fixed.latencies_s, 0.5) * 1e3
                    report[f"{label}, 1,000 req/s: p99 (ms)"] = pct(fixed.latencies_s, 0.99) * 1e3
                    report[f"{label}, 1,000 req/s: answered of {fixed.due}"] = len(fixed.latencies_s)
            finally:
                s.stop()

        stdio(report, fleet_file, bodies, 5000 * seconds)
        k8s(report, tmp, tasks, 20 if args.quick else 50)
        restart(report, tmp, args.restart_agents)


if __name__ == "__main__":
    main()
