"""The rule of the caches kept from an entry's second sighting (`a3fast.seen.seen_before`), on both
engines: the compiled one (`_ingest.seen_before`, which the service's prepared requirements and the
compiled requirements reader use) and the Python definition the pure engine takes are each held,
step for step, to the rule written out in this file."""
from __future__ import annotations

from hypothesis import given, strategies as st

from a3fast.engines import ingest_module
from a3fast.seen import seen_before as defined


def test_a_key_is_noted_the_first_time_and_seen_and_taken_back_the_second(engine):
    seen_before = ingest_module(engine).seen_before
    notes: set[int] = set()
    assert seen_before(notes, 7, 4) is False and notes == {7}
    assert seen_before(notes, 7, 4) is True and notes == set()
    assert seen_before(notes, 7, 4) is False and notes == {7}     # a third sighting starts again


def test_the_notes_are_emptied_once_they_hold_the_limit(engine):
    seen_before = ingest_module(engine).seen_before
    notes = {1, 2, 3}
    assert seen_before(notes, 4, 3) is False and notes == {4}
    assert seen_before(notes, 1, 3) is False and notes == {4, 1}
    assert seen_before(notes, 4, 3) is True and notes == {1}
    assert seen_before(notes, -(2**63), 3) is False and -(2**63) in notes     # any hash a key may have


def _literal_rule(notes: set[int], key: int, limit: int) -> bool:
    """The rule as the caches state it, written out here apart from either implementation."""
    if key in notes:
        notes.remove(key)
        return True
    if len(notes) >= limit:
        notes.clear()
    notes.add(key)
    return False


@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 5), max_size=60), st.integers(0, 6))
def test_the_engine_s_rule_is_the_rule_step_for_step(engine, keys, limit):
    seen_before = ingest_module(engine).seen_before
    ours: set[int] = set()
    expected: set[int] = set()
    for key in keys:
        assert seen_before(ours, key, limit) is _literal_rule(expected, key, limit)
        assert ours == expected


def test_the_pure_engine_takes_a3fast_seen_s_own_definition():
    assert ingest_module("pure").seen_before is defined
