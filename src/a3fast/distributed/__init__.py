"""a3fast beyond one machine, on Ray: a sharded fleet whose placements and records are those of one
Fleet (`ShardedFleet`), and trace archives verified in parallel (`verify_archive`). See docs/scale.md.

Ray is an optional dependency: `pip install 'a3fast[ray]'`.
"""
from __future__ import annotations

from .archive import verify_archive
from .sharded import ShardedFleet, ShardError, shard_of

__all__ = ["ShardedFleet", "ShardError", "shard_of", "verify_archive"]
