"""Placements through `a3fast serve --stdio`, pipelined, beside the same placements in process.

1,000 agents of the standard workload; the same tasks, compact records, in both subjects:

- in process: `Fleet.place` then `Encoder.encode_placement` and the record lines joined, as the
  service makes them (the floor: what a placement costs without any protocol);
- over stdio, pipelined: every place request written at once to one `a3fast serve --stdio`
  process (a writer thread), the answers read as they come; placements per second is the requests
  over the time from the first write to the last answer read, and the service's CPU time per
  placement is read from the process's own counters (the machine is shared: wall time includes
  the waits of a loaded machine, CPU time does not);
- the same requests answered by `serve_stdio_sync` in this process, from memory to memory: the
  service's own cost without pipes or a second process.

Rounds alternate the subjects; each figure is the median of the rounds. Nothing here is asserted
on time: the rows are printed beside their targets.
"""
from __future__ import annotations

import io
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import orjson

from .processes import cpu_of

__all__ = ["bench_pipelined", "AGENTS", "request_lines"]

AGENTS = 1_000


def request_lines(tasks: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps({"op": "place", "id": i, "requirements": t, "record": "compact"}) + b"\n"
                    for i, t in enumerate(tasks))


def _in_process(fleet_docs, tasks) -> tuple[float, float]:
    """(wall s, CPU s) for the tasks placed in process with compact records."""
    from ..fleet import Fleet
    from ..record.compact import Encoder

    fleet = Fleet()
    fleet.extend(fleet_docs)
    encoder = Encoder()
    seq = 1
    wall, cpu = time.perf_counter(), time.process_time()
    out = []
    for task in tasks:
        p = fleet.place(task)
        records = encoder.encode_placement(seq, p)
        out.append(b"".join(b'{"seq":%d,"kind":"%s","content":%b}\n' % (seq + k, kind.encode(), content)
                            for k, (kind, content) in enumerate(records)))
        seq += len(records)
    return time.perf_counter() - wall, time.process_time() - cpu


def _over_stdio(load: bytes, requests: bytes, count: int) -> tuple[float, float]:
    """(wall s, service CPU s) for `count` pipelined place requests to a fresh `a3fast serve --stdio`."""
    proc = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=1 << 16)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(load)
        proc.stdin.flush()
        if not orjson.loads(proc.stdout.readline()).get("ok"):
            raise RuntimeError("a3fast serve --stdio refused the fleet")
        cpu = cpu_of(proc.pid)
        stdin = proc.stdin

        def write() -> None:
            stdin.write(requests)
            stdin.flush()

        writer = threading.Thread(target=write)
        started = time.perf_counter()
        writer.start()
        read = 0
        while read < count:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("a3fast serve --stdio stopped answering")
            read += 1
        wall = time.perf_counter() - started
        cpu = cpu_of(proc.pid) - cpu
        writer.join()
        return wall, cpu
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


class _Sink:
    """Standard output that keeps nothing (a pipe's reader, without its cost)."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def _served_in_process(fleet_docs, requests: bytes) -> tuple[float, float]:
    """(wall s, CPU s) for `serve_stdio_sync` answering the requests from memory, in this process."""
    from ..service.operations import Operations
    from ..service.state import ServiceState
    from ..schema import parse_declaration
    from ..service.stdio import serve_stdio_sync

    state = ServiceState()
    state.open()
    try:
        ops = Operations(state)
        state.put_agents([parse_declaration(d) for d in fleet_docs])
        out = _Sink()
        wall, cpu = time.perf_counter(), time.process_time()
        serve_stdio_sync(ops, io.BytesIO(requests), out, len(requests) + 1)  # type: ignore[arg-type]
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        state.close()


def bench_pipelined(quick: bool = False, tasks: int | None = None, rounds: int | None = None) -> dict[str, Any]:
    from .. import workload

    n = tasks or (1_000 if quick else 5_000)
    rounds = rounds or (1 if quick else 3)
    fleet_docs = workload.generate_fleet(AGENTS, seed=0)
    work = workload.generate_tasks(fleet_docs, n, seed=0)
    load = orjson.dumps({"op": "put_agents", "id": "load", "declarations": fleet_docs}) + b"\n"
    requests = request_lines(work)
    figures: dict[str, list[float]] = {k: [] for k in (
        "in_process_wall", "in_process_cpu", "stdio_wall", "stdio_cpu", "served_wall", "served_cpu")}
    for _ in range(rounds):
        wall, cpu = _in_process(fleet_docs, work)
        figures["in_process_wall"].append(wall)
        figures["in_process_cpu"].append(cpu)
        wall, cpu = _over_stdio(load, requests, n)
        figures["stdio_wall"].append(wall)
        figures["stdio_cpu"].append(cpu)
        wall, cpu = _served_in_process(fleet_docs, requests)
        figures["served_wall"].append(wall)
        figures["served_cpu"].append(cpu)
    med = {k: statistics.median(v) for k, v in figures.items()}
    us = lambda s: s / n * 1e6  # noqa: E731
    return {
        "agents": AGENTS, "placements": n, "rounds": rounds,
        "stdio_per_s": n / med["stdio_wall"],
        "stdio_us": us(med["stdio_wall"]), "stdio_service_cpu_us": us(med["stdio_cpu"]),
        "in_process_us": us(med["in_process_wall"]), "in_process_cpu_us": us(med["in_process_cpu"]),
        "served_in_process_us": us(med["served_wall"]), "served_in_process_cpu_us": us(med["served_cpu"]),
        "x_in_process": med["stdio_wall"] / med["in_process_wall"],
        "cpu_x_in_process": med["stdio_cpu"] / med["in_process_cpu"],
    }


if __name__ == "__main__":      # python -m a3fast.bench.pipelined [tasks] [rounds]
    args = [int(a) for a in sys.argv[1:3]]
    figures = bench_pipelined(False, *args)
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
