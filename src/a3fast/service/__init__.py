"""`a3fast serve`: the matcher as a long-running service.

One idea per module: `config` (what the service is told), `state` (the fleet and trace, rebuilt
exactly after a crash through a3fast.durable.DurableFleet, the cycle the shards of a ShardedFleet
share), `operations` (the handlers HTTP and
stdio share), `refusals` (the one table from an error to its answer, for both), `app` (the HTTP
shell: the route table and the one layer before it), `server` (uvicorn with a head timeout and
a connection limit), `stdio` (the JSON Lines shell), `seed` (`--fleet`), `k8s` (the Kubernetes
scheduler extender), `k8s_watch` (the fleet from the cluster's AgentDeclarations and Nodes,
`--watch-k8s`), `sharded` (serving a ShardedFleet: Ray, its fleet store, 503 for a shard
failure), `trace_reader`, `metrics`, `openapi`, `problems`.
"""
from __future__ import annotations

__all__ = ["create_app", "ServiceConfig", "ServiceState"]


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "ServiceConfig":
        from .config import ServiceConfig

        return ServiceConfig
    if name == "ServiceState":
        from .state import ServiceState

        return ServiceState
    raise AttributeError(name)
