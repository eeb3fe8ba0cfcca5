"""Choosing the winner (§5 soft phase): the highest total, ties to the smallest name.

`a3fast.fleet.scoring.choose` picks the winner among custom scores; the engines pick it among the default
scores (tests/fleet/test_scoring_rules.py compares those with a literal scorer).
"""
import pytest

from a3fast.fleet.scoring import choose


def test_nothing_to_choose_from_gives_minus_one():
    assert choose([], []) == -1


def test_a_single_agent_is_chosen():
    assert choose(["only"], [0.0]) == 0


@pytest.mark.parametrize("names, totals, best", [
    (["a", "b"], [0.9, 0.5], 0),          # the first is best: later ones must not replace it
    (["a", "b"], [0.5, 0.9], 1),
    (["a", "b", "c"], [0.2, 0.9, 0.4], 1),
    (["a", "b", "c"], [0.2, 0.4, 0.9], 2),
])
def test_the_highest_total_wins(names, totals, best):
    assert choose(names, totals) == best


@pytest.mark.parametrize("names, best", [(["a", "b"], 0), (["b", "a"], 1), (["c", "a", "b"], 1)])
def test_equal_totals_go_to_the_smallest_name(names, best):
    assert choose(names, [0.5] * len(names)) == best
