"""a3fast: a fast, explainable matching engine for the A3 Capability Schema 1.0.

    import a3fast
    fleet = a3fast.Fleet()
    fleet.add({"v": "1.0", "agent": {...}, "capabilities": [...], "clearances": [...]})
    p = fleet.place({"capabilities": [{"name": "order.investigate", "version": 2}]})
    p.bound, p.agent, p.scheduling
"""
from __future__ import annotations

from ._version import __version__

from typing import TYPE_CHECKING, Any

from .engines import ENGINE, NATIVE_AVAILABLE, available_engines
from .errors import A3Error, FleetError, Problem, SchemaError, SnapshotError
from .fleet import Fleet
from .fleet.placement import Placement, Route
from .schema import Capability, Declaration, Requirements, parse_declaration, parse_requirements
# Bound here, after the submodule `a3fast.verify` has been imported, so that `a3fast.verify` is the
# function the API documents: the import system sets a package's attribute to a submodule only when
# it first loads it.
from .verify import Finding, verify, verify_file
from .trace import TraceError, TraceWriter, read_records
from . import workload
from .replay import Verdict, replay  # the function, as with verify above

from . import notebook

if TYPE_CHECKING:
    from .authority import admit

__all__ = ["ENGINE", "NATIVE_AVAILABLE", "available_engines", "A3Error", "FleetError", "Problem",
           "SchemaError", "SnapshotError", "Capability", "Declaration", "Requirements", "parse_declaration",
           "parse_requirements", "Fleet", "Placement", "Route", "verify", "verify_file", "Finding", "admit",
           "TraceWriter", "TraceError", "read_records", "workload", "replay", "Verdict"]


def _register_report_views() -> None:
    # the report package draws the core types' notebook views; loaded when a notebook first asks
    from .report import fleet_html, placement_html

    notebook.register_view("fleet", fleet_html)
    notebook.register_view("placement", placement_html)


notebook.register_loader(_register_report_views)


def __getattr__(name: str) -> Any:
    # `admit` loads the authority model (and cryptography) on first use only.
    if name == "admit":
        from .authority import admit as value

        globals()[name] = value
        return value
    raise AttributeError(f"module 'a3fast' has no attribute {name!r}")
