"""The report's HTML pieces shared by the page and the notebook views: templates, assets, the
trace-wide charts, and the static notebook views of a placement, a trace and a fleet.

Objects come in by their attributes (a `model.TraceSummary`, a `model.PlacementView`, a Fleet), so
the model can show itself in a notebook through this module without this module reading the model.
"""
from __future__ import annotations

import datetime as _dt
import functools
from importlib import resources
from typing import TYPE_CHECKING, Any, Mapping

import orjson
from markupsafe import Markup

from . import charts

if TYPE_CHECKING:
    from .model import PlacementView, TraceSummary

__all__ = ["view_html", "summary_html", "fleet_html", "overview_charts", "json_for_script", "env", "asset",
           "script", "NOTEBOOK_ROWS"]

#: Candidate rows a notebook view lists (the page pages through all it embeds).
NOTEBOOK_ROWS = 25


@functools.lru_cache(maxsize=1)
def env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("a3fast.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda n: f"{n:,}"
    env.filters["score"] = lambda v: "" if v is None else f"{v:.3g}"
    return env


def asset(name: str) -> str:
    return resources.files("a3fast.report").joinpath("templates", name).read_text(encoding="utf-8")


def json_for_script(value: Any) -> Markup:
    """JSON that cannot end its <script> element or open a comment in it, whatever the strings hold."""
    text = orjson.dumps(value).decode()
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
                  .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def script(text: str) -> Markup:
    """A library's source inside a <script> element: only `</script` could end it early."""
    return Markup(text.replace("</script", "<\\/script").replace("<!--", "<\\!--"))


def _svg(spec: Mapping[str, Any]) -> Markup:
    # vl-convert writes the chart with every text escaped as SVG requires.
    return Markup(charts.to_svg(spec))


# -- trace-wide charts (SVG at build time) ---------------------------------------------------------

def _top(counter, limit: int) -> tuple[list[tuple[str, int]], int]:
    top = counter.most_common(limit)
    return top, len(counter) - len(top)


def _time_bins(summary: "TraceSummary") -> tuple[list[tuple[float, float, int, int]], str] | None:
    if len({t for t, _ in summary.decided}) < 2:
        return None
    first = min(t for t, _ in summary.decided)
    span = (max(t for t, _ in summary.decided) - first).total_seconds()
    n = max(1, summary.limits.time_bins)
    width = span / n
    counts = [[0, 0] for _ in range(n)]
    for t, bound in summary.decided:
        i = min(n - 1, int((t - first).total_seconds() / width))
        counts[i][0 if bound else 1] += 1
    bins = [(i * width, (i + 1) * width, b, r) for i, (b, r) in enumerate(counts)]
    origin = first.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return bins, origin


def overview_charts(summary: "TraceSummary") -> dict[str, Any]:
    limit = summary.limits.predicates_charted
    removed, removed_more = _top(summary.removed_by_predicate, limit)
    unsched, unsched_more = _top(summary.unschedulable_by_predicate, limit)
    out: dict[str, Any] = {"removed_more": removed_more, "unschedulable_more": unsched_more}
    out["removed"] = _svg(charts.predicate_bars(
        removed, title={"text": "Candidates removed, by predicate", "subtitle": "each candidate counted at its first failed predicate"},
        measure="candidates removed, all placements")) if removed else None
    out["unschedulable"] = _svg(charts.predicate_bars(
        unsched, title={"text": "Unschedulable tasks", "subtitle": "by the predicate that removed the last candidates"},
        measure="tasks")) if unsched else None
    timed = _time_bins(summary)
    out["over_time"] = _svg(charts.over_time(timed[0], origin=timed[1])) if timed else None
    return out


def _placement_charts(view: "PlacementView") -> dict[str, Markup | None]:
    funnel_rows = [{"order": i, "predicate": p, "reached": r, "removed": m}
                   for i, (p, r, m) in enumerate(view.funnel)]
    weights = view.score_weights or (1.0,) * len(view.score_components)
    score_rows = [{"rank": rank, "agent": row[0], "component": c, "value": w * v}
                  for rank, row in enumerate(view.score_rows)
                  for c, w, v in zip(view.score_components, weights, row[2:]) if v is not None]
    return {"funnel": _svg(charts.funnel(funnel_rows)) if funnel_rows else None,
            "scores": _svg(charts.scores(score_rows)) if score_rows else None}


def view_html(view: "PlacementView") -> str:
    """A placement's funnel, scores and first candidates, with SVG charts and no script."""
    return env().get_template("placement.html.j2").render(
        p=view, charts=_placement_charts(view), rows=(view.rows or [])[:NOTEBOOK_ROWS],
        css=Markup(asset("report.css")))


def summary_html(summary: "TraceSummary") -> str:
    return env().get_template("summary.html.j2").render(
        s=summary, charts=overview_charts(summary), listed=summary.listed[:NOTEBOOK_ROWS],
        findings=summary.findings[:NOTEBOOK_ROWS], css=Markup(asset("report.css")))


def fleet_html(fleet, limit: int = 15) -> str:
    """A fleet: how many agents, and the predicates most of them satisfy (what tasks can ask for)."""
    import collections

    from ..predicates import declaration_keys

    held: collections.Counter = collections.Counter()
    for declaration in fleet:
        held.update(declaration_keys(declaration))
    top = held.most_common(limit)
    chart = _svg(charts.predicate_bars(top, title="Predicates the most agents satisfy",
                                       measure="agents", color="#2f6f9f")) if top else None
    return env().get_template("fleet.html.j2").render(
        agents=len(fleet), engine=fleet.engine, top=top, more=len(held) - len(top), chart=chart,
        css=Markup(asset("report.css")))
