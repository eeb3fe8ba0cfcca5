"""The rule of the caches kept from an entry's second sighting (`a3fast.seen.seen_before`), on both
engines' notes: the compiled `_ingest.Notes` (a table of C integers, which the fleet's caches, the
service's prepared requirements and the compiled requirements reader use) and the pure engine's
`seen.Notes` (a set of ints under `seen.seen_before`) are each held, step for step, to the rule
written out in this file, and read as the set of ints they hold."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from a3fast import seen
from a3fast.engines import ingest_module

HASHES = st.integers(-(2**63), 2**63 - 1)


def test_a_key_is_noted_the_first_time_and_seen_and_taken_back_the_second(engine):
    notes = ingest_module(engine).Notes()
    assert notes.seen_before(7, 4) is False and set(notes) == {7}
    assert notes.seen_before(7, 4) is True and set(notes) == set()
    assert notes.seen_before(7, 4) is False and set(notes) == {7}     # a third sighting starts again


def test_the_notes_are_emptied_once_they_hold_the_limit(engine):
    notes = ingest_module(engine).Notes()
    notes.update({1, 2, 3})
    assert notes.seen_before(4, 3) is False and set(notes) == {4}
    assert notes.seen_before(1, 3) is False and set(notes) == {4, 1}
    assert notes.seen_before(4, 3) is True and set(notes) == {1}
    assert notes.seen_before(-(2**63), 3) is False and -(2**63) in notes     # any hash a key may have
    assert notes.seen_before(0, 3) is False and 0 in notes and len(notes) == 3   # 0 too
    assert notes.seen_before(0, 3) is True and 0 not in notes and len(notes) == 2


def test_what_is_not_a_hash_is_not_in_the_notes_and_cannot_be_noted(engine):
    notes = ingest_module(engine).Notes()
    notes.add(5)
    assert 2**63 not in notes and "5" not in notes and 5.5 not in notes and None not in notes
    notes.discard(2**70)
    notes.discard("5")
    assert set(notes) == {5}
    notes.add(1)
    assert True in notes        # the int 1, as in a set of ints
    if engine == "native":      # a table of 64-bit hashes refuses an int no hash can be
        with pytest.raises(OverflowError):
            notes.seen_before(2**63, 4)


def _literal_rule(notes: set[int], key: int, limit: int) -> bool:
    """The rule as the caches state it, written out here apart from either implementation."""
    if key in notes:
        notes.remove(key)
        return True
    if len(notes) >= limit:
        notes.clear()
    notes.add(key)
    return False


@given(st.lists(HASHES | st.integers(0, 5), max_size=60), st.integers(0, 6))
def test_the_engine_s_rule_is_the_rule_step_for_step(engine, keys, limit):
    ours = ingest_module(engine).Notes()
    expected: set[int] = set()
    for key in keys:
        assert ours.seen_before(key, limit) is _literal_rule(expected, key, limit)
        assert set(ours) == expected and len(ours) == len(expected)


@given(st.lists(st.sampled_from(range(-40, 40)) | HASHES, min_size=200, max_size=600), st.integers(40, 200))
def test_the_rule_holds_as_the_compiled_table_grows_and_keys_are_taken_back_among_neighbours(engine, keys,
                                                                                            limit):
    # small keys crowd neighbouring slots, so taking one back must move the keys that probed past it
    ours = ingest_module(engine).Notes()
    expected: set[int] = set()
    for key in keys:
        assert ours.seen_before(key, limit) is _literal_rule(expected, key, limit)
    assert set(ours) == expected and all(key in ours for key in expected)
    assert not any(key in ours for key in range(-40, 40) if key not in expected)


def test_the_pure_engine_takes_a3fast_seen_s_own_definition():
    assert ingest_module("pure").Notes is seen.Notes
    notes = seen.Notes()
    assert notes.seen_before(3, 2) is seen.seen_before(set(), 3, 2) is False and notes == {3}


def test_notes_are_copied_and_pickled_with_the_hashes_they_hold(engine):
    import copy
    import pickle

    notes = ingest_module(engine).Notes()
    notes.update([0, 7, -(2**63)])
    for again in (pickle.loads(pickle.dumps(notes)), copy.copy(notes), copy.deepcopy(notes)):
        assert type(again) is type(notes) and set(again) == {0, 7, -(2**63)}
        assert again.seen_before(7, 8) is True and 7 in notes      # a copy, not the same table


def _first_home(key: int) -> int:
    """The slot a key starts from in the compiled table's first 16 slots (Fibonacci hashing)."""
    return ((key * 0x9E3779B97F4A7C15) % 2**64) >> 60


def test_keys_of_one_home_slot_are_taken_back_in_any_order_across_the_table_s_end(engine):
    # keys crowding the last slot run over the table's end: each taken back must leave the others
    # reachable from their home, whichever goes first (the table stays at 16 slots for 7 keys)
    last = [k for k in range(1, 10_000) if _first_home(k) == 15][:4]
    first = [k for k in range(1, 10_000) if _first_home(k) == 0][:3]
    keys = last + first
    for order in (keys, keys[::-1], keys[1::2] + keys[::2]):
        notes = ingest_module(engine).Notes()
        expected: set[int] = set()
        for key in keys:
            assert notes.seen_before(key, 100) is _literal_rule(expected, key, 100)
        for key in order:
            assert notes.seen_before(key, 100) is _literal_rule(expected, key, 100) is True
            assert set(notes) == expected and all(k in notes for k in expected)
            assert not any(k in notes for k in keys if k not in expected)
