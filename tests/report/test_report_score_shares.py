"""The score chart stacks each component's share of the total (weight × component), so every bar
ends at the agent's total; the record gives components and totals, not the weights, so the report
finds them from the totals."""
from __future__ import annotations

import pytest

from a3fast import Fleet
from a3fast.report.model import score_weights, summarise_trace
from a3fast.fleet.scoring import COMPONENTS, DEFAULT_WEIGHTS
from a3fast.trace import TraceWriter
from a3fast.workload import generate_fleet, generate_tasks


def _trace(tmp_path, **fleet_options):
    declarations = generate_fleet(200, seed=3)
    fleet = Fleet(**fleet_options)
    fleet.extend(declarations)
    path = tmp_path / "t.jsonl"
    with TraceWriter(str(path)) as trace:
        for task in generate_tasks(declarations, 40, seed=3):
            trace.write(fleet.place(task))
    return summarise_trace(str(path))


def _scored(summary):
    return [v for v in summary.detailed if len(v.score_rows) > 1]


def test_rule_the_default_weights_are_found_and_the_shares_add_up_to_the_total(tmp_path):
    views = _scored(_trace(tmp_path))
    assert views
    for view in views:
        assert view.score_weights == DEFAULT_WEIGHTS
        for agent, total, *components in view.score_rows:
            assert sum(w * c for w, c in zip(view.score_weights, components)) == pytest.approx(total)


def test_other_weights_are_found_from_the_totals(tmp_path):
    weights = (0.1, 0.2, 0.3, 0.4)
    views = [v for v in _scored(_trace(tmp_path, weights=weights)) if len(v.score_rows) >= 6]
    assert views and all(v.score_weights is not None for v in views)
    for view in views:
        for agent, total, *components in view.score_rows:
            # the shares add up to the total, and a component that varies gets its true weight
            assert sum(w * c for w, c in zip(view.score_weights, components)) == pytest.approx(total)
        varying = [k for k in range(4) if len({row[2 + k] for row in view.score_rows}) > 1]
        assert [view.score_weights[k] for k in varying] == pytest.approx([weights[k] for k in varying])


def test_totals_that_are_no_weighted_sum_give_no_weights():
    rows = [(0.9, 1.0, 0.0, 0.0, 0.0), (0.1, 0.0, 1.0, 0.0, 0.0), (0.5, 0.0, 0.0, 1.0, 0.0),
            (0.2, 0.0, 0.0, 0.0, 1.0), (0.3, 1.0, 1.0, 0.0, 0.0)]      # the last is not 0.9 + 0.1
    assert score_weights(list(COMPONENTS), rows) is None
    assert score_weights(list(COMPONENTS), rows[:2]) is None            # too few rows to tell
