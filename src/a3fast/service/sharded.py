"""Serving a ShardedFleet (`a3fast serve --shards N`): Ray started or joined, the shards' own state
placed, and a shard failure answered as 503.

The service's journal and snapshot stay the source of truth: the shards start empty on every start
of the service and are rebuilt from them (docs/service.md). Each shard's own journal and snapshot
(under STATE/shards, or a temporary directory without --state) only let Ray restart a shard actor
while the service runs.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..distributed.sharded import ShardError
from .problems import ServiceError, problem
from .state import StateError

__all__ = ["fleet_factory", "start_ray", "sharded_fleet_factory", "shard_unavailable", "ShardError", "SHARDS_DIR"]

#: The shards' own state under the service's state directory (rebuilt on every start).
SHARDS_DIR = "shards"


class ShardsNotStarted(StateError):
    """Ray or the shard actors could not be started (exit 2 at start, like unreadable state)."""


def sharded_fleet_factory(shards: int, ray_address: str | None, engine: str | None,
                          state: Path | None, timeout: float = 30.0) -> Callable[[], Any]:
    """A function that starts (or joins) Ray and returns an empty ShardedFleet of `shards` actors.
    A local Ray gets at most `min(shards, CPUs)` CPUs: the shard actors need none of their own."""

    def build() -> Any:
        start_ray(shards, ray_address)
        from ..distributed import ShardedFleet

        if state is not None:
            shard_dir = state / SHARDS_DIR
            # the shards are rebuilt from the service's journal: what they kept last time is stale
            shutil.rmtree(shard_dir, ignore_errors=True)
            shard_dir.mkdir(parents=True)
        else:
            shard_dir = Path(tempfile.mkdtemp(prefix="a3fast-serve-shards-"))
            atexit.register(shutil.rmtree, shard_dir, True)   # nothing in it outlives the service
        try:
            return ShardedFleet(shards, engine=engine, state_dir=str(shard_dir), timeout=timeout)
        except ShardError as exc:
            raise ShardsNotStarted(f"--shards {shards}: {exc}") from None
        except Exception as exc:   # Ray's own errors: actors that cannot be placed
            raise ShardsNotStarted(f"--shards {shards}: cannot start the shard actors: {_first_line(exc)}") from None

    return build


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


def fleet_factory(config) -> Callable[[], Any] | None:
    """The factory a ServiceConfig asks for: a ShardedFleet's with `shards`, else None (one Fleet)."""
    if config.shards is None:
        return None
    return sharded_fleet_factory(config.shards, config.ray_address, config.engine, config.state)
