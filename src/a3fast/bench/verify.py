"""Measuring the verifier (§7) against the plain alternative — `json.loads` per record and a literal
reading of §7 in plain Python — and against the JSON floor: msgspec decoding alone and orjson
loads alone over the same file, line by line, checking nothing. A verifier that reads every record
cannot be faster than the faster of the two; its share of that floor is what is left to win.

The trace is synthetic and written straight in the §6 form, so the measurement depends on nothing but
the verifier: each placement is task.submitted, task.admitted and a task.bound over `candidates`
agents of which about a third are eligible (~100 KB of spec JSON at 1,000 candidates).
"""
from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import msgspec
import orjson

from ..predicates import satisfies
from ..schema import SchemaError, parse_declaration, parse_requirements
from ..trace import TraceWriter
from ..verify import verify_file

__all__ = ["write_bench_trace", "plain_verify", "bench_verify"]

_REQUIREMENTS = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
                 "clearances": ["orders.read"], "residency": "eu", "model": {"latency_class": "interactive"}}
_PREDICATES = list(parse_requirements(_REQUIREMENTS).predicates)


def _declaration(name: str) -> dict[str, Any]:
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"},
            "capabilities": [{"name": "order.investigate", "version": 2},
                             {"name": "case.summarise", "version": 1}],
            "clearances": ["orders.read", "customers.read"], "residency": ["eu"],
            "model": {"latency_class": "interactive", "cost_ceiling_usd": "0.75"}}


def write_bench_trace(path: str | os.PathLike, placements: int = 1000, candidates: int = 1000,
                      seed: int = 7) -> int:
    """Write a valid trace of `placements` placements; returns its size in bytes."""
    rnd = random.Random(seed)
    names = [f"agent-{i:05d}" for i in range(candidates)]
    with TraceWriter(path) as out:
        for i in range(placements):
            chosen = names[i % candidates]
            failed, scores = [], {}
            for name in names:
                if name == chosen or rnd.random() < 0.33:
                    scores[name] = {"total": round(rnd.random(), 6), "affinity": 0,
                                    "success_rate": round(rnd.random(), 4),
                                    "cost": round(rnd.random(), 4), "substantiated": 1}
                else:
                    failed.append({"candidate": name, "predicate": rnd.choice(_PREDICATES)})
            out.append("task.submitted", {"goal": f"Investigate order A-{i}", "requirements": _REQUIREMENTS})
            out.append("task.admitted", {"agent": {"name": chosen, "namespace": "support"}})
            out.append("task.bound", {"instance": f"task-{i}", "runtime": "node-a1", "scheduling": {
                "requirements": _REQUIREMENTS, "declaration": _declaration(chosen), "candidates": names,
                "filters_passed": _PREDICATES, "filters_failed": failed, "scores": scores,
                "timings": {"gather_ms": 0.21, "select_ms": 0.83, "decided_at": "2025-01-01T00:00:00Z"}}})
    return Path(path).stat().st_size


def plain_verify(lines: Iterable[bytes]) -> list[tuple[str, int]]:
    """The baseline: `json.loads` each line and read §7 literally (full placements only)."""
    errors: list[tuple[str, int]] = []
    asked: list[str] = []
    admitted = None
    for line in lines:
        record = json.loads(line)
        seq, kind, content = record["seq"], record["kind"], record["content"]
        if kind == "task.submitted":
            asked = list(parse_requirements(content.get("requirements") or {}).predicates)
        elif kind == "task.admitted":
            admitted = content["agent"]
        elif kind == "task.bound":
            s = content.get("scheduling")
            try:
                req = parse_requirements(s["requirements"])
                decl = parse_declaration(s["declaration"])
            except (SchemaError, KeyError, TypeError):
                errors.append(("E_STRUCTURE", seq))
                continue
            if {"name": decl.agent.name, "namespace": decl.agent.namespace} != admitted:
                errors.append(("E_DECLARATION_SCOPE", seq))
            matched = list(req.predicates)
            if not set(asked) <= set(matched) or ("route" not in s and set(matched) != set(asked)):
                errors.append(("E_REQUIREMENTS_MISMATCH", seq))
            errors += [("E_UNMET", seq) for p in matched if not satisfies(decl, p)]
            name = decl.agent.name
            if (set(s["filters_passed"]) != set(matched)
                    or any(f["candidate"] == name for f in s["filters_failed"])
                    or name not in s["scores"]):
                errors.append(("E_EXPLANATION", seq))
    return errors


def _timed_interleaved(fns: dict[str, Any], repeat: int) -> dict[str, tuple[list[float], list[float]]]:
    """Wall-clock and CPU seconds of each run of each function, round by round (one run of each per
    round), so that a burst of load on a shared machine lands on all of them. The wall clock also
    counts the time other processes held the core; CPU time is this process's own."""
    out: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            out[name][0].append(time.perf_counter() - start)
            out[name][1].append(time.process_time() - start_cpu)
    return out


def _decode_each_line(path: str, decode) -> None:
    """The JSON floor: read the file line by line as the verifier does and decode every line."""
    with open(path, "rb", buffering=1 << 20) as fh:
        for line in fh:
            decode(line)


# The child reads its own peak (VmHWM on Linux): getrusage's ru_maxrss survives exec, so a child of
# a large process (a3fast bench) would report its parent's size.
_PEAK_RSS_CHILD = """
import sys
from a3fast.bench.memory import peak_rss
from a3fast.verify import verify_file
findings = verify_file(sys.argv[1])
assert not findings, findings[:3]
print(peak_rss())
"""


def _peak_rss_mb(path: str) -> float:
    """Peak resident memory of a fresh process that verifies `path`, in MB."""
    out = subprocess.run([sys.executable, "-c", _PEAK_RSS_CHILD, path], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip()) / 2**20


#: The smoke-test size (`quick=True`): every step once, in about a second.
QUICK = {"placements": 40, "candidates": 300, "repeat": 1}


def bench_verify(placements: int = 1000, candidates: int = 1000, repeat: int = 3, *,
                 quick: bool = False) -> dict[str, Any]:
    """Verify a generated trace `repeat` times; medians of MB/s and records/s, the baseline's MB/s,
    and the peak RSS of verifying the whole trace and a tenth of it (memory must not grow with it).
    `quick` runs a small trace once, as a smoke test."""
    if quick:
        placements, candidates, repeat = QUICK["placements"], QUICK["candidates"], QUICK["repeat"]
    with tempfile.TemporaryDirectory(prefix="a3fast-bench-") as tmp:
        full = os.path.join(tmp, "trace.jsonl")
        tenth = os.path.join(tmp, "trace-tenth.jsonl")
        size = write_bench_trace(full, placements, candidates)
        write_bench_trace(tenth, max(1, placements // 10), candidates)
        records = 3 * placements
        findings = verify_file(full)
        if findings:
            raise AssertionError(f"the benchmark trace must verify clean: {findings[0]}")

        def baseline() -> None:
            with open(full, "rb") as fh:
                if plain_verify(fh):
                    raise AssertionError("the baseline found errors in a valid trace")

        runs = _timed_interleaved({
            "verify": lambda: verify_file(full),
            "msgspec": lambda: _decode_each_line(full, msgspec.json.Decoder().decode),
            "orjson": lambda: _decode_each_line(full, orjson.loads),
            "baseline": baseline,
        }, repeat)
        wall = {name: statistics.median(w) for name, (w, _) in runs.items()}
        cpu = {name: statistics.median(c) for name, (_, c) in runs.items()}
        verify_s, base_s, verify_cpu_s, base_cpu_s = wall["verify"], wall["baseline"], cpu["verify"], cpu["baseline"]
        floor = min(wall["msgspec"], wall["orjson"])
        return {
            "placements": placements, "candidates": candidates, "records": records,
            "bytes": size, "repeat": repeat,
            "seconds": verify_s,
            "mb_per_s": size / verify_s / 1e6,
            "records_per_s": records / verify_s,
            "cpu_mb_per_s": size / verify_cpu_s / 1e6,
            "baseline": "json.loads + plain-Python §7",
            "baseline_seconds": base_s,
            "baseline_mb_per_s": size / base_s / 1e6,
            "baseline_cpu_mb_per_s": size / base_cpu_s / 1e6,
            "speedup": base_s / verify_s,
            "msgspec_mb_per_s": size / wall["msgspec"] / 1e6,
            "orjson_mb_per_s": size / wall["orjson"] / 1e6,
            "msgspec_cpu_mb_per_s": size / cpu["msgspec"] / 1e6,
            "orjson_cpu_mb_per_s": size / cpu["orjson"] / 1e6,
            # verify's speed as a share of the faster JSON floor (1.0: as fast as decoding alone)
            "share_of_json_floor": floor / verify_s,
            "cpu_share_of_json_floor": min(cpu["msgspec"], cpu["orjson"]) / verify_cpu_s,
            "peak_rss_mb": _peak_rss_mb(full),
            "peak_rss_mb_tenth": _peak_rss_mb(tenth),
        }
