"""HTTP placements against their floor: a raw ASGI echo on the same server stack, in the same run.

1,000 agents of the standard workload, the same place requests (`{"requirements": task}`) for both
subjects, one keep-alive client (`bench.http_client`, a bounded number of connections, bounded in
requests and in time) in this process, apart from both servers:

- the floor: `bench.asgi_echo`, a raw ASGI app that reads the request body, decodes it and answers
  it back as JSON, served by `service.server.uvicorn_server` as `a3fast serve` is (a process of its
  own, 127.0.0.1, a free port);
- `a3fast serve --state TMP --fsync never --fleet F` (a real process, the CLI as a user runs it)
  answering `POST /v1/place?record=compact` with the placement and its compact records.

A third subject sends the same single requests as a client that keeps the fleet's snapshot does:
each sends back the fleet token an earlier answer gave (`?record=compact&fleet=TOKEN`, taken afresh
before each of its rounds), so its answers refer to that answer's record rather than carry the
fleet's names again. A fourth, the same service answering the same tasks BATCH_SIZE to a request (a
JSON array of place requests, `POST /v1/place?record=compact`), counts placements per second
against the echo's requests per second; a fifth sends the same arrays asking for
`?record=compact-stream`, as a client that reads a response's answers in order does: the fleet's
names go down once a response rather than once an answer.

Rounds alternate the subjects; each figure is the median of the rounds. The servers' CPU time per
request is read from their own counters (the machine is shared: wall time includes the waits of a
loaded machine, CPU time does not). Then a fixed-rate phase: 1,000 requests/s, open loop (latency
counted from when each request was due), against the echo (its floor on this machine at that
moment) and then the same `a3fast serve --fsync never`. For where
a placement's time goes, the same requests are answered by the service path alone in this process
(`Operations.place`, JSON in and out, no HTTP). Nothing here is asserted on time: the rows are
printed beside their targets.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from .http_client import closed_loop, fixed_rate, percentile, request_bytes, run
from .processes import ServedProcess, serve_process

__all__ = ["bench_http", "AGENTS", "PLACE_PATH", "FIXED_RATE", "BATCH_SIZE"]

AGENTS = 1_000
PLACE_PATH = "/v1/place?record=compact"
#: the same, each response's answers one slice (a snapshot carried once a response)
STREAM_PATH = "/v1/place?record=compact-stream"
#: requests per second of the fixed-rate phase
FIXED_RATE = 1_000
#: place requests in one request of the batch subject
BATCH_SIZE = 20


def _service_path_us(fleet_docs, bodies: list[bytes], count: int) -> tuple[float, float]:
    """(wall µs, CPU µs) a placement takes through the service path in this process: the body
    read as the HTTP handler reads it (typed, its requirements looked up by their text),
    `Operations.place` with compact records, the answer encoded (no HTTP)."""
    from ..schema import parse_declaration
    from ..service.operations import Operations, decode_place_request
    from ..service.state import ServiceState

    state = ServiceState()
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in fleet_docs])
        ops = Operations(state)

        async def place_all() -> None:
            for k in range(count):
                typed = decode_place_request(bodies[k % len(bodies)])
                assert typed is not None      # the workload's bodies are all read typed
                body = ops.prepared_place(typed)
                assert body is not None
                body.record = "compact"
                (await ops.place(body)).framed(b'{"records":', b"}")
        wall, cpu = time.perf_counter(), time.process_time()
        asyncio.run(place_all())
        return (time.perf_counter() - wall) / count * 1e6, (time.process_time() - cpu) / count * 1e6
    finally:
        state.close()


def _saturate(server: ServedProcess, requests: list[bytes], count: int, seconds: float,
              connections: int) -> dict[str, float]:
    cpu = server.cpu_s()
    measured = run(closed_loop(server.port, requests, count, seconds, connections))
    served = server.cpu_s() - cpu
    n = max(measured.answered, 1)
    return {"per_s": measured.per_s, "answered": measured.answered, "server_cpu_us": served / n * 1e6,
            "client_cpu_us": measured.client_cpu_s / n * 1e6,
            "p50_ms": percentile(measured.latencies_s, 0.5) * 1e3,
            "p99_ms": percentile(measured.latencies_s, 0.99) * 1e3}


def _answer(server: ServedProcess, path: str, body: bytes) -> tuple[int, str | None]:
    """The length of the answer to one POST, and its fleet token (`A3-Fleet`) if it gave one."""
    import urllib.request

    request = urllib.request.Request(server.url + path, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return len(answer.read()), answer.headers.get("A3-Fleet")


def _answer_bytes(server: ServedProcess, path: str, body: bytes) -> int:
    return _answer(server, path, body)[0]


def _held_path(server: ServedProcess, body: bytes) -> str:
    """The single place request's path sending back the fleet token of an answer placed now. The
    service remembers the last 1,024 tokens it gave, so the held subject takes one again before
    each of its rounds (each answer of the `place` subject carries the table, and is given a new one)."""
    _, token = _answer(server, PLACE_PATH, body)
    if token is None:
        raise RuntimeError("a compact place answer gave no fleet token (A3-Fleet)")
    return f"{PLACE_PATH}&fleet={token}"


def bench_http(quick: bool = False, rounds: int | None = None, requests: int | None = None,
               seconds: float | None = None, connections: int = 16,
               fixed_seconds: float | None = None) -> dict[str, Any]:
    """Placements/s over HTTP beside the echo floor of the same run, and p50/p99 at a fixed rate.

    Each round sends up to `requests` requests (or for at most `seconds`) to each subject in turn."""
    from .. import workload

    rounds = rounds or (1 if quick else 5)
    requests = requests or (1_500 if quick else 10_000)
    seconds = seconds or (1.0 if quick else 4.0)
    fixed_seconds = fixed_seconds or (1.0 if quick else 5.0)
    fleet_docs = workload.generate_fleet(AGENTS, seed=0)
    tasks = workload.generate_tasks(fleet_docs, 200, seed=0)
    bodies = [orjson.dumps({"requirements": t}) for t in tasks]
    echo_requests = [request_bytes("/", b) for b in bodies]
    place_requests = [request_bytes(PLACE_PATH, b) for b in bodies]
    arrays = [b"[" + b",".join(bodies[i:i + BATCH_SIZE]) + b"]" for i in range(0, len(bodies), BATCH_SIZE)]
    batch_requests = [request_bytes(PLACE_PATH, body) for body in arrays]
    stream_requests = [request_bytes(STREAM_PATH, body) for body in arrays]
    figures: dict[str, list[dict[str, float]]] = {"echo": [], "place": [], "held": [], "batch": [], "stream": []}
    out: dict[str, Any] = {"agents": AGENTS, "rounds": rounds, "connections": connections,
                           "requests_per_round": requests, "request_bytes": statistics.median(map(len, bodies)),
                           # the machine's load beside its figures: a shared machine's other work shows in
                           # the latencies of the fixed-rate phase more than anywhere else
                           "cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="a3fast-bench-http-") as tmp:
        fleet_file = Path(tmp) / "fleet.jsonl"
        fleet_file.write_bytes(b"\n".join(orjson.dumps(d) for d in fleet_docs))
        with ServedProcess("a3fast.bench.asgi_echo", banner="a3fast echo serving on ") as echo, \
                serve_process("--state", str(Path(tmp) / "state"), "--fsync", "never",
                              "--fleet", str(fleet_file)) as served:
            served.wait_ready()
            out["echo_answer_bytes"] = _answer_bytes(echo, "/", bodies[0])
            out["place_answer_bytes"] = _answer_bytes(served, PLACE_PATH, bodies[0])
            out["held_answer_bytes"] = _answer_bytes(served, _held_path(served, bodies[0]), bodies[0])
            out["batch_answer_bytes"] = _answer_bytes(served, PLACE_PATH, arrays[0])
            out["stream_answer_bytes"] = _answer_bytes(served, STREAM_PATH, arrays[0])
            # a short untimed pass each: connections, caches and the first trace writes
            for server, reqs in ((echo, echo_requests), (served, place_requests)):
                run(closed_loop(server.port, reqs, min(requests, 300), seconds, connections))
            for _ in range(rounds):
                figures["echo"].append(_saturate(echo, echo_requests, requests, seconds, connections))
                figures["place"].append(_saturate(served, place_requests, requests, seconds, connections))
                held = _held_path(served, bodies[0])
                figures["held"].append(_saturate(served, [request_bytes(held, b) for b in bodies], requests,
                                                 seconds, connections))
                for name, reqs in (("batch", batch_requests), ("stream", stream_requests)):
                    figures[name].append(_saturate(served, reqs, max(requests // BATCH_SIZE, 1), seconds,
                                                   connections))
            out["fixed_load_average"] = os.getloadavg()[0]
            # the echo at the same rate first: the floor of the fixed-rate latencies on this machine now
            cpu = echo.cpu_s()
            echo_fixed = run(fixed_rate(echo.port, echo_requests, FIXED_RATE, fixed_seconds))
            echo_fixed_cpu = echo.cpu_s() - cpu
            cpu = served.cpu_s()
            fixed = run(fixed_rate(served.port, place_requests, FIXED_RATE, fixed_seconds))
            fixed_cpu = served.cpu_s() - cpu
    for subject, measured in figures.items():
        for key in measured[0]:
            out[f"{subject}_{key}"] = statistics.median(m[key] for m in measured)
    out["ratio"] = out["place_per_s"] / out["echo_per_s"] if out["echo_per_s"] else 0.0
    out["held_ratio"] = out["held_per_s"] / out["echo_per_s"] if out["echo_per_s"] else 0.0
    # the batch subjects' figures are per request of BATCH_SIZE placements: per placement here
    out["batch_size"] = BATCH_SIZE
    for name in ("batch", "stream"):
        out[f"{name}_per_s"] *= BATCH_SIZE
        out[f"{name}_server_cpu_us"] /= BATCH_SIZE
        out[f"{name}_ratio"] = out[f"{name}_per_s"] / out["echo_per_s"] if out["echo_per_s"] else 0.0
    out["cpu_ratio"] = out["echo_server_cpu_us"] / out["place_server_cpu_us"] if out["place_server_cpu_us"] else 0.0
    out["service_path_us"], out["service_path_cpu_us"] = _service_path_us(fleet_docs, bodies, min(requests, 2_000))
    out.update({"fixed_rate": FIXED_RATE, "fixed_due": fixed.due, "fixed_answered": len(fixed.latencies_s),
                "fixed_p50_ms": percentile(fixed.latencies_s, 0.5) * 1e3,
                "fixed_p99_ms": percentile(fixed.latencies_s, 0.99) * 1e3,
                "fixed_service_p99_ms": percentile(fixed.service_latencies_s, 0.99) * 1e3,
                "fixed_server_cpu_us": fixed_cpu / max(len(fixed.latencies_s), 1) * 1e6,
                "echo_fixed_answered": len(echo_fixed.latencies_s),
                "echo_fixed_p50_ms": percentile(echo_fixed.latencies_s, 0.5) * 1e3,
                "echo_fixed_p99_ms": percentile(echo_fixed.latencies_s, 0.99) * 1e3,
                "echo_fixed_server_cpu_us": echo_fixed_cpu / max(len(echo_fixed.latencies_s), 1) * 1e6})
    return out


if __name__ == "__main__":      # python -m a3fast.bench.http [--quick]
    print(orjson.dumps(bench_http("--quick" in sys.argv[1:]), option=orjson.OPT_INDENT_2).decode())
