"""Fleets of a million: what the large-fleet targets name, each step in a process of its own.

At a size of `BenchConfig.large_from` agents or more, `a3fast bench` does not run the per-size
scenarios and baselines (the baselines alone would take hours); it measures how a scheduler gets
and keeps such a fleet, from a JSON Lines file of the standard workload written to a temp dir:

1. `write`: generate the workload (declarations and tasks) and write it out. A process of its own,
   because the declarations as Python dicts take several GiB that no later step should inherit.
2. `decode`: the floor any reader of the file stands on, in a process of its own: reading the file
   and decoding every line with orjson, keeping nothing (what `ready` is quoted against).
3. `ready`: `Fleet.load_jsonl` (time, peak RSS when the fleet is ready), then placements with a
   compact record from prepared requirements (each task's best of interleaved rounds, median, as
   the (b) scenario), then `fleet.save` of its snapshot (time, bytes, the process's peak after it).
4. `load`: `Fleet.load` of that snapshot in a fresh process (time, peak RSS).

`python -m a3fast.bench.large STEP ...` runs one step and prints its figures as one JSON object.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["bench_large"]

FLEET, TASKS, SNAPSHOT = "fleet.jsonl", "tasks.json", "fleet.snapshot"


def _write(directory: str, n_agents: int, n_tasks: int, seed: int) -> dict[str, Any]:
    import orjson

    from ..workload import generate_fleet, generate_tasks

    started = time.perf_counter()
    declarations = generate_fleet(n_agents, seed)
    with open(os.path.join(directory, FLEET), "wb") as out:
        for decl in declarations:
            out.write(orjson.dumps(decl) + b"\n")
    with open(os.path.join(directory, TASKS), "wb") as out:
        out.write(orjson.dumps(generate_tasks(declarations, n_tasks, seed)))
    return {"seconds": time.perf_counter() - started,
            "jsonl_bytes": os.path.getsize(os.path.join(directory, FLEET))}


def _decode(directory: str) -> dict[str, Any]:
    import orjson

    loads = orjson.loads
    started = time.perf_counter()
    with open(os.path.join(directory, FLEET), "rb", buffering=1 << 20) as fh:
        for line in fh:
            loads(line)
    return {"decode_s": time.perf_counter() - started}


def _ready(directory: str, engine: str, rounds: int, budget_s: float) -> dict[str, Any]:
    import orjson

    from ..fleet import Fleet
    from ..schema import parse_requirements
    from .harness import measure_cells
    from .memory import peak_rss

    started = time.perf_counter()
    fleet = Fleet.load_jsonl(os.path.join(directory, FLEET), engine)
    ready_s = time.perf_counter() - started
    ready_peak = peak_rss()

    with open(os.path.join(directory, TASKS), "rb") as fh:
        tasks = [parse_requirements(doc) for doc in orjson.loads(fh.read())]

    def place(req):
        placement = fleet.place(req, remember_session=False)
        fleet.forget_explanations()      # a task met afresh, as the (b) scenario
        return placement

    cell, = measure_cells(len(fleet), "place", [(engine, place)], tasks, rounds=rounds,
                          budget_s=budget_s, min_tasks=3)
    path = os.path.join(directory, SNAPSHOT)
    started = time.perf_counter()
    fleet.save(path)
    save_s = time.perf_counter() - started
    return {"agents": len(fleet), "engine": fleet.engine, "ready_s": ready_s, "ready_peak_rss": ready_peak,
            "place_ns": cell.median_ns, "place_tasks": cell.tasks, "save_s": save_s,
            "snapshot_bytes": os.path.getsize(path), "save_peak_rss": peak_rss()}


def _load(directory: str, engine: str) -> dict[str, Any]:
    from ..fleet import Fleet
    from .memory import peak_rss

    started = time.perf_counter()
    fleet = Fleet.load(os.path.join(directory, SNAPSHOT), engine)
    load_s = time.perf_counter() - started
    return {"agents": len(fleet), "load_s": load_s, "load_peak_rss": peak_rss()}


def _step(*args: Any) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "a3fast.bench.large", *map(str, args)],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"a3fast.bench.large {args[0]} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def bench_large(n_agents: int, engine: str = "native", *, tasks: int = 200, seed: int = 0, rounds: int = 7,
                budget_s: float = 2.0) -> dict[str, Any]:
    """The large-fleet figures for `n_agents` of the standard workload (see module doc)."""
    with tempfile.TemporaryDirectory(prefix="a3fast-large-") as tmp:
        written = _step("write", tmp, n_agents, tasks, seed)
        decoded = _step("decode", tmp)
        ready = _step("ready", tmp, engine, rounds, budget_s)
        loaded = _step("load", tmp, engine)
    if ready["agents"] != n_agents or loaded["agents"] != n_agents:
        raise AssertionError(f"{n_agents} agents written, {ready['agents']} ready from JSON Lines, "
                             f"{loaded['agents']} loaded from the snapshot")
    return {"agents": n_agents, "engine": ready["engine"], "write_s": written["seconds"],
            "jsonl_bytes": written["jsonl_bytes"], "decode_s": decoded["decode_s"], **{k: v for k, v in ready.items() if k not in ("agents", "engine")},
            "load_s": loaded["load_s"], "load_peak_rss": loaded["load_peak_rss"]}


if __name__ == "__main__":
    step, args = sys.argv[1], sys.argv[2:]
    if step == "write":
        figures = _write(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif step == "decode":
        figures = _decode(args[0])
    elif step == "ready":
        figures = _ready(args[0], args[1], int(args[2]), float(args[3]))
    elif step == "load":
        figures = _load(args[0], args[1])
    else:
        raise SystemExit(f"a3fast.bench.large: unknown step {step!r} (write, decode, ready, load)")
    print(json.dumps(figures))
