"""What `a3fast serve` is told: one value object that `create_app` and the CLI share."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServiceConfig", "DEFAULT_PORT", "DEFAULT_MAX_BODY", "DEFAULT_MAX_REQUEST_BODY",
           "DEFAULT_MAX_BULK_BODY", "DEFAULT_MAX_K8S_BODY"]

DEFAULT_PORT = 8421
MiB = 1024 * 1024
#: The largest body of all (a trace posted to /v1/verify, a stdio line); every other limit is at most this.
DEFAULT_MAX_BODY = 64 * MiB
#: One document: a declaration, a placement request, an outcome.
DEFAULT_MAX_REQUEST_BODY = 1 * MiB
#: POST /v1/agents: the change is applied on the event loop in one step, so its size is what one
#: request may hold everyone else up for (1 MiB is about 6,000 declarations; docs/service.md,
#: "Limits", has the time their step takes).
DEFAULT_MAX_BULK_BODY = 1 * MiB
#: /k8s/*: ExtenderArgs (NodeNames mode: ~20 bytes a node; Nodes mode: the whole Node objects,
#: ~7 KB each, so 5,000 nodes are about 34 MiB; the extender decodes them on a worker thread).
DEFAULT_MAX_K8S_BODY = 48 * MiB


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    state: Path | None = None          # the state directory (journal, snapshot, trace); None: memory only
    fleet: Path | None = None          # declarations to seed a state that holds no agent yet
    trace: Path | None = None          # where the trace is written (default: STATE/trace.jsonl)
    token: str | None = None           # bearer token every request but /healthz, /readyz and /metrics needs
    engine: str | None = None
    max_body: int = DEFAULT_MAX_BODY   # the largest body of any route (and stdio line)
    max_request_body: int = DEFAULT_MAX_REQUEST_BODY   # one document (PUT agent, place, outcomes)
    max_bulk_body: int = DEFAULT_MAX_BULK_BODY         # POST /v1/agents
    max_k8s_body: int = DEFAULT_MAX_K8S_BODY           # /k8s/*
    header_timeout: float = 10.0       # seconds a connection may take to send a request's head
    body_timeout: float = 60.0         # seconds a request may take to send its whole body
    keep_alive: float = 5.0            # seconds an idle keep-alive connection is kept
    max_connections: int | None = None  # open connections at most (None: from the process's file limit)
    fsync: str = "group"               # "group" (group commit), "always" (one per change), "never"
    checkpoint_every: int = 50_000       # journal entries between checkpoints
    watch_cards: tuple[str, ...] = ()  # agents (or card URLs) whose cards keep the fleet in step
    watch_mcp: tuple[tuple[str, str], ...] = ()  # (agent, MCP server URL): the agent's tools follow the server
    watch_interval: float = 30.0       # seconds between two checks of a watched card or server
    watch_remove_after: int = 3        # consecutive misses (404/410) that remove a card's agents
    shards: int | None = None          # serve a ShardedFleet of this many Ray actors (None: one Fleet)
    ray_address: str | None = None     # the Ray cluster the shards run on (None: a local Ray)
    tls_cert: Path | None = None       # the server's certificate (PEM): serve HTTPS
    tls_key: Path | None = None        # its private key (PEM)
    tls_client_ca: Path | None = None  # CA whose client certificates /k8s/* accepts (instead of the token)
    access_log: bool = False           # one line on stderr per answered request (service.access_log)
    watch_k8s: bool = False            # the fleet follows the cluster's AgentDeclarations and Nodes
    k8s_namespaces: tuple[str, ...] = ()  # namespaces whose AgentDeclarations are watched (empty: all)
    kubeconfig: Path | None = None     # None: in-cluster, else ~/.kube/config
    k8s_watch_timeout: float = 300.0   # a watch request's timeoutSeconds (each draws up to twice this)
    k8s_request_timeout: float = 30.0  # a list's read timeout, and a watch's margin past timeoutSeconds
