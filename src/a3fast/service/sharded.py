"""Serving a ShardedFleet (`a3fast serve --shards N`): Ray started or joined, the shards' own state
placed, and a shard failure answered as 503.

The service's checkpoint and journal stay the source of truth. A checkpoint saves the sharded
fleet with `ShardedFleet.save` (each shard writes its own part); a start loads it with
`ShardedFleet.load` (each shard reads its own part, no declaration is replayed) and replays the
service's journal after it. Each shard's own checkpoints and journal (under STATE/shards, or a
temporary directory without --state) only let Ray restart a shard actor while the service runs;
they are started afresh on every start of the service.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from ..distributed.cluster import check_reachable
from ..distributed.sharded import ShardError, ShardedFleet
from ..errors import SnapshotError
from .problems import ServiceError, problem
from .state import FleetStore, StateError

__all__ = ["fleet_factory", "start_ray", "sharded_fleet_factory", "ShardedFleets", "shard_unavailable",
           "ShardError", "SHARDS_DIR"]

#: The shards' own state under the service's state directory (started afresh on every start).
SHARDS_DIR = "shards"


class ShardsNotStarted(StateError):
    """Ray or the shard actors could not be started (exit 2 at start, like unreadable state)."""


class ShardedFleets:
    """The FleetStore of a ShardedFleet of `shards` Ray actors (Ray started or joined on first use).
    A local Ray gets at most `min(shards, CPUs)` CPUs: the shard actors need none of their own."""

    reads_in_bulk = False    # a seed is added through the shards, declaration by declaration

    def __init__(self, shards: int, ray_address: str | None, engine: str | None, state: Path | None,
                 timeout: float = 30.0):
        self.shards = shards
        self.ray_address = ray_address
        self.engine = engine
        self.state = state
        self.timeout = timeout

    def _shard_dir(self) -> str:
        if self.state is not None:
            shard_dir = self.state / SHARDS_DIR
            # the shards start from the service's checkpoint and journal: what they kept is stale
            shutil.rmtree(shard_dir, ignore_errors=True)
            shard_dir.mkdir(parents=True)
            return str(shard_dir)
        made = tempfile.mkdtemp(prefix="a3fast-serve-shards-")
        atexit.register(shutil.rmtree, made, True)   # nothing in it outlives the service
        return made

    def empty(self) -> ShardedFleet:
        start_ray(self.shards, self.ray_address)
        try:
            return ShardedFleet(self.shards, engine=self.engine, state_dir=self._shard_dir(),
                                timeout=self.timeout)
        except ShardError as exc:
            raise ShardsNotStarted(f"--shards {self.shards}: {exc}") from None
        except Exception as exc:   # Ray's own errors: actors that cannot be placed
            raise ShardsNotStarted(f"--shards {self.shards}: cannot start the shard actors: {_first_line(exc)}") from None

    def load(self, path: Path) -> ShardedFleet:
        start_ray(self.shards, self.ray_address)
        try:
            fleet = ShardedFleet.load(path, engine=self.engine, state_dir=self._shard_dir(), timeout=self.timeout)
        except (ShardError, SnapshotError) as exc:
            raise ShardsNotStarted(f"--shards {self.shards}: {exc}") from None
        except Exception as exc:   # Ray's own errors: actors that cannot be placed or load
            raise ShardsNotStarted(f"--shards {self.shards}: cannot start the shard actors from {path}: "
                                   f"{_first_line(exc)}") from None
        saved = fleet.shards
        if saved != self.shards:
            fleet.close()
            raise ShardsNotStarted(f"{path}: the state holds a fleet of {saved} shards, not the "
                                   f"{self.shards} of --shards {self.shards}; start with --shards {saved}")
        return fleet


def sharded_fleet_factory(shards: int, ray_address: str | None, engine: str | None,
                          state: Path | None, timeout: float = 30.0) -> ShardedFleets:
    """The FleetStore of `shards` Ray actors (see ShardedFleets)."""
    return ShardedFleets(shards, ray_address, engine, state, timeout)


def start_ray(shards: int, ray_address: str | None) -> None:
    """Ray initialised: the cluster at `ray_address`, or a local Ray bounded to min(shards, CPUs)
    CPUs (the shard actors reserve none). Called in the main thread before the server installs its
    signal handlers, which then take SIGTERM back from Ray's own (a clean stop stays exit 0)."""
    try:
        import ray
    except ImportError:
        raise ShardsNotStarted("--shards needs Ray: pip install 'a3fast[ray]'") from None
    if ray.is_initialized():
        return
    try:
        if ray_address is None:
            ray.init(num_cpus=max(1, min(shards, os.cpu_count() or 1)), include_dashboard=False,
                     log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1")
        else:
            check_reachable(ray_address)
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
    except Exception as exc:   # Ray's own errors: a cluster that cannot be reached or started
        where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray"
        raise ShardsNotStarted(f"--shards {shards}: cannot start {where}: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def shard_unavailable(exc: ShardError) -> ServiceError:
    """503 naming the shard: nothing was decided or changed on the fleet as a whole."""
    return ServiceError(503, [problem("$", "every shard of the fleet answering", str(exc), shard=exc.shard)])


def fleet_factory(config) -> FleetStore | None:
    """The FleetStore a ServiceConfig asks for: a ShardedFleet's with `shards`, else None (one Fleet)."""
    if config.shards is None:
        return None
    return sharded_fleet_factory(config.shards, config.ray_address, config.engine, config.state)
