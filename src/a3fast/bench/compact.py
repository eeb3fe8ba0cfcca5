"""Explanations at fleet scale, measured: the compact trace's size against the spec trace, encoding
and verifying speed, a batch's compact lines against the same lines one placement at a time, and a
repeated task served from the explanation cache.

All figures come from one run on the standard workload (1,000 agents, 1,000 placements by
default), medians of interleaved repeats; the spec JSON trace is the baseline measured beside them.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

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


def _line_writers(placements: list) -> tuple[Callable[[], bytes], Callable[[], bytes]]:
    """Two ways to the same compact lines of `placements`: one placement at a time
    (`encode_placement_lines`), and as one batch (`encode_placements_lines`)."""
    def one_at_a_time() -> bytes:
        encoder, parts, seq = Encoder(), [], 1
        for p in placements:
            lines, count = encoder.encode_placement_lines(seq, p)
            parts.append(lines)
            seq += count
        return b"".join(parts)

    def at_once() -> bytes:
        return Encoder().encode_placements_lines(1, placements)[0]

    return one_at_a_time, at_once


def _alternated(first, second, repeat: int) -> tuple[float, float]:
    """Median seconds of `first` and of `second`, run in turn `repeat` times each, so a neighbour's
    load falls on both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


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

    # the same tasks each with a session given beside its requirements: placements the engine does
    # not gather, each ending a run, so a batch asks the engine again after every one
    others = fleet.place_many(tasks, sessions=[f"bench-{k}" for k in range(len(tasks))], remember_session=False)
    lines_one_at_a_time, lines_at_once = _line_writers(done)
    others_one_at_a_time, others_at_once = _line_writers(others)

    spec, compact = spec_trace(), compact_trace()
    if not lines_at_once() == lines_one_at_a_time() == compact or others_at_once() != others_one_at_a_time():
        raise AssertionError("a batch's compact lines are not the lines written one at a time")
    lossless = list(decode_trace(map(orjson.loads, compact.splitlines()))) == \
        [orjson.loads(line) for line in spec.splitlines()]
    spec_s = _median_time(spec_trace, repeat)
    compact_s = _median_time(compact_trace, repeat)
    # the batch against one at a time, alternated round by round (the baseline beside it)
    one_s, batch_s = _alternated(lines_one_at_a_time, lines_at_once, max(repeat, 5))
    others_one_s, others_batch_s = _alternated(others_one_at_a_time, others_at_once, max(repeat, 5))
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
        "lines_one_us": one_s / n * 1e6, "lines_batch_us": batch_s / n * 1e6, "lines_batch_speedup": one_s / batch_s,
        "others_lines_one_us": others_one_s / n * 1e6, "others_lines_batch_us": others_batch_s / n * 1e6,
        "others_lines_batch_speedup": others_one_s / others_batch_s,
    }
