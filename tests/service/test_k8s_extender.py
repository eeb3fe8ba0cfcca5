"""The Kubernetes scheduler extender as kube-scheduler calls it (tests/k8s_extender_client.py),
with Pods and Nodes built from the official client's models."""
from __future__ import annotations

import orjson
import pytest

pytest.importorskip("starlette")
kubernetes = pytest.importorskip("kubernetes")

from kubernetes.client import V1Container, V1Node, V1NodeStatus, V1ObjectMeta, V1Pod, V1PodSpec  # noqa: E402
from kubernetes.client import V1ResourceRequirements  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from a3fast.record.compact import decode_trace  # noqa: E402
from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from k8s_extender_client import ExtenderClient, ExtenderFailed, serialise  # noqa: E402
from service_process import SECTION_10_AGENTS, SECTION_10_TASK  # noqa: E402


def pod(requirements=None, uid="4f6e-uid", name="worker", annotations=None):
    notes = dict(annotations or {})
    if requirements is not None:
        notes["a3.dev/requirements"] = orjson.dumps(requirements).decode()
    return serialise(V1Pod(
        api_version="v1", kind="Pod",
        metadata=V1ObjectMeta(name=name, namespace="default", uid=uid, annotations=notes or None),
        spec=V1PodSpec(containers=[V1Container(name="c", image="busybox",
                                               resources=V1ResourceRequirements(limits={"a3.dev/agent": "1"}))])))


def node(name, declaration=None):
    notes = {"a3.dev/declaration": orjson.dumps(declaration).decode()} if declaration is not None else None
    return serialise(V1Node(metadata=V1ObjectMeta(name=name, annotations=notes),
                            status=V1NodeStatus(allocatable={"cpu": "4"})))


def wait_ready(client, timeout: float = 30.0) -> None:
    """The state opens in a worker thread at startup: /readyz says when it is loaded."""
    import time

    deadline = time.monotonic() + timeout
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the service did not get ready"
        time.sleep(0.01)


AGENT_NODES = [node(a["agent"]["name"], a) for a in SECTION_10_AGENTS]


@pytest.fixture()
def served():
    app = create_app(ServiceConfig())
    with TestClient(app) as client:
        wait_ready(client)
        for a in SECTION_10_AGENTS:
            assert client.put(f"/v1/agents/{a['agent']['name']}", json=a).status_code == 200
        client.state = app.state.service
        yield client


def names_client(served):
    return ExtenderClient("http://testserver/k8s/", node_cache_capable=True, client=served)


def nodes_client(served):
    return ExtenderClient("http://testserver/k8s", node_cache_capable=False, client=served)


def trace(served):
    lines = served.get("/v1/trace").content.splitlines()
    return [r for r in decode_trace(orjson.loads(x) for x in lines)]


def decisions(served, uid):
    """(candidates, chosen agent or None) of each placement recorded for this pod."""
    out = []
    records = trace(served)
    for k, r in enumerate(records):
        if r["kind"] == "task.submitted" and r["content"].get("id") == uid:
            after = records[k + 1] if records[k + 1]["kind"] != "task.admitted" else records[k + 2]
            if after["kind"] == "task.bound":
                scheduling = after["content"]["scheduling"]
                out.append((scheduling["candidates"], scheduling["declaration"]["agent"]["name"]))
            else:
                out.append((after["content"]["candidates"], None))
    return out


# -- decide over what was offered -------------------------------------------------------------------
def test_filter_decides_over_the_offered_agents_only(served):
    client = names_client(served)
    offered = [node("order-analyst"), node("gpu-node-7")]
    passed, failed, unresolvable = client.filter(pod(SECTION_10_TASK, uid="u-offer"), offered)
    assert [n["metadata"]["name"] for n in passed] == ["order-analyst"]
    assert decisions(served, "u-offer") == [(["order-analyst"], "order-analyst")]


def test_the_record_lists_offered_agents_in_join_order(served):
    client = names_client(served)
    join_order = [a["agent"]["name"] for a in SECTION_10_AGENTS]
    offered = [node(n) for n in reversed(join_order)]
    client.filter(pod({"v": "1.0", "capabilities": [], "clearances": []}, uid="u-order"), offered)
    assert decisions(served, "u-order")[0][0] == join_order


def test_a_pod_that_fits_no_offered_agent_is_rejected_though_an_unoffered_agent_fits(served):
    client = names_client(served)
    passed, failed, unresolvable = client.filter(pod(SECTION_10_TASK, uid="u-none"), [node("summariser")])
    assert passed == [] and failed == {}
    assert unresolvable == {"summariser": "capability:order.investigate/2"}
    assert decisions(served, "u-none") == [(["summariser"], None)]


def test_nodes_that_are_not_agents_are_unresolvable_in_both_modes(served):
    names = names_client(served).filter(pod(SECTION_10_TASK), AGENT_NODES + [node("gpu-node-7")])
    whole = nodes_client(served).filter(pod(SECTION_10_TASK), AGENT_NODES + [node("gpu-node-7")])
    for passed, failed, unresolvable in (names, whole):
        assert failed == {}
        assert unresolvable["summariser"] == "capability:order.investigate/2"
        assert "gpu-node-7" in unresolvable
        assert [n["metadata"]["name"] for n in passed] == ["order-analyst"]


def test_nodes_mode_decides_over_each_offer_not_the_fleet_of_an_earlier_one(served):
    """The fleet built from one offer's annotations is reused only for the same offer: a later,
    smaller offer is decided, answered and recorded over its own nodes."""
    client = nodes_client(served)
    both = AGENT_NODES
    client.filter(pod(SECTION_10_TASK, uid="u-both"), both)
    passed, failed, unresolvable = client.filter(pod(SECTION_10_TASK, uid="u-one"), [both[1]])
    assert passed == [] and unresolvable == {"summariser": "capability:order.investigate/2"}
    assert decisions(served, "u-both") == [(["order-analyst", "summariser"], "order-analyst")]
    assert decisions(served, "u-one") == [(["summariser"], None)]
    # the same offer again, in another order: decided over that offer, in its order
    client.filter(pod(SECTION_10_TASK, uid="u-again"), list(reversed(both)))
    assert decisions(served, "u-again") == [(["summariser", "order-analyst"], "order-analyst")]


def test_prioritize_scores_the_offered_agents(served):
    client = names_client(served)
    requirements = {"v": "1.0", "capabilities": [], "clearances": ["orders.read"]}
    scores = dict(client.prioritize(pod(requirements), [node("summariser"), node("gpu-node-7")]))
    assert scores["gpu-node-7"] == 0 and 0 <= scores["summariser"] <= 10
    alone = dict(client.prioritize(pod(requirements), [node("summariser")]))
    assert alone["summariser"] == scores["summariser"]


# -- a filter is a question -----------------------------------------------------------------------
def test_a_filter_holds_no_session(served):
    requirements = {**SECTION_10_TASK, "session": "s-1"}
    names_client(served).filter(pod(requirements, uid="u-session"), AGENT_NODES)
    assert not served.state.fleet.holds_session("order-analyst", "s-1")


def test_a_repeated_identical_filter_adds_at_most_1_kb_to_the_trace(served):
    client = names_client(served)
    client.filter(pod(SECTION_10_TASK, uid="u-repeat"), AGENT_NODES)
    size = len(served.get("/v1/trace").content)
    for _ in range(20):
        client.filter(pod(SECTION_10_TASK, uid="u-repeat"), AGENT_NODES)
    assert len(served.get("/v1/trace").content) - size <= 1024
    assert len(decisions(served, "u-repeat")) == 1


def test_a_changed_answer_is_recorded_again(served):
    client = names_client(served)
    client.filter(pod(SECTION_10_TASK, uid="u-change"), AGENT_NODES)
    client.filter(pod(SECTION_10_TASK, uid="u-change"), AGENT_NODES[1:])
    assert [d[0] for d in decisions(served, "u-change")] == [["order-analyst", "summariser"], ["summariser"]]


def test_the_trace_of_filters_verifies(served):
    names_client(served).filter(pod(SECTION_10_TASK, uid="u-v1"), AGENT_NODES)
    nodes_client(served).filter(pod(SECTION_10_TASK, uid="u-v2"), AGENT_NODES)
    assert served.post("/v1/verify", content=served.get("/v1/trace").content).json()["valid"]


# -- no bind ----------------------------------------------------------------------------------------
def test_there_is_no_bind_route(served):
    args = {"PodName": "worker", "PodNamespace": "default", "PodUID": "u", "Node": "order-analyst"}
    assert served.post("/k8s/bind", json=args).status_code == 404


# -- accept what Kubernetes accepts -----------------------------------------------------------------
def test_a_pod_with_a_100_kib_annotation_and_no_a3_one_passes_through(served):
    big = {"kubectl.kubernetes.io/last-applied-configuration": "x" * (100 * 1024)}
    for client in (names_client(served), nodes_client(served)):
        passed, failed, unresolvable = client.filter(pod(annotations=big), AGENT_NODES + [node("plain")])
        assert len(passed) == 3 and failed == {} and unresolvable == {}


def test_a_pod_with_a_100_kib_annotation_beside_its_requirements_is_placed(served):
    big = {"kubectl.kubernetes.io/last-applied-configuration": "x" * (100 * 1024)}
    passed, _, _ = names_client(served).filter(pod(SECTION_10_TASK, annotations=big), AGENT_NODES)
    assert [n["metadata"]["name"] for n in passed] == ["order-analyst"]


def test_a_node_name_that_is_an_object_is_a_400_naming_it(served):
    body = {"Pod": pod(SECTION_10_TASK), "Nodes": {"metadata": {}, "items": [{"metadata": {"name": {"x": 1}}}]},
            "NodeNames": None}
    r = served.post("/k8s/filter", json=body)
    assert r.status_code == 400
    assert r.json()["problems"][0]["path"] == "$.Nodes.items[0].metadata.name"
    names = served.post("/k8s/filter", json={"Pod": pod(SECTION_10_TASK), "NodeNames": [{"x": 1}]})
    assert names.status_code == 400 and names.json()["problems"][0]["path"] == "$.NodeNames[0]"


def test_a_bad_requirements_annotation_is_the_filters_error(served):
    bad = pod()
    bad["metadata"]["annotations"] = {"a3.dev/requirements": "{"}
    with pytest.raises(ExtenderFailed, match="not JSON"):
        names_client(served).filter(bad, AGENT_NODES)


def test_deep_a3_requirements_are_still_bounded(served):
    nested = 1
    for _ in range(40):
        nested = [nested]
    deep = {"v": "1.0", "capabilities": [], "clearances": [], "x": nested}
    with pytest.raises(ExtenderFailed, match="at most 32 nested arrays and objects"):
        names_client(served).filter(pod(deep), AGENT_NODES)


def test_nodes_mode_echoes_the_passed_nodes_as_sent(served):
    passed, _, _ = nodes_client(served).filter(pod(SECTION_10_TASK), AGENT_NODES)
    assert passed == [AGENT_NODES[0]]


def test_a_pod_without_requirements_scores_every_node_0(served):
    for client in (names_client(served), nodes_client(served)):
        assert client.prioritize(pod(), AGENT_NODES) == [("order-analyst", 0), ("summariser", 0)]


def test_a_placement_after_a_filter_lists_the_whole_fleet_again(served):
    names_client(served).filter(pod(SECTION_10_TASK, uid="u-before"), AGENT_NODES[1:])
    r = served.post("/v1/place?record=compact", json={"requirements": {"v": "1.0", "capabilities": [],
                                                                       "clearances": []}})
    assert r.status_code == 200
    names_client(served).filter(pod(SECTION_10_TASK, uid="u-after"), AGENT_NODES[:1])
    records = trace(served)
    bound = [r["content"]["scheduling"]["candidates"] for r in records if r["kind"] == "task.bound"]
    rejected = [r["content"]["candidates"] for r in records if r["kind"] == "task.rejected"]
    assert rejected == [["summariser"]]
    assert bound == [["order-analyst", "summariser"], ["order-analyst"]]
    assert served.post("/v1/verify", content=served.get("/v1/trace").content).json()["valid"]


def test_answers_match_the_published_schemas(served):
    import jsonschema

    from a3fast.service.openapi import load_schema

    for mode in ({"Nodes": None, "NodeNames": ["order-analyst", "summariser", "gpu-node-7"]},
                 {"Nodes": {"metadata": {}, "items": AGENT_NODES + [node("plain")]}, "NodeNames": None}):
        body = {"Pod": pod(SECTION_10_TASK), **mode}
        jsonschema.validate(served.post("/k8s/filter", json=body).json(), load_schema("k8s.ExtenderFilterResult"))
        jsonschema.validate(served.post("/k8s/prioritize", json=body).json(), load_schema("k8s.HostPriorityList"))
        jsonschema.validate(body, load_schema("k8s.ExtenderArgs"))


def test_a_recorded_answer_survives_a_restart_and_holds_no_session(tmp_path):
    config = ServiceConfig(state=tmp_path / "state")
    requirements = {**SECTION_10_TASK, "session": "s-restart"}
    with TestClient(create_app(config)) as client:
        wait_ready(client)
        for a in SECTION_10_AGENTS:
            client.put(f"/v1/agents/{a['agent']['name']}", json=a)
        names_client(client).filter(pod(requirements, uid="u-restart"), AGENT_NODES)
        before = client.get("/v1/trace").content
    with TestClient(create_app(config)) as client:
        wait_ready(client)
        assert client.get("/v1/trace").content == before
        assert decisions(client, "u-restart") == [(["order-analyst", "summariser"], "order-analyst")]
        assert not client.app.state.service.fleet.holds_session("order-analyst", "s-restart")
        assert client.post("/v1/verify", content=before).json()["valid"]


# -- the Nodes mode's edges -------------------------------------------------------------------------
def test_nodes_mode_names_an_unnamed_agent_after_its_node_as_the_watch_does(served):
    # the annotation of docs/kubernetes.md leaves the agent's name out: it is the node's
    declaration = {k: v for k, v in SECTION_10_AGENTS[0].items() if k != "agent"}
    declaration["agent"] = {"namespace": SECTION_10_AGENTS[0]["agent"]["namespace"]}
    offered = [node("gpu-node-1", declaration), node("gpu-node-2", {**declaration, "agent": {
        "name": "another", "namespace": "support"}})]
    passed, _, unresolvable = nodes_client(served).filter(pod(SECTION_10_TASK, uid="u-unnamed"), offered)
    assert [n["metadata"]["name"] for n in passed] == ["gpu-node-1"]
    assert unresolvable == {"gpu-node-2": "a3.dev/declaration declares agent 'another', not 'gpu-node-2'"}
    assert decisions(served, "u-unnamed") == [(["gpu-node-1"], "gpu-node-1")]


def test_nodes_mode_refuses_a_node_offered_twice(served):
    other = {**SECTION_10_AGENTS[0], "agent": {**SECTION_10_AGENTS[0]["agent"], "namespace": "other"}}
    items = [AGENT_NODES[0], node("order-analyst", other)]
    for verb in ("filter", "prioritize"):
        r = served.post(f"/k8s/{verb}", json={"Pod": pod(SECTION_10_TASK), "Nodes": {"metadata": {}, "items": items}})
        assert r.status_code == 400, (verb, r.text)
        assert r.json()["problems"][0]["path"] == "$.Nodes.items[1].metadata.name"
        assert "again (first at $.Nodes.items[0])" in r.json()["problems"][0]["found"]


def test_a_filter_refused_for_a_node_go_would_not_decode_leaves_no_record(served):
    echoed = node("order-analyst", SECTION_10_AGENTS[0])
    echoed["metadata"]["annotations"]["other"] = 5        # annotations are strings in Go's ObjectMeta
    before = len(trace(served))
    r = served.post("/k8s/filter", json={"Pod": pod(SECTION_10_TASK, uid="u-400"),
                                         "Nodes": {"metadata": {}, "items": [echoed]}})
    assert r.status_code == 400
    assert len(trace(served)) == before and decisions(served, "u-400") == []


@pytest.mark.parametrize("field, value", [
    ("labels", {"zone": 5}), ("generation", "x"), ("generation", 1.5), ("finalizers", "x"),
    ("resourceVersion", 7), ("creationTimestamp", 0), ("deletionGracePeriodSeconds", "30"),
    ("ownerReferences", [{"uid": 5}]), ("ownerReferences", [{"controller": "yes"}]),
    ("managedFields", [{"time": "yesterday"}]), ("generateName", ["x"]),
    # past Go's int64; a time that is not RFC 3339
    ("generation", 2**63), ("deletionGracePeriodSeconds", -(2**63) - 1), ("creationTimestamp", "yesterday"),
    ("deletionTimestamp", "2026-03-01 12:00:00"),
    # encoding/json reads a key whatever its case: these are labels, generation, an owner's uid
    ("Labels", {"zone": 5}), ("GENERATION", 1), ("ownerReferences", [{"UID": "u"}]),
    # and as Go folds case: 'ſ' is an s to it; a time's T and Z are upper case to it
    ("label\u017f", {"zone": 5}), ("creationTimestamp", "2026-03-01t12:00:00z"),
    ("managedFields", [{"time": "2026-03-01T12:00:00z"}])])
def test_nodes_mode_refuses_a_node_whose_metadata_go_would_not_decode(served, field, value):
    # the passed Nodes are echoed as sent, and kube-scheduler decodes them as Go's ObjectMeta: a
    # field of the wrong JSON type would make the whole answer unreadable, so it is a 400 naming it
    echoed = node("order-analyst", SECTION_10_AGENTS[0])
    echoed["metadata"][field] = value
    before = len(trace(served))
    r = served.post("/k8s/filter", json={"Pod": pod(SECTION_10_TASK, uid="u-meta"),
                                         "Nodes": {"metadata": {}, "items": [echoed]}})
    assert r.status_code == 400, r.text
    assert r.json()["problems"][0]["path"].startswith(f"$.Nodes.items[0].metadata.{field}")
    assert len(trace(served)) == before


def test_nodes_mode_refuses_a_metadata_member_named_twice_and_a_kind_that_is_no_text(served):
    # Go decodes every occurrence of a member: a first bad value fails though the last is good
    meta = (b'{"name":"order-analyst","creationTimestamp":"bad","creationTimestamp":"2026-03-01T12:00:00Z",'
            b'"annotations":' + orjson.dumps(node("order-analyst", SECTION_10_AGENTS[0])["metadata"]["annotations"])
            + b'}')
    twice = b'{"metadata":' + meta + b'}'
    body = (b'{"Pod":' + orjson.dumps(pod(SECTION_10_TASK)) + b',"Nodes":{"metadata":{},"items":[' + twice + b']}}')
    r = served.post("/k8s/filter", content=body)
    assert r.status_code == 400 and r.json()["problems"][0]["path"] == "$.Nodes.items[0].metadata"
    assert "'creationTimestamp' twice" in r.json()["problems"][0]["found"]
    kind = {**node("order-analyst", SECTION_10_AGENTS[0]), "kind": 5}
    r = served.post("/k8s/filter", json={"Pod": pod(SECTION_10_TASK), "Nodes": {"metadata": {}, "items": [kind]}})
    assert r.status_code == 400 and r.json()["problems"][0]["path"] == "$.Nodes.items[0].kind"


@pytest.mark.parametrize("extra", [b'"x":' + b"1" * 5000, b'"\xff":1'])
def test_nodes_mode_checks_spelling_whatever_else_the_metadata_holds(served, extra):
    # a member Python's reader refuses (a number of 5,000 digits, a key that is not UTF-8) beside
    # a misspelt one: refused, not passed unchecked
    notes = orjson.dumps(node("order-analyst", SECTION_10_AGENTS[0])["metadata"]["annotations"])
    meta = b'{"name":"order-analyst","annotations":' + notes + b',"Labels":{"zone":5},' + extra + b'}'
    body = (b'{"Pod":' + orjson.dumps(pod(SECTION_10_TASK)) + b',"Nodes":{"metadata":{},"items":[{"metadata":'
            + meta + b'}]}}')
    assert served.post("/k8s/filter", content=body).status_code == 400


def test_nodes_mode_refuses_a_repeated_or_misspelt_member_of_the_node_itself(served):
    good = orjson.dumps(node("order-analyst", SECTION_10_AGENTS[0])["metadata"])
    notes = orjson.dumps(node("order-analyst", SECTION_10_AGENTS[0])["metadata"]["annotations"])
    first = b'{"name":"order-analyst","annotations":' + notes + b',"Labels":{"zone":5}}'
    for item in (b'{"Kind":5,"metadata":' + good + b'}', b'{"metadata":' + first + b',"metadata":' + good + b'}',
                 # the second copy's key written with an escape, as Go reads it: "metadata" again
                 b'{"metadata":' + first + b',"metad\\u0061ta":' + good + b'}'):
        body = b'{"Pod":' + orjson.dumps(pod(SECTION_10_TASK)) + b',"Nodes":{"metadata":{},"items":[' + item + b']}}'
        r = served.post("/k8s/filter", content=body)
        assert r.status_code == 400, item


def test_nodes_mode_takes_a_label_repeated_as_go_takes_a_maps_key(served):
    meta = orjson.loads(orjson.dumps(node("order-analyst", SECTION_10_AGENTS[0])["metadata"]))
    text = orjson.dumps(meta)[:-1] + b',"labels":{"a":"x","a":"y"}}'
    body = (b'{"Pod":' + orjson.dumps(pod(SECTION_10_TASK)) + b',"Nodes":{"metadata":{},"items":[{"metadata":'
            + text + b'}]}}')
    assert served.post("/k8s/filter", content=body).status_code == 200


def test_nodes_mode_refuses_a_metadata_member_spelled_in_another_case(served):
    echoed = node("order-analyst", SECTION_10_AGENTS[0])
    echoed["Metadata"] = {"name": 5}
    r = served.post("/k8s/filter", json={"Pod": pod(SECTION_10_TASK), "Nodes": {"metadata": {}, "items": [echoed]}})
    assert r.status_code == 400 and r.json()["problems"][0]["path"] == "$.Nodes.items[0].Metadata"


def test_nodes_mode_echoes_metadata_of_every_type_go_decodes(served):
    echoed = node("order-analyst", SECTION_10_AGENTS[0])
    echoed["metadata"].update({
        "labels": {"zone": "a"}, "generation": 3, "finalizers": ["x/y"], "resourceVersion": "12",
        "creationTimestamp": "2026-03-01T12:00:00Z", "deletionTimestamp": None,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": True}],
        "generation": 2**63 - 1, "deletionGracePeriodSeconds": -(2**63),
        "managedFields": [{"manager": "kubelet", "operation": "Update", "time": "2026-03-01T12:00:00.5+01:00",
                           "fieldsV1": {"f:status": {}}}, {"fieldsV1": "any JSON value"}]})
    passed, _, _ = nodes_client(served).filter(pod(SECTION_10_TASK), [echoed])
    assert passed == [echoed]


# -- many NodeNames: the fleet changing while the names are worked on off the event loop ------------
@pytest.mark.parametrize("slowed", ["_split_in_slices", "_answer_in_slices"])
def test_an_agent_that_leaves_while_many_names_are_worked_on_is_never_passed_undecided(monkeypatch, slowed):
    # more names than one slice, so the filter splits them and writes its answer on the worker
    # thread; the agent is deleted on the event loop meanwhile, in the state's turn, as the watch
    # deletes one
    import asyncio
    import time

    import a3fast.service.k8s as k8s
    from a3fast.schema import parse_declaration
    from a3fast.service.state import ServiceState

    real = getattr(k8s, slowed)

    def slow(*args):
        found = real(*args)
        time.sleep(0.3)
        return found

    monkeypatch.setattr(k8s, slowed, slow)
    names = ["order-analyst"] + [f"n-{k}" for k in range(k8s.SLICE + 10)]
    body = orjson.dumps({"Pod": pod(SECTION_10_TASK, uid="u-race"), "NodeNames": names})

    async def race():
        state = ServiceState()
        state.open()
        extender = k8s.Extender(state)
        try:
            state.put_agents([parse_declaration(a) for a in SECTION_10_AGENTS])
            filtering = asyncio.create_task(extender.filter(body))
            await asyncio.sleep(0.1)
            async with state.applying:
                state.delete_agent("order-analyst")
            answer = orjson.loads(await filtering)
            decided_over = extender._asked["u-race"][1].scheduling["candidates"]
            scores = orjson.loads(await extender.prioritize(body))
            return answer, decided_over, scores
        finally:
            extender.close()
            state.close()

    answer, decided_over, scores = asyncio.run(race())
    assert decided_over == ["order-analyst"]        # decided on, not dropped as it left
    # the delete waits for the state's turn, which the filter holds from the split to the placement:
    # the answer is the decision made on the fleet of that moment, in full ...
    assert answer["NodeNames"] == ["order-analyst"] and answer["FailedAndUnresolvableNodes"] != {}
    assert "order-analyst" not in answer["FailedAndUnresolvableNodes"]
    # ... and prioritize does not take the filter's placement for the fleet changed since
    assert {"Host": "order-analyst", "Score": 0} in scores


def _asked_during_an_update(verb, n_names, uid):
    """An extender asked `verb` ("filter" or "prioritize") over "order-analyst" and `n_names` other
    names, once alone and once while an update runs in steps in the state's turn, as the watch
    applies a large batch (the agent out, then in again a few turns of the loop later): both
    answers, decoded."""
    import asyncio

    import a3fast.service.k8s as k8s
    from a3fast.schema import parse_declaration
    from a3fast.service.state import ServiceState

    async def asked():
        state = ServiceState()
        state.open()
        extender = k8s.Extender(state)
        ask = getattr(extender, verb)
        try:
            declarations = [parse_declaration(a) for a in SECTION_10_AGENTS]
            state.put_agents(declarations)
            names = ["order-analyst"] + [f"n-{k}" for k in range(n_names)]
            body = orjson.dumps({"Pod": pod(SECTION_10_TASK, uid=uid), "NodeNames": names})
            alone = orjson.loads(await ask(body))
            extender._asked.clear()       # the second ask decides afresh, with nothing to reuse

            async def update():
                async with state.applying:
                    state.delete_agent("order-analyst")
                    for _ in range(20):
                        await asyncio.sleep(0.01)
                    state.put_agents([d for d in declarations if d.agent.name == "order-analyst"])

            updating = asyncio.create_task(update())
            await asyncio.sleep(0)
            during = orjson.loads(await ask(body))
            await updating
            return alone, during
        finally:
            extender.close()
            state.close()

    return asyncio.run(asked())


def test_a_filter_of_many_names_never_sees_half_of_an_update():
    # a filter of many names, like one of few, waits for an update applied in steps
    import a3fast.service.k8s as k8s

    for n_names in (10, k8s.SLICE + 10):
        alone, during = _asked_during_an_update("filter", n_names, "u-half")
        assert alone["NodeNames"][0] == "order-analyst"
        assert (during["NodeNames"], during["FailedAndUnresolvableNodes"].get("order-analyst")) \
            == (["order-analyst"], None), n_names


def test_a_prioritize_never_sees_half_of_an_update():
    # the same update, asked to prioritize with no filter before it (nothing to reuse): its
    # placement was made between the update's steps, with the agent out, and scored it 0
    import a3fast.service.k8s as k8s

    for n_names in (10, k8s.SLICE + 10):
        alone, during = _asked_during_an_update("prioritize", n_names, "u-half-p")
        assert alone[0]["Host"] == "order-analyst" and alone[0]["Score"] > 0
        assert during[0] == alone[0], n_names
