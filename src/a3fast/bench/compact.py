"""Explanations at fleet scale, measured: the compact trace's size against the spec trace, encoding
and verifying speed, and a repeated task served from the explanation cache.

All figures come from one run on the standard workload (1,000 agents, 1,000 placements by
default), medians of interleaved repeats; the spec JSON trace is the baseline measured beside them.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import orjson

from ..engines import default_engine
from ..fleet import Fleet
from ..record.compact import Encoder, decode_trace
from ..record.write import placement_records
from ..schema import parse_requirements
from ..verify import verify_bytes
from ..workload import generate_fleet, generate_tasks

__all__ = ["bench_compact"]


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_compact(agents: int = 1_000, placements: int = 1_000, repeat: int = 5, *, quick: bool = False,
                  engine: str | None = None) -> dict[str, Any]:
    """Compact vs spec trace of `placements` placements on one fleet generation of `agents`."""
    if quick:
        placements, repeat = 100, 2
    engine = engine or default_engine()
    declarations = generate_fleet(agents, 0)
    fleet = Fleet(engine=engine)
    fleet.extend(declarations)
    tasks = [parse_requirements(t) for t in generate_tasks(declarations, placements, 0)]
    done = [fleet.place(t, remember_session=False) for t in tasks]  # one fleet generation

    def spec_trace() -> bytes:
        lines, seq = [], 1
        for p in done:
            for kind, content in placement_records(p):
                lines.append(b'{"seq":%d,"kind":"%s","content":%s}' % (seq, kind.encode(), content))
                seq += 1
        return b"\n".join(lines) + b"\n"

    def compact_trace() -> bytes:
        encoder, lines, seq = Encoder(), [], 1
        for p in done:
            for kind, content in encoder.encode_placement(seq, p):
                lines.append(b'{"seq":%d,"kind":"%s","content":%s}' % (seq, kind.encode(), content))
                seq += 1
        return b"\n".join(lines) + b"\n"

    spec, compact = spec_trace(), compact_trace()
    lossless = list(decode_trace(map(orjson.loads, compact.splitlines()))) == \
        [orjson.loads(line) for line in spec.splitlines()]
    spec_s = _median_time(spec_trace, repeat)
    compact_s = _median_time(compact_trace, repeat)
    verify_spec_s = _median_time(lambda: verify_bytes(spec), repeat)
    verify_compact_s = _median_time(lambda: verify_bytes(compact), repeat)

    def repeated() -> None:
        for t in tasks:
            fleet.place(t, remember_session=False)

    fleet.forget_explanations()
    def cold() -> None:
        fleet.forget_explanations()
        repeated()

    first_s = _median_time(cold, repeat)
    repeated()  # every task's explanation is now cached
    hit_s = _median_time(repeated, repeat)
    n = len(done)
    return {
        "engine": engine, "agents": agents, "placements": n,
        "spec_bytes": len(spec), "compact_bytes": len(compact),
        "size_ratio": len(spec) / len(compact), "lossless": lossless,
        "encode_spec_us": spec_s / n * 1e6, "encode_compact_us": compact_s / n * 1e6,
        "verify_spec_us": verify_spec_s / n * 1e6, "verify_compact_us": verify_compact_s / n * 1e6,
        "verify_speedup": verify_spec_s / verify_compact_s,
        "place_uncached_us": first_s / n * 1e6, "place_cache_hit_us": hit_s / n * 1e6,
    }
