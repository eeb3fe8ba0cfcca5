"""The replay page: what would change if a trace's tasks were placed again on another fleet, as one
self-contained HTML file in the report's style (no script: every part is rendered on the server)."""
from __future__ import annotations

import datetime as _dt
from typing import Any, Sequence

from markupsafe import Markup

from .._version import __version__
from .views import asset, env

__all__ = ["render_replay", "CHANGES_LISTED", "RANKED"]

#: Changed placements shown in detail at most (all are counted).
CHANGES_LISTED = 1_000
#: Rows of each "behind most changes" table.
RANKED = 10


def render_replay(summary: Any, changes: Sequence[Any], *, trace: str, fleet: str, policy: str = "",
                  thresholds: Sequence[Any] = (), baseline: str | None = None,
                  traces: Sequence[tuple[str, Any]] = ()) -> str:
    """The page of a replay: `summary` a ReplaySummary, `changes` the changed Verdicts to show (the
    first CHANGES_LISTED are, moves first), `baseline` the baseline fleet's name, `thresholds` the --fail-on rules checked,
    `traces` each trace's label and own summary when several were replayed. The page runs no script;
    its policy allows its own styles by their hashes (report/policy.py)."""
    from ..replay import KINDS

    from .policy import with_policy

    return with_policy(env().get_template("replay.html.j2").render(
        s=summary, changes=_moves_first(changes)[:CHANGES_LISTED], trace=trace, fleet=fleet, policy=policy,
        baseline=baseline, traces=list(traces), kinds=KINDS,
        namespaces=[(kind, summary.namespaces[kind].most_common(RANKED)) for kind in _ORDER
                    if kind in summary.namespaces],
        predicates=summary.predicates.most_common(RANKED), components=summary.components.most_common(RANKED),
        lost=summary.lost.most_common(RANKED), gained=summary.gained.most_common(RANKED),
        thresholds=[{"rule": str(t), "measured": _measured(t, summary), "exceeded": t.exceeded(summary)}
                    for t in thresholds],
        css=Markup(asset("report.css")), version=__version__,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")))


_ORDER = ("moved", "unschedulable", "schedulable")


def _moves_first(changes: Sequence[Any]) -> list[Any]:
    """Moves, then what became unschedulable, then schedulable; trace order within each."""
    return sorted(changes, key=lambda v: _ORDER.index(v.kind) if v.kind in _ORDER else len(_ORDER))


def _measured(threshold: Any, summary: Any) -> str:
    value = threshold.measured(summary)
    return f"{value:.2f}%" if threshold.percent else f"{value:,.0f}"
