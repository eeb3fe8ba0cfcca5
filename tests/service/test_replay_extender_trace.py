"""A trace the Kubernetes extender writes in NodeNames mode — each pod offered some of the nodes,
sessions in the requirements, nothing held by a filter — replayed on the unchanged served fleet
reports no change, in baseline mode and against the recorded decisions; on a changed fleet, each
change is named by its pod."""
from __future__ import annotations

import random

import orjson
import pytest

pytest.importorskip("starlette")
pytest.importorskip("kubernetes")

from starlette.testclient import TestClient  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from a3fast.workload import generate_fleet, generate_tasks  # noqa: E402
from test_k8s_extender import names_client, node, pod, wait_ready  # noqa: E402

PODS = 300


@pytest.fixture(scope="module")
def extender_trace():
    docs = generate_fleet(60, 5)
    tasks = generate_tasks(docs, PODS, 5)
    rng = random.Random(5)
    app = create_app(ServiceConfig())
    with TestClient(app) as client:
        wait_ready(client)
        for d in docs:
            assert client.put(f"/v1/agents/{d['agent']['name']}", json=d).status_code == 200
        nodes = [node(d["agent"]["name"]) for d in docs]
        extender = names_client(client)
        for i, task in enumerate(tasks):
            offered = rng.sample(nodes, rng.randint(1, len(nodes)))
            extender.filter(pod(task, uid=f"uid-{i}", name=f"pod-{i}"), offered)
        yield client, docs


def test_the_extenders_trace_on_its_own_fleet_changes_nothing(extender_trace):
    client, _ = extender_trace
    for compare in ("baseline", "recorded"):
        r = client.post("/v1/replay", json={"since": 0, "compare": compare, "fail_on": "changed>0"})
        assert r.status_code == 200, r.text
        summary = r.json()["summary"]
        assert summary["placements"] == PODS
        assert (summary["changed"], r.json()["passed"]) == (0, True), (compare, r.json()["changes"][:3])


def test_a_change_on_a_proposed_fleet_is_named_by_its_pod(extender_trace):
    client, docs = extender_trace
    revoked = [{**d, "clearances": [c for c in d["clearances"] if c != "orders.issue"]} for d in docs]
    answer = client.post("/v1/replay", json={"since": 0, "fleet": revoked, "show": 5}).json()
    assert answer["summary"]["changed"] > 0
    assert answer["summary"]["fleet"]["changed"], "the fleet change leads the summary"
    for change in answer["changes"]:
        assert change["task"].startswith("default/pod-") and change["namespace"] == "default"
    assert set(answer["summary"]["namespaces"].get("unschedulable", {})) <= {"default"}
    trace = [orjson.loads(x) for x in client.get("/v1/trace").content.splitlines()]
    assert any("a3fast.session_held" in orjson.dumps(r).decode() for r in trace)
