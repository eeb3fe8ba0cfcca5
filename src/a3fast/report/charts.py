"""The report's charts as Vega-Lite specifications, drawn by the Vega libraries: to SVG at build time
(vl-convert, no JavaScript in the page) or in the browser by the bundled vega-embed.

The same specification functions serve both: the page draws a placement's funnel and scores when a
reader opens it, from a spec whose data the page fills in; a notebook gets the same chart as SVG.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..files import write_atomic

__all__ = ["predicate_bars", "over_time", "funnel", "scores", "to_svg", "javascript_bundle",
           "FUNNEL_DATA", "SCORES_DATA"]

#: The named data sets the page fills in for the per-placement charts.
FUNNEL_DATA = "funnel"
SCORES_DATA = "scores"

_BOUND, _REJECTED, _REMOVED, _KEPT = "#2f6f9f", "#c2452d", "#c2452d", "#8fb8d8"
# A wide face first: charts drawn at build time are laid out by the text widths of the build
# machine's font, and a narrower face in the reader's browser keeps the labels inside the chart.
_CONFIG = {"font": "DejaVu Sans, Verdana, sans-serif", "view": {"stroke": None},
           "axis": {"labelLimit": 320, "labelFontSize": 11, "titleFontSize": 11},
           "legend": {"labelFontSize": 11, "titleFontSize": 11}}


def _spec(body: Mapping[str, Any], width: int) -> dict[str, Any]:
    # No $schema: the bundled Vega-Lite and vl-convert's are the same release, whichever it is.
    return {"width": width, "config": _CONFIG, "background": "white", **body}


def predicate_bars(counts: Iterable[tuple[str, int]], *, title: str | Mapping[str, str], measure: str,
                   color: str = _REMOVED, width: int = 360) -> dict[str, Any]:
    """Horizontal bars, one per predicate, longest first."""
    values: list[dict[str, Any]] = [{"predicate": p, "count": n} for p, n in counts]
    top = max((v["count"] for v in values), default=1)
    return _spec({
        "title": title, "data": {"values": values},
        "height": {"step": 18},
        "mark": {"type": "bar", "color": color},
        "encoding": {
            "y": {"field": "predicate", "type": "nominal", "sort": "-x", "title": None},
            "x": {"field": "count", "type": "quantitative", "title": measure, "axis": _whole_ticks(top)},
        },
    }, width)


def _whole_ticks(top: int, most: int = 8) -> dict[str, Any]:
    """Counts are whole: at most one tick per unit, so a small count gets no ticks between units."""
    return {"tickCount": max(1, min(int(top), most)), "format": ",~f"}


def over_time(bins: Sequence[tuple[float, float, int, int]], *, origin: str, width: int = 560) -> dict[str, Any]:
    """Placements per time bin, bound and unschedulable stacked; bins are (start s, end s, bound,
    unschedulable) after `origin`."""
    values = []
    for start, end, bound, rejected in bins:
        for outcome, count in (("bound", bound), ("unschedulable", rejected)):
            if count:
                values.append({"start": start, "end": end, "outcome": outcome, "placements": count})
    return _spec({
        "title": "Placements over time", "data": {"values": values}, "height": 140,
        "mark": "bar",
        "encoding": {
            "x": {"field": "start", "type": "quantitative", "bin": {"binned": True},
                  "title": f"seconds after {origin}"},
            "x2": {"field": "end"},
            "y": {"field": "placements", "type": "quantitative", "stack": "zero", "title": "placements",
                  "axis": _whole_ticks(max((b + r for _, _, b, r in bins), default=1), 5)},
            "color": {"field": "outcome", "type": "nominal", "title": None,
                      "scale": {"domain": ["bound", "unschedulable"], "range": [_BOUND, _REJECTED]}},
        },
    }, width)


def funnel(rows: Sequence[Mapping[str, Any]] | None = None, width: int = 420) -> dict[str, Any]:
    """A placement's predicates in derivation order: each bar is the candidates that reached it, split
    into those it removed and those that went on. Rows: {order, predicate, reached, removed}; without
    rows the spec names its data FUNNEL_DATA for the page to fill in."""
    data = {"values": list(rows)} if rows is not None else {"name": FUNNEL_DATA}
    return _spec({
        "title": "Predicate funnel (derivation order)", "data": data, "height": {"step": 20},
        "transform": [{"calculate": "datum.reached - datum.removed", "as": "went on"},
                      {"fold": ["went on", "removed"], "as": ["part", "candidates"]}],
        "mark": "bar",
        "encoding": {
            "y": {"field": "predicate", "type": "nominal", "title": None,
                  "sort": {"field": "order", "op": "min"}},
            "x": {"field": "candidates", "type": "quantitative", "stack": "zero", "title": "candidates reached",
                  "axis": {"tickMinStep": 1, "format": ",~f"}},
            "color": {"field": "part", "type": "nominal", "title": None,
                      "scale": {"domain": ["went on", "removed"], "range": [_KEPT, _REMOVED]}},
            "order": {"field": "part", "sort": "descending"},
            "tooltip": [{"field": "predicate"}, {"field": "reached"}, {"field": "removed"}],
        },
    }, width)


def scores(rows: Sequence[Mapping[str, Any]] | None = None, width: int = 420) -> dict[str, Any]:
    """The eligible agents' totals as the weighted components that add up to them (weight ×
    component, so each bar ends at the agent's total), highest total first. Rows: {rank, agent,
    component, value}; without rows the data is SCORES_DATA."""
    data = {"values": list(rows)} if rows is not None else {"name": SCORES_DATA}
    return _spec({
        "title": "Score components of the eligible agents", "data": data, "height": {"step": 18},
        "mark": "bar",
        "encoding": {
            "y": {"field": "agent", "type": "nominal", "title": None, "sort": {"field": "rank", "op": "min"}},
            "x": {"field": "value", "type": "quantitative", "stack": "zero", "title": "share of the total (weight × component)"},
            "color": {"field": "component", "type": "nominal", "title": None,
                      "scale": {"scheme": "tableau10"}},
            "tooltip": [{"field": "agent"}, {"field": "component"}, {"field": "value"}],
        },
    }, width)


#: What XML 1.0 cannot hold: C0 controls but tab, line feed and carriage return, lone surrogates,
#: U+FFFE and U+FFFF. Names and predicates may hold them (the schema's text rule refuses only
#: controls), and vl-convert aborts the whole process on an SVG text it cannot parse.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(value: Any) -> Any:
    """`value` with every string's characters that XML cannot hold written as `\\uXXXX` (two
    names that differ only there stay two labels)."""
    if isinstance(value, str):
        return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04X}", value) if _NOT_XML.search(value) else value
    if isinstance(value, Mapping):
        return {_xml_text(k): _xml_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_xml_text(v) for v in value]
    return value


def to_svg(spec: Mapping[str, Any]) -> str:
    """The chart as an SVG document, drawn by Vega in vl-convert's embedded engine (no network)."""
    import vl_convert

    # allowed_base_urls=[]: a spec built from a trace may never make the converter fetch anything.
    svg = vl_convert.vegalite_to_svg(_xml_text(spec), allowed_base_urls=[])
    return svg[svg.index("<svg"):] if "<svg" in svg else svg


@functools.lru_cache(maxsize=1)
def javascript_bundle() -> str:
    """vega, vega-lite and vega-embed as one script that defines `window.vegaEmbed`, built by
    vl-convert from the copies it ships. Building takes 1–3 s, so the result is kept in the user's
    cache directory per vl-convert release (a cache that cannot be written is only slower)."""
    import vl_convert

    # vl-convert's stub leaves out __version__ and javascript_bundle's optional snippet; both exist
    cache = _cache_dir() / f"vega-bundle-{vl_convert.__version__}.js"  # type: ignore[attr-defined]
    try:
        return cache.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache, bundle)
    except OSError:
        pass
    return bundle


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "a3fast"
