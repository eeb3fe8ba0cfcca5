"""A set's portable Roaring bytes are the same from the native engine's words, from the pure
engine and from pyroaring: each chunk of 65,536 ids in the smallest of its array, bitmap and run
forms, as CRoaring's run_optimize chooses (docs/compact-format.md, "Bitmaps"). Sets are drawn as
alternating gaps and runs, so every form, ties between forms and runs that cross a word or a chunk
all occur."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st
from pyroaring import BitMap

from a3fast import _pure
from a3fast.engines import NATIVE_AVAILABLE

if NATIVE_AVAILABLE:
    from a3fast import _core
pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE and os.environ.get("A3FAST_REQUIRE_NATIVE") != "1",
                                reason="the a3fast._core extension is not built")


def _members(pieces: list[tuple[int, int]]) -> tuple[int, set[int]]:
    """Agents and the members of a set laid out as (gap, run) pairs, in order."""
    at, members = 0, set()
    for gap, run in pieces:
        at += gap
        members.update(range(at, at + run))
        at += run
    return at + 1, members


def _roaring_of(module, n: int, members: set[int]) -> tuple[bytes, bytes]:
    """(eligible, failed) Roaring bytes of an index of `n` agents whose one row holds `members`:
    the members are eligible, every other agent failed that row."""
    index = module.Index()
    index.add_row()
    index.put_many(list(range(n)), [f"a{i}" for i in range(n)], [[0] if i in members else [] for i in range(n)],
                   [0.0] * n)
    expl = index.explain([0], module.NO_AGENT_REF, [])
    return expl.eligible_roaring(), expl.failed_roaring(0)


SPANS = st.lists(st.tuples(st.integers(0, 300), st.integers(1, 300)), max_size=40)
LONG_SPANS = st.lists(st.tuples(st.integers(0, 40_000), st.integers(1, 40_000)), min_size=1, max_size=5)


@settings(max_examples=100, deadline=None)
@given(st.one_of(SPANS, LONG_SPANS))
def test_a_sets_roaring_bytes_are_pyroarings_on_both_engines(pieces):
    n, members = _members(pieces)
    others = set(range(n)) - members
    expected = (BitMap(sorted(members)).serialize() if members else BitMap().serialize(),
                BitMap(sorted(others)).serialize() if others else BitMap().serialize())
    for module in (_core, _pure):
        eligible, failed = _roaring_of(module, n, members)
        assert (eligible, failed) == expected, module.__name__


@pytest.mark.parametrize("members, runs", [
    (set(range(0, 3)), False),                   # 3 ids in 1 run: 6 bytes as runs, 6 as an array: a tie
    (set(range(0, 4)), True),                    # 6 bytes against 8
    ({i for i in range(1000) if i % 97}, True),  # nearly every agent: a run per gap
    (set(range(0, 1000, 2)), False),             # no two consecutive: an array
    ({i for i in range(20_000) if i % 3}, False),                    # 6,667 runs: a bitmap is smaller
    ({k * 4 + j for k in range(2047) for j in range(3)}, True),      # 8,190 bytes of runs against 8,192
    ({k * 4 + j for k in range(2048) for j in range(3)}, False),     # 8,194 against 8,192
    ({i for i in range(300_000) if i % 1000}, True),                 # five chunks of runs: offsets too
    ({i for i in range(150_000) if i % 3} | set(range(150_000, 200_000)), True),   # a bitmap, then runs
])
def test_a_chunk_is_written_as_runs_only_when_they_are_strictly_smaller(members, runs):
    n = max(members) + 2
    expected = BitMap(sorted(members)).serialize()
    for module in (_core, _pure):
        eligible, _ = _roaring_of(module, n, members)
        assert eligible[:2] == (b";0" if runs else b":0"), module.__name__    # cookie 12347 or 12346
        assert eligible == expected, module.__name__
