"""The measurement behind the native engine's working representation (docs/performance.md).

The kernel is explain: for P predicate rows in order, failed[k] = remaining - row[k];
remaining &= row[k]. It runs on the standard workload's real rows (the rows of the workload task
with the most predicates, padded to P=6 with the most common rows), in each representation:

- pyroaring BitMaps, one Python call per operation (the index's exchange form);
- Python ints as bitsets (the pure engine);
- numpy arrays of 64-bit words, one numpy call per operation;
- the native engine (dense 64-bit words for rows with one member per 64 ids, sorted 32-bit ids
  below that, all inside one Cython call);
and, for updates, what keeping one pyroaring BitMap per row in step would add to each agent's
put: one Python call per row it belongs to.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import pytest
from pyroaring import BitMap

from a3fast import Fleet
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.schema import parse_requirements
from a3fast.workload import generate_fleet, generate_tasks

SIZES = tuple(int(n) for n in os.environ.get("A3FAST_BENCH_SIZES", "1000,10000").split(","))
P = 6


@lru_cache(maxsize=None)
def rows_of(size: int):
    """(live ids, P rows as id lists) from the workload, and the native and pure indexes."""
    declarations = generate_fleet(size)
    fleets = {engine: Fleet(engine=engine) for engine in (("native", "pure") if NATIVE_AVAILABLE else ("pure",))}
    for fleet in fleets.values():
        fleet.extend(declarations)
    fleet = fleets["pure"]
    task = max((parse_requirements(t) for t in generate_tasks(declarations, 200)), key=lambda r: len(r.predicates))
    rows = [r for r in fleet.filter_rows(task) if r >= 0]
    common = sorted(range(fleet.index.row_count()), key=lambda r: -len(fleet.index.row_ids(r)))
    rows = (rows + [r for r in common if r not in rows])[:P]
    return rows, fleets


def explain_roaring(live: BitMap, rows: list[BitMap]):
    remaining, failed = live.copy(), []
    for row in rows:
        failed.append(remaining - row)
        remaining &= row
    return remaining, failed


def explain_words(live: np.ndarray, rows: list[np.ndarray]):
    remaining, failed = live.copy(), []
    for row in rows:
        failed.append(remaining & ~row)
        remaining &= row
    return remaining, failed


def words_of(ids: list[int], size: int) -> np.ndarray:
    flags = np.zeros(((size + 63) // 64) * 64, dtype=bool)
    flags[ids] = True
    return np.packbits(flags, bitorder="little").view(np.uint64)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("representation", ["pyroaring", "python ints", "numpy words", "native"])
def test_explain_kernel(benchmark, representation, size):
    rows, fleets = rows_of(size)
    pure = fleets["pure"]._index
    benchmark.group = f"explain kernel, P={P}, {size:,} agents"
    if representation == "native":
        if "native" not in fleets:
            pytest.skip("the a3fast._core extension is not built")
        index = fleets["native"]._index
        expl = benchmark(index.explain, rows, -2, [])
        assert expl.eligible_ids() == pure.explain(rows, -2, []).eligible_ids()
    elif representation == "python ints":
        benchmark(pure.explain, rows, -2, [])
    elif representation == "pyroaring":
        live, bitmaps = BitMap(pure.live_ids()), [BitMap(pure.row_ids(r)) for r in rows]
        remaining, _ = benchmark(explain_roaring, live, bitmaps)
        assert list(remaining) == pure.explain(rows, -2, []).eligible_ids()
    else:
        live, words = words_of(pure.live_ids(), size), [words_of(pure.row_ids(r), size) for r in rows]
        benchmark(explain_words, live, words)


@pytest.mark.parametrize("size", SIZES)
def test_keeping_roaring_rows_in_step(benchmark, size):
    """One agent joining and leaving 25 rows (a typical agent's memberships in the workload), if
    every row were also a pyroaring BitMap kept in step: 50 Python calls."""
    rows, fleets = rows_of(size)
    bitmaps = [BitMap(fleets["pure"]._index.row_ids(r)) for r in range(25)]
    benchmark.group = f"roaring rows kept in step: one put and drop, {size:,} agents"

    def put_and_drop(aid=size + 1):
        for bm in bitmaps:
            bm.add(aid)
        for bm in bitmaps:
            bm.discard(aid)

    benchmark(put_and_drop)
