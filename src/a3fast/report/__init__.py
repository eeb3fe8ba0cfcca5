"""Explanations people look at: a trace as one self-contained HTML report, and notebook views.

    a3fast.report.render(records) -> str          # the page, for a trace's records (spec or compact)
    a3fast.report.write_report(path, out=None)    # the page of a trace file, beside it by default
    a3fast.report.summarise_trace(source)         # a TraceSummary (has _repr_html_ for notebooks)

The charts are Vega-Lite specs drawn by Vega: as SVG at build time, and in the page by the bundled
vega-embed; the page loads nothing from anywhere.
"""
from __future__ import annotations

from .model import Limits, PlacementView, ReportInputError, TraceSummary, summarise_trace
from .render import placement_html, placement_view, render, render_summary, write_report
from .views import fleet_html, summary_html

__all__ = ["Limits", "PlacementView", "ReportInputError", "TraceSummary", "summarise_trace", "render",
           "render_summary", "write_report", "placement_html", "placement_view", "summary_html", "fleet_html"]
