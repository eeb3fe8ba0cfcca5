"""Replaying a trace, measured end to end: 100,000 compact placements recorded at 1,000 agents,
read, placed again on a fleet with a clearance revoked, compared, and the changes written — against
the recorded decisions, and in baseline mode (placed on the recording fleet too) — beside the time
to only read the same trace (every line decoded by orjson) in the same run, interleaved."""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from ..engines import default_engine
from ..fleet import Fleet, FleetProtocol
from ..replay import ReplaySummary, run_replay
from ..trace import TraceWriter
from ..workload import generate_fleet, generate_tasks

__all__ = ["bench_replay", "REVOKED"]

#: The clearance the replay's new fleet no longer grants (held by about 3% of the standard fleet).
REVOKED = "orders.issue"


def _record(path: Path, agents: int, placements: int, engine: str) -> list[dict[str, Any]]:
    """Write the compact trace of `placements` tasks of the standard workload; returns the fleet."""
    declarations = generate_fleet(agents, 0)
    fleet = Fleet(engine=engine)
    fleet.extend(declarations)
    with open(path, "wb") as fh:
        writer = TraceWriter(fh, form="compact")
        for task in generate_tasks(declarations, placements, 0):
            writer.write(fleet.place(task))
    return declarations


def _read_only(path: Path) -> int:
    lines = 0
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
            lines += 1
    return lines


def _replay_once(path: Path, fleet: FleetProtocol, out: Path, baseline: FleetProtocol | None = None) -> ReplaySummary:
    """What `a3fast replay TRACE --fleet NEW [--baseline CURRENT] -o OUT` does once the fleets are loaded."""
    with open(out, "wb") as fh:
        return run_replay(path, fleet, changes=fh, copy=False, baseline=baseline)[0]


def bench_replay(agents: int = 1_000, placements: int = 100_000, repeat: int = 3, *, quick: bool = False,
                 engine: str | None = None) -> dict[str, Any]:
    """Median seconds (wall and this process's CPU) to replay the trace end to end (against the
    recorded decisions, and with the recording fleet as baseline) and to only read it, interleaved."""
    if quick:
        placements, repeat = 2_000, 1
    engine = engine or default_engine()
    with tempfile.TemporaryDirectory(prefix="a3fast-bench-replay.") as tmp:
        trace, changes = Path(tmp) / "trace.jsonl", Path(tmp) / "changes.jsonl"
        declarations = _record(trace, agents, placements, engine)
        revoked = [{**d, "clearances": [c for c in d["clearances"] if c != REVOKED]} for d in declarations]
        read_s, replay_s, read_cpu, replay_cpu, base_s, base_cpu = [], [], [], [], [], []
        summary = base_summary = ReplaySummary()
        for _ in range(repeat):
            started, cpu = time.perf_counter(), time.process_time()
            _read_only(trace)
            read_s.append(time.perf_counter() - started)
            read_cpu.append(time.process_time() - cpu)
            new = Fleet(engine=engine)     # a fresh fleet each round: a replay holds sessions on it
            new.extend(revoked)
            started, cpu = time.perf_counter(), time.process_time()
            summary = _replay_once(trace, new, changes)
            replay_s.append(time.perf_counter() - started)
            replay_cpu.append(time.process_time() - cpu)
            new, current = Fleet(engine=engine), Fleet(engine=engine)
            new.extend(revoked)
            current.extend(declarations)
            started, cpu = time.perf_counter(), time.process_time()
            base_summary = _replay_once(trace, new, changes, current)
            base_s.append(time.perf_counter() - started)
            base_cpu.append(time.process_time() - cpu)
        size = os.path.getsize(trace)
    replay_median, read_median = statistics.median(replay_s), statistics.median(read_s)
    return {"engine": engine, "agents": agents, "placements": summary.placements, "trace_mb": size / 1e6,
            "changed": summary.changed, "replay_s": replay_median, "read_only_s": read_median,
            "replay_over_read": replay_median / read_median,
            # CPU seconds of this process: what the work costs when other processes share the cores
            "replay_cpu_s": statistics.median(replay_cpu), "read_only_cpu_s": statistics.median(read_cpu),
            "replay_us_per_placement": replay_median / max(summary.placements, 1) * 1e6,
            "replay_cpu_over_read_cpu": statistics.median(replay_cpu) / statistics.median(read_cpu),
            "baseline_changed": base_summary.changed, "baseline_s": statistics.median(base_s),
            "baseline_cpu_s": statistics.median(base_cpu),
            "baseline_cpu_over_read_cpu": statistics.median(base_cpu) / statistics.median(read_cpu)}
