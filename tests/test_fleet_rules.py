"""The fleet's own rules beyond matching: success history, sessions, generations, membership.

Each test names the rule it holds; with the matching and parity suites they leave no surviving
mutant in a3fast.fleet except those docs/testing.md explains.
"""
import pytest

from a3fast import Fleet, FleetError


def agent(name, namespace="ns", **extra):
    return {"v": "1.0", "agent": {"name": name, "namespace": namespace}, "capabilities": [],
            "clearances": [], **extra}


@pytest.fixture
def fleet(engine):
    f = Fleet(engine=engine)
    f.extend([agent("a"), agent("b")])
    return f


def test_outcomes_of_an_unknown_kind_or_agent_are_none_recorded(fleet):
    fleet.record_outcomes("a", "k0", 1, 1)
    fleet.record_outcomes("a", "k1", 2, 3)
    assert fleet.outcomes("a", "k1") == (2, 3) and fleet.outcomes("a", "k0") == (1, 1)
    assert fleet.outcomes("a", "never-seen") == (0, 0)
    assert fleet.outcomes("nobody", "k1") == (0, 0)
    assert fleet.outcomes("b", "k1") == (0, 0)


def test_record_outcomes_equals_that_many_single_outcomes(engine):
    one_by_one, at_once = Fleet(engine=engine), Fleet(engine=engine)
    for f in (one_by_one, at_once):
        f.extend([agent("a"), agent("b")])
    for success in (True, False, True):
        one_by_one.record_outcome("b", "kind", success)
    at_once.record_outcomes("b", "kind", 2, 3)
    assert at_once.outcomes("b", "kind") == one_by_one.outcomes("b", "kind") == (2, 3)
    assert at_once.outcomes("a", "kind") == (0, 0)
    placed = [f.place({}, kind="kind").scheduling["scores"] for f in (one_by_one, at_once)]
    assert placed[0] == placed[1]


@pytest.mark.parametrize("successes, attempts", [(0, 0), (0, 4), (4, 4)])
def test_record_outcomes_accepts_from_none_to_all_successful(fleet, successes, attempts):
    fleet.record_outcomes("a", "k", successes, attempts)
    assert fleet.outcomes("a", "k") == (successes, attempts)


@pytest.mark.parametrize("successes, attempts", [(-1, 2), (3, 2), (1, -1)])
def test_record_outcomes_refuses_successes_outside_zero_to_attempts(fleet, successes, attempts):
    with pytest.raises(ValueError, match=r"successes \(-?\d+\) must be between 0 and attempts"):
        fleet.record_outcomes("a", "k", successes, attempts)
    assert fleet.outcomes("a", "k") == (0, 0)


def test_outcomes_are_recorded_only_for_an_agent_in_the_fleet(fleet):
    fleet.remove("b")
    for record in (lambda: fleet.record_outcomes("b", "k", 1, 1), lambda: fleet.record_outcome("b", "k", True)):
        with pytest.raises(FleetError, match="no agent named 'b'"):
            record()


def test_every_change_gives_the_fleet_a_new_generation(fleet):
    seen = [fleet.generation]
    for change in (lambda: fleet.record_outcomes("a", "k", 1, 2),
                   lambda: fleet.record_outcome("a", "k", True),
                   lambda: fleet.hold_session("a", "s"),
                   lambda: fleet.release_session("a", "s"),
                   lambda: fleet.add(agent("c")),
                   lambda: fleet.extend([agent("d")]),
                   lambda: fleet.remove("c")):
        change()
        assert fleet.generation > seen[-1]
        seen.append(fleet.generation)
