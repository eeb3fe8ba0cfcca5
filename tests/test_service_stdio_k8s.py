"""`a3fast serve --stdio` and the Kubernetes scheduler extender."""
from __future__ import annotations

import subprocess
import sys

import jsonschema
import orjson
import pytest

from a3fast.service.openapi import load_schema
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server

pytest.importorskip("starlette")


def stdio(requests, *args):
    lines = b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in requests)
    r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", *args], input=lines,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [orjson.loads(x) for x in r.stdout.splitlines()]


def test_stdio_answers_each_op_in_order_with_the_http_bodies():
    a, b = SECTION_10_AGENTS
    out = stdio([
        {"op": "put_agent", "id": 1, "name": "order-analyst", "declaration": a},
        {"op": "put_agents", "id": 2, "declarations": [b]},
        {"op": "list_agents", "id": 3},
        {"op": "get_agent", "id": 4, "name": "summariser"},
        {"op": "place", "id": 5, "requirements": SECTION_10_TASK},
        {"op": "outcome", "id": 6, "agent": "order-analyst", "kind": "k", "success": True},
        {"op": "hold_session", "id": 7, "agent": "summariser", "session": "s"},
        {"op": "release_session", "id": 8, "agent": "summariser", "session": "s"},
        {"op": "trace", "id": 9, "since": 1},
        {"op": "delete_agent", "id": 10, "name": "summariser"},
        {"op": "get_agent", "id": 11, "name": "summariser"},
        {"op": "nope", "id": 12},
        b"{not json",
    ])
    assert [r["id"] for r in out] == list(range(1, 13)) + [None]
    ops = ["put_agent", "put_agents", "list_agents", "get_agent", "place", "outcome", "hold_session",
           "release_session", "trace", "delete_agent"]
    for op, response in zip(ops, out):
        assert response["ok"], response
        jsonschema.validate(response, load_schema("stdio.response"))
        body = {k: v for k, v in response.items() if k not in ("id", "ok")}
        jsonschema.validate(body, load_schema(f"{op}.response"))
    assert out[4]["records"][2]["content"]["scheduling"]["candidates"] == ["order-analyst", "summariser"]
    assert [r["seq"] for r in out[8]["records"]] == [2, 3]
    for response, status in zip(out[10:], (404, 400, 400)):
        assert response["ok"] is False and response["status"] == status
        jsonschema.validate(response, load_schema("stdio.response"))


def test_stdio_verify_and_state_survive(tmp_path):
    state = tmp_path / "state"
    out = stdio([{"op": "put_agents", "declarations": SECTION_10_AGENTS},
                 {"op": "place", "requirements": SECTION_10_TASK}], "--state", str(state))
    records = out[1]["records"]
    again = stdio([{"op": "verify", "records": records}, {"op": "place", "requirements": SECTION_10_TASK}],
                  "--state", str(state))
    assert again[0]["valid"] is True
    assert again[1]["records"][0]["seq"] == 4


# -- Kubernetes extender: bodies shaped as kube-scheduler sends them (Go field names at the top) --
def pod(requirements=None, uid="4f6e-uid"):
    meta = {"name": "worker", "namespace": "default", "uid": uid}
    if requirements is not None:
        meta["annotations"] = {"a3.dev/requirements": orjson.dumps(requirements).decode()}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def node(declaration):
    return {"metadata": {"name": declaration["agent"]["name"],
                         "annotations": {"a3.dev/declaration": orjson.dumps(declaration).decode()}},
            "status": {"allocatable": {"cpu": "4"}}}


@pytest.fixture(scope="module")
def served():
    s = Server()
    for a in SECTION_10_AGENTS:
        s.client.put(f"/v1/agents/{a['agent']['name']}", json=a)
    yield s
    s.stop()


def test_filter_with_node_names_uses_the_served_fleet(served):
    body = {"Pod": pod(SECTION_10_TASK), "NodeNames": ["order-analyst", "summariser", "gpu-node-7"]}
    result = served.client.post("/k8s/filter", json=body).json()
    jsonschema.validate(result, load_schema("k8s.ExtenderFilterResult"))
    assert result["NodeNames"] == ["order-analyst"]
    assert result["FailedAndUnresolvableNodes"] == {"summariser": "capability:order.investigate/2"}
    assert list(result["FailedNodes"]) == ["gpu-node-7"]
    assert result["Error"] == ""
    trace = [orjson.loads(x) for x in served.client.get("/v1/trace").content.splitlines()]
    submitted = [r for r in trace if r["kind"] == "task.submitted" and r["content"].get("id") == "4f6e-uid"]
    assert submitted
    assert served.client.post("/v1/verify", content=served.client.get("/v1/trace").content).json()["valid"]


def test_filter_with_nodes_reads_their_declarations(served):
    nodes = {"metadata": {}, "items": [node(a) for a in SECTION_10_AGENTS] + [{"metadata": {"name": "plain"}}]}
    result = served.client.post("/k8s/filter", json={"Pod": pod(SECTION_10_TASK), "Nodes": nodes}).json()
    jsonschema.validate(result, load_schema("k8s.ExtenderFilterResult"))
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["order-analyst"]
    assert result["FailedAndUnresolvableNodes"]["summariser"] == "capability:order.investigate/2"
    assert "plain" in result["FailedAndUnresolvableNodes"]


def test_pods_without_the_annotation_pass_through(served):
    result = served.client.post("/k8s/filter", json={"Pod": pod(), "NodeNames": ["x", "y"]}).json()
    assert result["NodeNames"] == ["x", "y"] and result["FailedNodes"] == {} and result["Error"] == ""


def test_prioritize_scores_eligible_nodes_0_to_10(served):
    body = {"Pod": pod({"v": "1.0", "capabilities": [], "clearances": ["orders.read"]}),
            "NodeNames": ["order-analyst", "summariser"]}
    scores = served.client.post("/k8s/prioritize", json=body).json()
    jsonschema.validate(scores, load_schema("k8s.HostPriorityList"))
    assert [s["Host"] for s in scores] == ["order-analyst", "summariser"]
    assert all(0 <= s["Score"] <= 10 for s in scores)
    body["Pod"] = pod(SECTION_10_TASK)
    scores = {s["Host"]: s["Score"] for s in served.client.post("/k8s/prioritize", json=body).json()}
    assert scores["summariser"] == 0


def test_bind_answers_an_extender_binding_result(served):
    args = {"PodName": "worker", "PodNamespace": "default", "PodUID": "u", "Node": "order-analyst"}
    assert served.client.post("/k8s/bind", json=args).json() == {"Error": ""}
    bad = served.client.post("/k8s/bind", json={**args, "Node": "nowhere"}).json()
    jsonschema.validate(bad, load_schema("k8s.ExtenderBindingResult"))
    assert "nowhere" in bad["Error"]


def test_a_bad_requirements_annotation_is_reported_in_error(served):
    bad = pod()
    bad["metadata"]["annotations"] = {"a3.dev/requirements": "{"}
    result = served.client.post("/k8s/filter", json={"Pod": bad, "NodeNames": ["order-analyst"]}).json()
    assert "not JSON" in result["Error"]
