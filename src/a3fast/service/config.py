"""What `a3fast serve` is told: one value object that `create_app` and the CLI share."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServiceConfig", "DEFAULT_PORT", "DEFAULT_MAX_BODY"]

DEFAULT_PORT = 8421
DEFAULT_MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    state: Path | None = None          # the state directory (journal, snapshot, trace); None: memory only
    fleet: Path | None = None          # declarations to seed a state that holds no agent yet
    trace: Path | None = None          # where the trace is written (default: STATE/trace.jsonl)
    token: str | None = None           # bearer token every request but /healthz and /readyz needs
    engine: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    fsync: str = "group"               # "group" (group commit), "always" (one per change), "never"
    snapshot_every: int = 50_000       # journal entries between snapshots
    watch_cards: tuple[str, ...] = ()  # agents (or card URLs) whose cards keep the fleet in step
    watch_mcp: tuple[tuple[str, str], ...] = ()  # (agent, MCP server URL): the agent's tools follow the server
    watch_interval: float = 30.0       # seconds between two checks of a watched card or server
    watch_remove_after: int = 3        # consecutive misses (404/410) that remove a card's agents
    shards: int | None = None          # serve a ShardedFleet of this many Ray actors (None: one Fleet)
    ray_address: str | None = None     # the Ray cluster the shards run on (None: a local Ray)
    tls_cert: Path | None = None       # the server's certificate (PEM): serve HTTPS
    tls_key: Path | None = None        # its private key (PEM)
    tls_client_ca: Path | None = None  # CA whose client certificates /k8s/* accepts (instead of the token)
