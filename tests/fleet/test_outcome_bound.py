"""Outcome counts have one ceiling, MAX_OUTCOMES, on both engines (docs/design.md, Reading 26): a
count that would pass it is refused and changes nothing, a success rate is always in [0, 1], and a
fleet at the ceiling saves a snapshot it loads again."""
from __future__ import annotations

import re
from fractions import Fraction

import pytest

from a3fast import FleetError
from a3fast import _pure
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.fleet import Fleet
from a3fast.schema import parse_requirements, task_kind
from a3fast.fleet.scoring import MAX_OUTCOMES
from factories import declaration, requirements

TASK = requirements(capabilities=["x.y/1"])
KIND = task_kind(parse_requirements(TASK))


def one_agent(engine: str) -> Fleet:
    fleet = Fleet(engine)
    fleet.add(declaration("a", capabilities=[("x.y", 1)]))
    return fleet


def success_rate(fleet: Fleet) -> float:
    return fleet.place(TASK).scheduling["scores"]["a"]["success_rate"]


def test_the_ceiling_is_one_number_on_both_engines():
    assert _pure.MAX_OUTCOMES == MAX_OUTCOMES == 10**15
    assert MAX_OUTCOMES + 2 < 2**53            # successes + 1 and attempts + 2 are exact doubles
    if NATIVE_AVAILABLE:
        from a3fast import _core
        assert _core.MAX_OUTCOMES == MAX_OUTCOMES


@pytest.mark.parametrize("successes", [0, 1, MAX_OUTCOMES // 3, MAX_OUTCOMES])
def test_counts_at_the_ceiling_give_a_success_rate_in_0_1_exactly_rounded(engine, successes):
    fleet = one_agent(engine)
    fleet.record_outcomes("a", KIND, successes, MAX_OUTCOMES)
    rate = success_rate(fleet)
    assert 0.0 <= rate <= 1.0
    assert rate == float(Fraction(successes + 1, MAX_OUTCOMES + 2))   # the same bits on both engines


def test_the_count_past_the_ceiling_is_refused_and_changes_nothing(engine):
    fleet = one_agent(engine)
    fleet.record_outcomes("a", KIND, 7, MAX_OUTCOMES)
    generation, rate = fleet.generation, success_rate(fleet)
    message = re.escape(f"'a', kind {KIND!r}: {MAX_OUTCOMES} + 1 outcomes would pass the {MAX_OUTCOMES}")
    with pytest.raises(FleetError, match=message):
        fleet.record_outcome("a", KIND, True)
    with pytest.raises(FleetError, match=message):
        fleet.record_outcomes("a", KIND, 0, 1)
    assert fleet.outcomes("a", KIND) == (7, MAX_OUTCOMES)
    assert fleet.generation == generation and success_rate(fleet) == rate
    fleet.record_outcomes("a", KIND, 0, 0)                 # nothing more is still allowed


@pytest.mark.parametrize("attempts", [2**63 - 1, 2**63, 2**64, MAX_OUTCOMES + 1])
def test_one_call_past_the_ceiling_is_refused_alike(engine, attempts):
    # 2^63 - 1 used to overflow int64 on the native engine: a negative success rate in the record
    fleet = one_agent(engine)
    with pytest.raises(FleetError, match=rf"'a', kind {KIND!r}: 0 \+ {attempts} outcomes would pass "
                                         rf"the {MAX_OUTCOMES} a fleet counts"):
        fleet.record_outcomes("a", KIND, 0, attempts)
    assert fleet.outcomes("a", KIND) == (0, 0) and KIND not in fleet._rows.kinds
    assert success_rate(fleet) == 0.5


@pytest.mark.parametrize("successes, attempts", [(1.0, 2), (1, 2.0), (True, 1), (0, None)])
def test_counts_are_integers(engine, successes, attempts):
    with pytest.raises(ValueError, match="expected an integer"):
        one_agent(engine).record_outcomes("a", KIND, successes, attempts)


def test_a_fleet_at_the_ceiling_saves_what_it_loads(engine, tmp_path):
    """Saved at the ceiling, loaded on either engine: the same counts, the same success rate, and
    the next outcome refused there too (save never writes what load refuses)."""
    fleet = one_agent(engine)
    fleet.record_outcomes("a", KIND, MAX_OUTCOMES - 5, MAX_OUTCOMES)
    rate = success_rate(fleet)
    with pytest.raises(FleetError):
        fleet.record_outcome("a", KIND, False)
    fleet.save(tmp_path / "at-ceiling")
    for loader in (["native", "pure"] if NATIVE_AVAILABLE else ["pure"]):
        loaded = Fleet.load(tmp_path / "at-ceiling", loader)
        assert loaded.outcomes("a", KIND) == (MAX_OUTCOMES - 5, MAX_OUTCOMES)
        assert success_rate(loaded) == rate
        with pytest.raises(FleetError):
            loaded.record_outcome("a", KIND, True)
        loaded.save(tmp_path / "again")
        assert Fleet.load(tmp_path / "again", engine).outcomes("a", KIND) == (MAX_OUTCOMES - 5, MAX_OUTCOMES)


def test_the_engine_index_refuses_past_the_ceiling_alike(engine):
    from a3fast.engines import engine_module

    index = engine_module(engine).Index()
    index.put(0, "a", [], 0.0)
    kind = index.new_kind()
    index.add_outcomes(kind, 0, 1, MAX_OUTCOMES)
    with pytest.raises(ValueError, match=f"agent 0: {MAX_OUTCOMES} \\+ 1 outcomes would pass the {MAX_OUTCOMES}"):
        index.record_outcome(kind, 0, True)
    with pytest.raises(ValueError, match="agent 0: 2 successes of 1 attempts is not a count"):
        index.add_outcomes(kind, 0, 2, 1)
    assert index.outcome(kind, 0) == (1, MAX_OUTCOMES)
