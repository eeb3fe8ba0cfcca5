"""Placements through `a3fast serve --stdio`, pipelined, beside the same placements in process.

1,000 agents of the standard workload; the same tasks, compact records, in every subject:

- in process: `Fleet.place` then `Encoder.encode_placement_lines`, the record lines as the service
  writes them (the floor: what a placement costs without any protocol);
- over stdio, pipelined: every place request written at once to one `a3fast serve --stdio`
  process (a writer thread), the answers read as they come; placements per second is the requests
  over the time from the first write to the last answer read, and the service's CPU time per
  placement is read from the process's own counters (the machine is shared: wall time includes
  the waits of a loaded machine, CPU time does not);
- the same requests answered by `serve_stdio_sync` in this process, from memory to memory: the
  service's own cost without pipes or a second process (`service_own_cpu_us`: its CPU a placement
  beyond `Fleet.place` alone, timed as one more subject — parsing, compact records, the trace and
  the response are all the service's own; `records_cpu_us` is the in-process compact records' share).

`served_repeated` is the same in-process service over requests whose tasks repeat (the first 100
task types of the workload, in turn): their requirements are parsed once and then looked up by
their text (`a3fast.prepared`), where the standard workload's tasks are nearly all distinct.
`service_beyond_records_cpu_us` is the service's own CPU beyond `Fleet.place` and the compact
records together (the part the service shell itself adds).

The requests ask for `compact-stream` records (a fleet snapshot goes down the stream once, as a
pipelining client reads the answers in order); `stdio_alone_*` is the same stream asking for
`compact`, where every answer carries the snapshot it needs (~15 KB of names at 1,000 agents).

Rounds alternate the subjects; each figure is the median of the rounds. Nothing here is asserted
on time: the rows are printed beside their targets.
"""
from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import orjson

from .processes import cpu_of

__all__ = ["bench_pipelined", "AGENTS", "request_lines"]

AGENTS = 1_000
#: distinct task types of the `served_repeated` subject
REPEATED_TYPES = 100


def request_lines(tasks: list[dict[str, Any]], record: str = "compact-stream") -> bytes:
    return b"".join(orjson.dumps({"op": "place", "id": i, "requirements": t, "record": record}) + b"\n"
                    for i, t in enumerate(tasks))


def _placed_only(fleet_docs, tasks) -> tuple[float, float]:
    """(wall s, CPU s) for `Fleet.place` of each task alone: what the service path's own cost is
    counted over."""
    from ..fleet import Fleet

    fleet = Fleet()
    fleet.extend(fleet_docs)
    wall, cpu = time.perf_counter(), time.process_time()
    for task in tasks:
        fleet.place(task)
    return time.perf_counter() - wall, time.process_time() - cpu


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
        lines, count = encoder.encode_placement_lines(seq, p)
        out.append(lines)
        seq += count
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

    state = ServiceState(settle=True)         # as `a3fast serve` runs it
    state.open()
    try:
        ops = Operations(state, stream=True, counted=False)
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
    streamed, alone = request_lines(work), request_lines(work, "compact")
    repeated = request_lines([work[i % min(n, REPEATED_TYPES)] for i in range(n)])
    subjects: dict[str, Callable[[], tuple[float, float]]] = {
        "placed_only": lambda: _placed_only(fleet_docs, work),
        "in_process": lambda: _in_process(fleet_docs, work),
        "stdio": lambda: _over_stdio(load, streamed, n),
        "stdio_alone": lambda: _over_stdio(load, alone, n),
        "served": lambda: _served_in_process(fleet_docs, streamed),
        "served_repeated": lambda: _served_in_process(fleet_docs, repeated),
    }
    figures: dict[str, list[float]] = {f"{name}_{k}": [] for name in subjects for k in ("wall", "cpu")}
    for _ in range(rounds):
        for name, subject in subjects.items():
            wall, cpu = subject()
            figures[f"{name}_wall"].append(wall)
            figures[f"{name}_cpu"].append(cpu)
    med = {k: statistics.median(v) for k, v in figures.items()}
    us = lambda s: s / n * 1e6  # noqa: E731
    return {
        "agents": AGENTS, "placements": n, "rounds": rounds,
        "stdio_per_s": n / med["stdio_wall"],
        "stdio_us": us(med["stdio_wall"]), "stdio_service_cpu_us": us(med["stdio_cpu"]),
        "stdio_alone_per_s": n / med["stdio_alone_wall"],
        "stdio_alone_us": us(med["stdio_alone_wall"]), "stdio_alone_service_cpu_us": us(med["stdio_alone_cpu"]),
        "in_process_us": us(med["in_process_wall"]), "in_process_cpu_us": us(med["in_process_cpu"]),
        "served_in_process_us": us(med["served_wall"]), "served_in_process_cpu_us": us(med["served_cpu"]),
        "x_in_process": med["stdio_wall"] / med["in_process_wall"],
        "cpu_x_in_process": med["stdio_cpu"] / med["in_process_cpu"],
        "place_cpu_us": us(med["placed_only_cpu"]),
        "records_cpu_us": us(med["in_process_cpu"] - med["placed_only_cpu"]),
        "service_own_cpu_us": us(med["served_cpu"] - med["placed_only_cpu"]),
        "service_beyond_records_cpu_us": us(med["served_cpu"] - med["in_process_cpu"]),
        "served_repeated_cpu_us": us(med["served_repeated_cpu"]),
        "load_average": os.getloadavg()[0],
    }


if __name__ == "__main__":      # python -m a3fast.bench.pipelined [tasks] [rounds]
    args = [int(a) for a in sys.argv[1:3]]
    figures = bench_pipelined(False, *args)
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
