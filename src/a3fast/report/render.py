"""Rendering a TraceSummary: the self-contained HTML report, and the notebook views.

Templates are Jinja2 with autoescaping on, since every agent and predicate name comes from a trace
someone else wrote. Data for the page's tables goes into one `application/json` script element with
`<`, `>` and `&` escaped, and the page's script puts it into the DOM as text only.
"""
from __future__ import annotations

import datetime as _dt
import functools
import os
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson
from markupsafe import Markup

from .. import __version__
from . import charts
from .model import Limits, PlacementView, TraceSummary, summarise_trace

__all__ = ["render", "render_summary", "write_report", "placement_html", "summary_html", "fleet_html",
           "placement_view"]

#: Codes of the first-failed column in the page: '.' eligible, then one character per predicate.
_CODE_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Findings listed in the page at most (all are counted).
FINDINGS_LISTED = 2_000


@functools.lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("a3fast.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda n: f"{n:,}"
    env.filters["score"] = lambda v: "" if v is None else f"{v:.3g}"
    return env


def _asset(name: str) -> str:
    return resources.files("a3fast.report").joinpath("templates", name).read_text(encoding="utf-8")


def json_for_script(value: Any) -> Markup:
    """JSON that cannot end its <script> element or open a comment in it, whatever the strings hold."""
    text = orjson.dumps(value).decode()
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
                  .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _script(text: str) -> Markup:
    """A library's source inside a <script> element: only `</script` could end it early."""
    return Markup(text.replace("</script", "<\\/script").replace("<!--", "<\\!--"))


def _svg(spec: Mapping[str, Any]) -> Markup:
    # vl-convert writes the chart with every text escaped as SVG requires.
    return Markup(charts.to_svg(spec))


# -- trace-wide charts (SVG at build time) ---------------------------------------------------------

def _top(counter, limit: int) -> tuple[list[tuple[str, int]], int]:
    top = counter.most_common(limit)
    return top, len(counter) - len(top)


def _time_bins(summary: TraceSummary) -> tuple[list[tuple[float, float, int, int]], str] | None:
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


def overview_charts(summary: TraceSummary) -> dict[str, Any]:
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


# -- the page's data -------------------------------------------------------------------------------

class _Interner:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.ids: dict[Any, int] = {}

    def __call__(self, item: Any) -> int:
        i = self.ids.get(item)
        if i is None:
            i = self.ids[item] = len(self.items)
            self.items.append(item)
        return i


def _codes(indexes: list[int]) -> str | list[int]:
    """The first-failed column: a string of one character per candidate where it fits, else ints."""
    if max(indexes, default=-1) < len(_CODE_CHARS):
        return "".join("." if i < 0 else _CODE_CHARS[i] for i in indexes)
    return indexes


def page_data(summary: TraceSummary) -> dict[str, Any]:
    """Everything the page's script needs, names and predicates and candidate lists interned."""
    names, predicates, lists = _Interner(), _Interner(), _Interner()
    flagged = {f.seq for f in summary.findings}
    placements = []
    for view in summary.listed:
        entry: dict[str, Any] = {
            "seq": view.seq, "kind": view.kind, "chosen": view.chosen, "n": view.candidates,
            "e": view.eligible, "p": [predicates(p) for p in view.predicates], "r": list(view.removed),
            "t": view.decided_at, "f": view.seq in flagged}
        if view.rows is not None:
            order = list(view.predicates)
            extra = [p for p in dict.fromkeys(p for _, p in view.rows if p is not None) if p not in view.predicates]
            position = {p: i for i, p in enumerate(order + extra)}
            entry["d"] = {
                "summary": view.summary, "reason": view.reason,
                "x": [predicates(p) for p in extra],
                "list": lists(tuple(names(c) for c, _ in view.rows)),
                "ff": _codes([-1 if p is None else position[p] for _, p in view.rows]),
                "components": list(view.score_components),
                "scores": [list(row) for row in view.score_rows], "scored": view.scored}
        placements.append(entry)
    return {"names": names.items, "predicates": predicates.items, "lists": [list(x) for x in lists.items],
            "codes": _CODE_CHARS, "placements": placements,
            "specs": {"funnel": charts.funnel(), "scores": charts.scores()},
            "limits": {"candidates": summary.limits.candidates_per_placement,
                       "scores": summary.limits.scores_per_placement}}


# -- pages -----------------------------------------------------------------------------------------

def render_summary(summary: TraceSummary) -> str:
    """The report page for a summarised trace: one HTML document that needs nothing else."""
    return _env().get_template("report.html.j2").render(
        s=summary, charts=overview_charts(summary), data=json_for_script(page_data(summary)),
        findings=summary.findings[:FINDINGS_LISTED], findings_listed=FINDINGS_LISTED,
        css=Markup(_asset("report.css")), app=_script(_asset("report.js")),
        vega=_script(charts.javascript_bundle()), version=__version__,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def render(records: Iterable[Mapping[str, Any]] | Any, *, name: str = "trace", limits: Limits = Limits()) -> str:
    """The report of a trace given as records `{seq, kind, content}` (spec or compact form), e.g. a
    live trace's records so far; also a path, bytes or binary file. ReportInputError when the records
    break the trace format."""
    return render_summary(summarise_trace(records, name=name, limits=limits))


def write_report(trace: str | os.PathLike, out: str | os.PathLike | None = None, *,
                 limits: Limits = Limits()) -> Path:
    """Render the report of the trace file `trace` into `out` (default: beside it, `.html`),
    written to a temporary file and renamed into place. Returns the path written."""
    import tempfile

    target = Path(out) if out is not None else Path(trace).with_suffix(".html")
    html = render(os.fspath(trace), name=Path(trace).name, limits=limits)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


# -- notebook views (static: SVG charts, no script) ------------------------------------------------

def placement_view(placement, limits: Limits = Limits()) -> PlacementView:
    """A live Placement as the report shows a placement read from a trace."""
    from .model import summarise_trace as _summarise

    kind = "task.bound" if placement.bound else "task.rejected"
    content = {"scheduling": placement.scheduling} if placement.bound else placement.rejection
    seq = placement.seq if placement.seq is not None else 1
    summary = _summarise([{"seq": seq, "kind": kind, "content": content}], name="placement",
                         limits=Limits(**{**limits.__dict__, "detailed_placements": 1}))
    return summary.listed[0]


def _placement_charts(view: PlacementView) -> dict[str, Markup | None]:
    funnel_rows = [{"order": i, "predicate": p, "reached": r, "removed": m}
                   for i, (p, r, m) in enumerate(view.funnel)]
    score_rows = [{"rank": rank, "agent": row[0], "component": c, "value": v}
                  for rank, row in enumerate(view.score_rows)
                  for c, v in zip(view.score_components, row[2:]) if v is not None]
    return {"funnel": _svg(charts.funnel(funnel_rows)) if funnel_rows else None,
            "scores": _svg(charts.scores(score_rows)) if score_rows else None}


#: Candidate rows a notebook view lists (the page pages through all it embeds).
NOTEBOOK_ROWS = 25


def placement_html(placement_or_view) -> str:
    view = placement_or_view if isinstance(placement_or_view, PlacementView) else placement_view(placement_or_view)
    return _env().get_template("placement.html.j2").render(
        p=view, charts=_placement_charts(view), rows=(view.rows or [])[:NOTEBOOK_ROWS],
        css=Markup(_asset("report.css")))


def summary_html(summary: TraceSummary) -> str:
    return _env().get_template("summary.html.j2").render(
        s=summary, charts=overview_charts(summary), listed=summary.listed[:NOTEBOOK_ROWS],
        findings=summary.findings[:NOTEBOOK_ROWS], css=Markup(_asset("report.css")))


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
    return _env().get_template("fleet.html.j2").render(
        agents=len(fleet), engine=fleet.engine, top=top, more=len(held) - len(top), chart=chart,
        css=Markup(_asset("report.css")))
