"""a3fast: a fast, explainable matching engine for the A3 Capability Schema 1.0.

    import a3fast
    fleet = a3fast.Fleet()
    fleet.add({"v": "1.0", "agent": {...}, "capabilities": [...], "clearances": [...]})
    p = fleet.place({"capabilities": [{"name": "order.investigate", "version": 2}]})
    p.bound, p.agent, p.scheduling
"""
from __future__ import annotations

__version__ = "0.1.0"

from .engines import ENGINE, NATIVE_AVAILABLE, available_engines
from .errors import A3Error, FleetError, Problem, SchemaError, SnapshotError
from .schema import Capability, Declaration, Requirements, parse_declaration, parse_requirements

# Names whose modules load on first use (keeps `import a3fast` light for embedders).
_LAZY = {
    "Fleet": "fleet",
    "Placement": "placement",
    "Route": "placement",
    "verify": "verify",
    "Finding": "verify",
    "admit": "authority",
}

__all__ = ["ENGINE", "NATIVE_AVAILABLE", "available_engines", "A3Error", "FleetError", "Problem",
           "SchemaError", "SnapshotError", "Capability", "Declaration", "Requirements", "parse_declaration",
           "parse_requirements", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'a3fast' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
