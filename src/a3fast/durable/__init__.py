"""A fleet kept durable: the journal (`journal`), the state directory of checkpoints and journal
generations (`statedir`), and `DurableFleet` (`fleet`), the one cycle of apply, journal,
acknowledge after the log, checkpoint, retire and recover that the service and each shard of a
ShardedFleet run (docs/design.md, "The durable fleet")."""
from __future__ import annotations

from .fleet import DurableFleet
from .journal import JournalCorrupt, JournalFailed
from .statedir import StateDir, StateError

__all__ = ["DurableFleet", "JournalCorrupt", "JournalFailed", "StateDir", "StateError"]
