"""`a3fast serve --watch-k8s`: the served fleet follows the cluster's AgentDeclarations and Nodes,
listed and watched over the API server's wire format (tests/k8s_api_server.py), with objects built
from the official client's models."""
from __future__ import annotations

import copy

import orjson
import pytest

pytest.importorskip("starlette")
kubernetes = pytest.importorskip("kubernetes")

from kubernetes.client import ApiClient, CoreV1Event, V1Node, V1NodeStatus, V1ObjectMeta  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from k8s_api_server import DECLARATIONS, NODES, FakeApiServer  # noqa: E402
from k8s_extender_client import ExtenderClient, serialise  # noqa: E402
from service_process import SECTION_10_AGENTS, SECTION_10_TASK  # noqa: E402
from waiting import until  # noqa: E402

ANNOTATION = "a3.dev/declaration"


def node(name: str, declaration=None, text: str | None = None) -> dict:
    notes = None
    if declaration is not None:
        notes = {ANNOTATION: orjson.dumps(declaration).decode()}
    if text is not None:
        notes = {ANNOTATION: text}
    return serialise(V1Node(api_version="v1", kind="Node", metadata=V1ObjectMeta(name=name, annotations=notes),
                            status=V1NodeStatus(allocatable={"cpu": "4"})))


def agent_declaration(name: str, namespace: str, spec) -> dict:
    return {"apiVersion": "a3.dev/v1alpha1", "kind": "AgentDeclaration",
            "metadata": serialise(V1ObjectMeta(name=name, namespace=namespace)), "spec": spec}


def declared(name: str, namespace: str = "team-a", **changes) -> dict:
    """A §10 agent's declaration under another name."""
    base = copy.deepcopy(SECTION_10_AGENTS[0])
    base["agent"] = {**base["agent"], "name": name, "namespace": namespace}
    base.update(changes)
    return base


@pytest.fixture()
def api():
    server = FakeApiServer(bookmark_every=0.3)
    server.start()
    yield server
    server.close()


def serving(api, tmp_path, **options):
    config = ServiceConfig(watch_k8s=True, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"),
                           k8s_watch_timeout=options.pop("watch_timeout", 2.0), trace=tmp_path / "trace.jsonl",
                           **options)
    app = create_app(config)
    return app, TestClient(app)


def fleet_names(client) -> list[str]:
    return client.get("/v1/agents?limit=10000").json()["names"]


def ready(client) -> bool:
    return client.get("/readyz").status_code == 200


def test_ready_only_once_the_first_list_is_applied(api, tmp_path):
    api.put(NODES, node("n-1", declared("n-1")))
    api.slow = 0.3          # the first list takes a while
    app, client = serving(api, tmp_path)
    with client:
        assert client.get("/readyz").status_code == 503
        assert client.post("/k8s/filter", content=b"{}").status_code == 503
        until("synced", lambda: ready(client))
        api.slow = 0.0
        assert fleet_names(client) == ["n-1"]


def test_the_fleet_follows_add_modify_delete_in_order(api, tmp_path):
    api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha")))
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client))
        api.put(NODES, node("n-1", declared("n-1")))
        api.put(DECLARATIONS, agent_declaration("beta", "team-a", declared("beta")))
        until("added", lambda: fleet_names(client) == ["alpha", "beta", "n-1"])
        api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha", clearances=["pii.read"])))
        until("modified", lambda: client.get("/v1/agents/alpha").json()["declaration"]["clearances"] == ["pii.read"])
        api.delete(DECLARATIONS, "beta", "team-a")
        api.put(NODES, node("n-1"))          # the annotation taken off
        until("deleted", lambda: fleet_names(client) == ["alpha"])
        status = client.get("/v1/watch").json()["kubernetes"]
        assert status["synced"] and status["problems"] == []
        assert {c["collection"] for c in status["collections"]} == {"nodes", "agentdeclarations"}
