"""The fleet package: a fleet end to end, a module per idea.

    table        the agent table: names, dense ids, declarations in whatever form they are kept
    rows         the predicate rows of the index, and the resolution and explanation caches
    domain       the one-scheduling-domain rule (a name held by another namespace is refused)
    bulk_load    JSON Lines of declarations in bulk (Fleet.load_jsonl / extend_jsonl)
    persistence  snapshots (Fleet.save / Fleet.load)
    pipeline     placing: one driver runs every placement, a batch of one or more, through the stages
                 prepare -> explain -> score -> choose -> build -> hold, each task carried by its Placement
    protocol     FleetProtocol: what every fleet offers (Fleet and ShardedFleet)
    core         Fleet, which puts them together
"""
from __future__ import annotations

from .core import Fleet
from .domain import check_namespace, namespace_conflict, namespace_problem
from .protocol import FleetExplanation, FleetProtocol
from .rows import EXPLAINED_CACHE_BUDGET, RESOLVED_CACHE_SIZE

__all__ = ["Fleet", "FleetProtocol", "FleetExplanation", "RESOLVED_CACHE_SIZE", "EXPLAINED_CACHE_BUDGET",
           "namespace_conflict", "check_namespace", "namespace_problem"]
