"""The one-scheduling-domain rule (docs/design.md, reading 3): a fleet names its agents by
`agent.name` alone, so a name held by one namespace is refused to any other.

Every place that admits declarations (a Fleet, a sharded fleet, the bulk reader, the service, the
importers) asks this module, so the rule and its wording are written once. The compiled JSON Lines
reader keeps a fast check of its own: it hands such a line to the careful reader, which asks here.
"""
from __future__ import annotations

from ..errors import FleetError, Problem

__all__ = ["namespace_conflict", "check_namespace", "namespace_problem"]


def namespace_conflict(name: str, held: str | None, namespace: str) -> str | None:
    """Why agent `name` declared in `namespace` is refused where namespace `held` already holds the
    name (None: nothing holds it, or the same namespace does, and the declaration replaces)."""
    if held is None or held == namespace:
        return None
    return (f"agent name {name!r} is already used in namespace {held!r}; a fleet is one scheduling "
            f"domain and names must be unique in it (cannot add it from namespace {namespace!r})")


def check_namespace(name: str, held: str | None, namespace: str) -> None:
    """FleetError if `namespace_conflict` refuses the declaration."""
    reason = namespace_conflict(name, held, namespace)
    if reason is not None:
        raise FleetError(reason)


def namespace_problem(path: str, name: str, held: str | None, namespace: str) -> Problem | None:
    """The refusal as a problem of the document at `path` (its `agent.namespace`), for readers that
    report every problem of a batch instead of stopping at the first; None when there is none."""
    reason = namespace_conflict(name, held, namespace)
    if reason is None:
        return None
    return Problem(path, f"namespace {held!r}", f"{namespace!r}: {reason}")
