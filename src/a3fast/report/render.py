"""Rendering a TraceSummary: the self-contained HTML report, and the notebook views.

Templates are Jinja2 with autoescaping on, since every agent and predicate name comes from a trace
someone else wrote. Data for the page's tables goes into one `application/json` script element with
`<`, `>` and `&` escaped, and the page's script puts it into the DOM as text only.
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from markupsafe import Markup

from .._version import __version__
from ..files import shown_text, write_atomic
from . import charts
from .model import Limits, PlacementView, TraceSummary, summarise_trace
from .policy import with_policy
from .views import asset, env, json_for_script, overview_charts, script, view_html

__all__ = ["render", "render_summary", "write_report", "placement_html", "placement_view"]

#: Codes of the first-failed column in the page: '.' eligible, then one character per predicate.
_CODE_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Findings listed in the page at most (all are counted).
FINDINGS_LISTED = 2_000


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


#: The largest integer a JavaScript number holds exactly.
_SAFE_INTEGER = 2 ** 53 - 1


def _seq(seq: int) -> int | str:
    """A seq as the page's script reads it back exactly: a number, or a string where a JavaScript
    number would round it (the page compares seqs as text)."""
    return seq if -_SAFE_INTEGER <= seq <= _SAFE_INTEGER else str(seq)


def page_data(summary: TraceSummary) -> dict[str, Any]:
    """Everything the page's script needs, names and predicates and candidate lists interned."""
    names, predicates, lists = _Interner(), _Interner(), _Interner()
    flagged = {f.seq for f in summary.findings}
    placements = []
    for view in summary.listed:
        entry: dict[str, Any] = {
            "seq": _seq(view.seq), "kind": view.kind, "chosen": view.chosen, "n": view.candidates,
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
                "scores": [list(row) for row in view.score_rows], "scored": view.scored,
                "weights": list(view.score_weights) if view.score_weights is not None else None}
        placements.append(entry)
    return {"names": names.items, "predicates": predicates.items, "lists": [list(x) for x in lists.items],
            "codes": _CODE_CHARS, "placements": placements,
            "specs": {"funnel": charts.funnel(), "scores": charts.scores()},
            "limits": {"candidates": summary.limits.candidates_per_placement,
                       "scores": summary.limits.scores_per_placement}}


# -- pages -----------------------------------------------------------------------------------------

def render_summary(summary: TraceSummary) -> str:
    """The report page for a summarised trace: one HTML document that needs nothing else, with a
    policy that runs only its own scripts and styles (report/policy.py)."""
    return with_policy(env().get_template("report.html.j2").render(
        s=summary, charts=overview_charts(summary), data=json_for_script(page_data(summary)),
        findings=summary.findings[:FINDINGS_LISTED], findings_listed=FINDINGS_LISTED,
        css=Markup(asset("report.css")), app=script(asset("report.js")),
        vega=script(charts.javascript_bundle()), version=__version__,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")))


def render(records: Iterable[Mapping[str, Any]] | Any, *, name: str = "trace", limits: Limits = Limits(),
           progress: Callable[[int], None] | None = None, allow_empty: bool = True) -> str:
    """The report of a trace given as records `{seq, kind, content}` (spec or compact form), e.g. a
    live trace's records so far; also a path, bytes or binary file (`progress(n)` is told of every n
    bytes read of those). ReportInputError when the records break the trace format, or, unless
    `allow_empty`, when there is no record."""
    return render_summary(summarise_trace(records, name=name, limits=limits, progress=progress,
                                          allow_empty=allow_empty))


def write_report(trace: str | os.PathLike, out: str | os.PathLike | None = None, *,
                 limits: Limits = Limits()) -> Path:
    """Render the report of the trace file `trace` into `out` (default: beside it, `.html`),
    written to a temporary file and renamed into place. Returns the path written.
    ReportInputError, and nothing written, when the file breaks the trace format or holds no record;
    ValueError when `out` (or the default beside it) is the trace itself."""
    target = Path(out) if out is not None else Path(trace).with_suffix(".html")
    if target.resolve() == Path(trace).resolve() or (target.exists() and os.path.samefile(target, trace)):
        # a trace named *.html would be replaced by its own report
        raise ValueError(f"{target}: the report must go to a file other than the trace it reads")
    # the page names the file in UTF-8: a name that is not is shown escaped
    html = render(os.fspath(trace), name=shown_text(Path(trace).name), limits=limits, allow_empty=False)
    write_atomic(target, html)
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


def placement_html(placement_or_view: Any) -> str:
    """A Placement, or a placement read from a trace, as a notebook shows it."""
    view = placement_or_view if isinstance(placement_or_view, PlacementView) else placement_view(placement_or_view)
    return view_html(view)
