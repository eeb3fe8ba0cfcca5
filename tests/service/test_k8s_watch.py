"""`a3fast serve --watch-k8s`: the served fleet follows the cluster's AgentDeclarations and Nodes,
listed and watched over the API server's wire format (tests/k8s_api_server.py), with objects built
from the official client's models."""
from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time

import jsonschema
import orjson
import pytest

pytest.importorskip("starlette")
kubernetes = pytest.importorskip("kubernetes")

from kubernetes.client import ApiClient, CoreV1Event, V1Node, V1NodeStatus, V1ObjectMeta  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.openapi import load_schema  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from k8s_api_server import DECLARATIONS, NODES, FakeApiServer, _status  # noqa: E402
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


def watch_status(client) -> dict:
    """The watch's part of /v1/watch, once the state has loaded: it loads after start-up, on a
    worker thread, and every route but the open ones answers 503 until then."""
    until("the state loaded", lambda: client.get("/readyz").json()["status"] != "loading")
    return client.get("/v1/watch").json()["kubernetes"]


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


class HeldEvents(FakeApiServer):
    """An API server whose Events endpoint answers only once the test lets it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.release = threading.Event()

    async def _answer(self, method, target, body, writer):
        if method == "POST" and target.split("?")[0].endswith("/events"):
            while not self.release.is_set():
                await asyncio.sleep(0.02)
        return await super()._answer(method, target, body, writer)


def test_readiness_and_the_watch_do_not_wait_for_events_to_be_posted(tmp_path):
    # an Event is a courtesy: invalid objects in the first list are reported, but neither the
    # service's readiness nor the next change waits for the Events endpoint
    api = HeldEvents(bookmark_every=0.3)
    api.start()
    try:
        api.put_many(NODES, [node("n-1", declared("n-1"))] + [node(f"bad-{k}", text="{not json") for k in range(4)])
        app, client = serving(api, tmp_path)
        with client:
            until("synced", lambda: ready(client))
            assert api.events == [] and fleet_names(client) == ["n-1"]
            api.put(NODES, node("n-2", declared("n-2")))
            until("the next change", lambda: fleet_names(client) == ["n-1", "n-2"])
            assert api.events == []
            api.release.set()
            until("every event posted", lambda: len(api.events) == 4)
    finally:
        api.release.set()
        api.close()


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
        # an object that comes to declare another agent lets go of the first
        api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("gamma")))
        until("renamed", lambda: fleet_names(client) == ["gamma"])
        status = watch_status(client)
        assert status["synced"] and status["problems"] == []
        assert {c["collection"] for c in status["collections"]} == {"nodes", "agentdeclarations"}


def names_filter(client, uid: str, offered: list[str]):
    """kube-scheduler's filter with NodeNames (nodeCacheCapable): the passed names and the rest."""
    from test_k8s_extender import pod

    extender = ExtenderClient("http://testserver/k8s", node_cache_capable=True, client=client)
    passed, failed, unresolvable = extender.filter(pod(SECTION_10_TASK, uid=uid), [node(n) for n in offered])
    return sorted(n["metadata"]["name"] for n in passed), unresolvable


def test_an_annotation_change_is_reflected_in_the_next_filter(api, tmp_path):
    api.put_many(NODES, [node("n-1", declared("n-1")), node("n-2", declared("n-2"))])
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client))
        assert names_filter(client, "u-1", ["n-1", "n-2"])[0] == ["n-1", "n-2"]
        # n-2 loses the clearance the pod needs: its next filter fails it
        rv = api.put(NODES, node("n-2", declared("n-2", clearances=["customers.read"])))
        until("applied", lambda: watch_status(client)["collections"][0]
              ["resource_version"] == str(rv))
        passed, unresolvable = names_filter(client, "u-2", ["n-1", "n-2"])
        assert passed == ["n-1"] and unresolvable == {"n-2": "clearance:orders.read"}


def test_a_bad_object_next_to_good_ones_is_reported_and_declares_no_agent_until_fixed(api, tmp_path):
    api.put_many(NODES, [node("n-1", declared("n-1")), node("n-bad", text="{not json"),
                         node("n-2", declared("n-2"))])
    api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha")))
    api.put(DECLARATIONS, agent_declaration("beta", "team-a", {"v": "1.0", "capabilities": "none"}))
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client))
        assert fleet_names(client) == ["alpha", "n-1", "n-2"]
        # alpha turns invalid: reported, and no longer served, as a replica started now would not
        # serve it
        api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha", residency="eu")))
        until("three problems", lambda: len(watch_status(client)["problems"]) == 3)
        problems = {p["object"]: p for p in watch_status(client)["problems"]}
        assert set(problems) == {"AgentDeclaration team-a/alpha", "AgentDeclaration team-a/beta", "Node n-bad"}
        assert problems["Node n-bad"]["problem"].startswith("metadata.annotations[a3.dev/declaration]: "
                                                            "expected a declaration as JSON")
        assert problems["AgentDeclaration team-a/alpha"]["problem"].startswith("spec.residency: expected")
        until("alpha leaves", lambda: fleet_names(client) == ["n-1", "n-2"])
        assert client.get("/v1/agents/alpha").status_code == 404
        # an Event on each bad object, once per problem, built as the API server reads it
        until("three events", lambda: len(api.events) == 3)
        events = [ApiClient().deserialize(orjson.dumps(e).decode(), "CoreV1Event", "application/json") for e in api.events]
        assert all(isinstance(e, CoreV1Event) and e.type == "Warning" and e.reason == "InvalidDeclaration"
                   for e in events)
        assert {(e.involved_object.kind, e.involved_object.name) for e in events} == {
            ("Node", "n-bad"), ("AgentDeclaration", "beta"), ("AgentDeclaration", "alpha")}
        assert 'a3fast_k8s_invalid_objects 3.0' in client.get("/metrics").text
        # fixed: the problem goes and the new declaration is served
        api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha", residency=["us"])))
        # (404 until the watch applies it: alpha is served again only once it is fixed)
        until("fixed", lambda: (client.get("/v1/agents/alpha").json().get("declaration") or {}).get("residency")
              == ["us"])
        status = client.get("/v1/watch").json()
        assert len(status["kubernetes"]["problems"]) == 2
        jsonschema.validate(status, load_schema("watch.response"))


#: what `DeepObjects` writes in place of this string: nesting past every JSON reader's recursion limit,
#: which the API server accepts in an AgentDeclaration's spec (its schema keeps unknown fields)
DEEP = "deep-value"
DEEP_TEXT = b"[" * 1100 + b"]" * 1100


class DeepObjects(FakeApiServer):
    """An API server that writes DEEP_TEXT wherever an object holds the string DEEP."""

    async def _reply(self, writer, status, doc):
        body = orjson.dumps(doc).replace(b'"%s"' % DEEP.encode(), DEEP_TEXT)
        await self._write(writer, f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        return True

    async def _chunk(self, writer, event):
        line = orjson.dumps(event).replace(b'"%s"' % DEEP.encode(), DEEP_TEXT) + b"\n"
        await self._write(writer, f"{len(line):x}\r\n".encode() + line + b"\r\n")


@pytest.mark.parametrize("when", ["in the first list", "after the first list"])
def test_an_object_nested_past_any_readers_depth_is_reported_and_never_stops_the_watch(tmp_path, when):
    api = DeepObjects(bookmark_every=0.3)
    api.start()
    deep = agent_declaration("evil", "team-x", {**declared("evil", "team-x"), "notes": DEEP})
    try:
        api.put(NODES, node("n-1", declared("n-1")))
        if when == "in the first list":
            api.put(DECLARATIONS, deep)
        app, client = serving(api, tmp_path)
        with client:
            until("synced", lambda: ready(client))
            if when == "after the first list":
                api.put(DECLARATIONS, deep)
            until("reported", lambda: watch_status(client)["problems"])
            [problem] = watch_status(client)["problems"]
            assert problem["object"] == "AgentDeclaration team-x/evil"
            assert problem["problem"].startswith("spec"), problem
            # the watch goes on: later objects are served
            api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha")))
            until("alpha", lambda: fleet_names(client) == ["alpha", "n-1"])
            assert all(c["last_error"] is None for c in watch_status(client)["collections"])
    finally:
        api.close()


def test_a_name_declared_by_an_agent_declaration_and_a_node_is_a_conflict_the_declaration_wins(api, tmp_path):
    api.put(NODES, node("n-1", declared("n-1", namespace="nodes")))
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client))
        assert client.get("/v1/agents/n-1").json()["declaration"]["agent"]["namespace"] == "nodes"
        api.put(DECLARATIONS, agent_declaration("n-1", "team-a", declared("n-1")))
        until("the declaration wins",
              lambda: client.get("/v1/agents/n-1").json()["declaration"]["agent"]["namespace"] == "team-a")
        [conflict] = watch_status(client)["problems"]
        assert conflict["object"] == "Node n-1" and conflict["reason"] == "DeclarationConflict"
        assert "also declared by AgentDeclaration team-a/n-1" in conflict["problem"]
        until("an event", lambda: [e["reason"] for e in api.events] == ["DeclarationConflict"])
        api.delete(DECLARATIONS, "n-1", "team-a")
        until("the node's again",
              lambda: client.get("/v1/agents/n-1").json()["declaration"]["agent"]["namespace"] == "nodes")
        assert watch_status(client)["problems"] == []


def test_the_server_killed_and_restarted_mid_watch(api, tmp_path):
    api.put(NODES, node("n-1", declared("n-1")))
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client))
        api.stop()
        # changed while the watch cannot reach it; the restarted server has compacted its history
        api.put(NODES, node("n-2", declared("n-2")))
        api.delete(NODES, "n-1")
        api.compact()
        api.start()
        until("caught up", lambda: fleet_names(client) == ["n-2"], timeout=20)
        status = watch_status(client)["collections"]
        nodes = next(c for c in status if c["collection"] == "nodes")
        assert nodes["relists_after_gone"] >= 1 and nodes["lists"] >= 2 and nodes["failures"] >= 1
        assert ready(client)


class CannedWatches(FakeApiServer):
    """An API server whose every watch sends the same chunks (`chunks`), then ends."""

    chunks = b""

    async def _watch(self, writer, resource, namespace, query):
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n")
        await self._write(writer, head + self.chunks + b"0\r\n\r\n")


def _chunk_of(event: dict) -> bytes:
    line = orjson.dumps(event) + b"\n"
    return b"%x\r\n%b\r\n" % (len(line), line)


class AlwaysGone(CannedWatches):
    """Every watch answers 410 Gone (a list older than its watch cache)."""

    chunks = _chunk_of({"type": "ERROR", "object": _status(410, "Expired", "too old resource version")})


class EmptyWatches(CannedWatches):
    """Every watch ends at once with nothing in it (a proxy, a server going down)."""


class BlankLineWatches(CannedWatches):
    """Every watch sends a blank line, then ends."""

    chunks = b"1\r\n\n\r\n"


@contextlib.contextmanager
def following(api: FakeApiServer, tmp_path):
    """A service following `api`, which holds the node n-1, once synced."""
    api.start()
    try:
        api.put(NODES, node("n-1", declared("n-1")))
        app, client = serving(api, tmp_path)
        with client:
            until("synced", lambda: ready(client))
            yield client
    finally:
        api.close()


def nodes_collection(client) -> dict:
    return next(c for c in watch_status(client)["collections"] if c["collection"] == "nodes")


def test_a_watch_that_keeps_answering_gone_is_listed_again_with_backoff(tmp_path):
    # every 410 lists again, but after a backoff that doubles (0.4-0.8 s, 0.8-1.6 s, 1.6-3.2 s...):
    # in 3 s a handful of lists a collection, not hundreds
    with following(AlwaysGone(), tmp_path) as client:
        time.sleep(3.0)
        nodes = nodes_collection(client)
        assert 1 <= nodes["relists_after_gone"] <= 6 and nodes["lists"] <= 7, nodes
        assert fleet_names(client) == ["n-1"]


def test_a_watch_that_ends_at_once_without_an_event_is_backed_off_from_not_a_loop(tmp_path):
    # client-go's reflector takes a watch that ends within a second, empty, for a failure: here the
    # backoff doubles from 0.4-0.8 s, so a few watches a collection in 3 s, not thousands
    with following(EmptyWatches(), tmp_path) as client:
        time.sleep(3.0)
        nodes = nodes_collection(client)
        assert 1 <= nodes["watches"] <= 8 and nodes["failures"] == nodes["watches"], nodes
        assert nodes["last_error"] == "the watch ended within 1 s without an event"
        assert fleet_names(client) == ["n-1"]


def test_a_watch_line_that_is_no_event_is_named_and_watched_again(tmp_path):
    with following(BlankLineWatches(), tmp_path) as client:
        until("a failed watch", lambda: nodes_collection(client)["failures"] >= 1)
        assert nodes_collection(client)["last_error"].startswith(
            "a watch line that is no event (a blank or broken line); watching again from resourceVersion "), \
            nodes_collection(client)
        assert fleet_names(client) == ["n-1"]


def test_a_watch_resumes_from_its_resource_version_after_a_dropped_connection(api, tmp_path):
    app, client = serving(api, tmp_path, watch_timeout=60)
    with client:
        until("synced", lambda: ready(client))
        api.put(NODES, node("n-1", declared("n-1")))
        until("n-1", lambda: fleet_names(client) == ["n-1"])
        until("a bookmark", lambda: watch_status(client)["collections"][0]["bookmarks"])
        before = len([r for r in api.requests if "/api/v1/nodes" in r and "watch=true" in r])
        api.drop_watches()
        api.put(NODES, node("n-2", declared("n-2")))
        until("n-2", lambda: fleet_names(client) == ["n-1", "n-2"])
        watches = [r for r in api.requests if "/api/v1/nodes" in r and "watch=true" in r]
        assert len(watches) > before
        # resumed, not listed again: the new watch starts after what was seen, bookmarks allowed
        assert "allowWatchBookmarks=true" in watches[-1] and "resourceVersion=" in watches[-1]
        assert len([r for r in api.requests if r.startswith("GET /api/v1/nodes") and "watch" not in r]) == 1


def test_a_slow_server_is_followed_all_the_same(api, tmp_path):
    api.put_many(NODES, [node(f"n-{k}", declared(f"n-{k}")) for k in range(3)])
    api.slow = 0.05
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client), timeout=20)
        api.put(NODES, node("n-9", declared("n-9")))
        until("n-9", lambda: "n-9" in fleet_names(client), timeout=20)


@pytest.mark.slow   # waits out read timeouts: about 8 s
def test_every_request_is_bounded_a_stalled_list_or_watch_is_cut_and_retried(api, tmp_path):
    api.put(NODES, node("n-1", declared("n-1")))
    api.stall = {"list"}
    app, client = serving(api, tmp_path, watch_timeout=1.0, k8s_request_timeout=1.0)
    with client:
        def failures():
            collections = watch_status(client)["collections"]
            return all(c["failures"] >= 1 for c in collections)
        until("the stalled lists cut by their read timeout", failures)
        assert not ready(client)
        api.stall = {"watch"}
        api.drop_watches()                  # the hanging lists end; the lists answer now
        until("synced", lambda: ready(client))
        api.put(NODES, node("n-2", declared("n-2")))
        seen = watch_status(client)["collections"][0]["failures"]
        # the stalled watch is cut within its timeoutSeconds (≤ 2 s) and the 1 s margin, and the
        # watch after it (no longer stalled) delivers what it missed
        until("a stalled watch cut", lambda: watch_status(client)["collections"][0]
              ["failures"] > seen, timeout=15)
        api.stall = set()
        until("n-2", lambda: fleet_names(client) == ["n-1", "n-2"], timeout=15)


def test_namespaces_limit_the_agent_declarations_watched(api, tmp_path):
    api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha")))
    api.put(DECLARATIONS, agent_declaration("beta", "team-b", declared("beta", namespace="team-b")))
    app, client = serving(api, tmp_path, k8s_namespaces=("team-b",))
    with client:
        until("synced", lambda: ready(client))
        assert fleet_names(client) == ["beta"]
        assert any("/namespaces/team-b/agentdeclarations" in r for r in api.requests)


def test_the_watch_threads_end_when_the_service_stops(api, tmp_path):
    import threading

    api.put(NODES, node("n-1", declared("n-1")))
    # a quiet watch (no bookmarks, no changes) that the server would hold open for a minute or
    # more: only the stop, shutting its socket, ends it early
    api.bookmark_every = 3600
    app, client = serving(api, tmp_path, watch_timeout=60)
    with client:
        until("synced", lambda: ready(client))
        until("watching", lambda: all(c["watches"] for c in watch_status(client)
                                                                         ["collections"]))
        assert [t for t in threading.enumerate() if t.name.startswith("a3fast-k8s-")]
    # the stop waited for them: a process that exits under a thread in a native library (a TLS
    # handshake in OpenSSL) can crash
    assert not [t for t in threading.enumerate() if t.name.startswith("a3fast-k8s-")]


@pytest.mark.slow
def test_five_thousand_nodes_in_the_first_list(api, tmp_path):
    api.put_many(NODES, [node(f"node-{k:04d}", declared(f"node-{k:04d}")) for k in range(5000)]
                 + [node(f"plain-{k}") for k in range(200)])
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client), timeout=60)
        assert len(fleet_names(client)) == 5000
        pages = [r for r in api.requests if r.startswith("GET /api/v1/nodes") and "watch" not in r]
        assert len(pages) == 11 and all("limit=500" in r for r in pages)
        passed, unresolvable = names_filter(client, "u-5k", [f"node-{k:04d}" for k in range(5000)] + ["plain-0"])
        assert len(passed) == 5000 and unresolvable == {"plain-0": "not an agent of the a3fast fleet"}


def test_replicas_answer_a_recorded_sequence_of_filters_identically(api, tmp_path):
    """Two replicas started together and a third started after the changes: each answers every
    filter and prioritize of the sequence with the same bytes."""
    from test_k8s_extender import pod

    api.put_many(NODES, [node(f"n-{k}", declared(f"n-{k}", clearances=["orders.read"] if k % 2 else
                                                  ["orders.read", "customers.read"])) for k in range(6)])
    api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha")))
    # a Node declares alpha too (without the clearance the pods need): the AgentDeclaration wins
    api.put(NODES, node("alpha", declared("alpha", namespace="nodes", clearances=["customers.read"])))
    replicas = []
    for k in range(2):
        (tmp_path / f"r{k}").mkdir()
        replicas.append(serving(api, tmp_path / f"r{k}"))
    with replicas[0][1] as a, replicas[1][1] as b:
        until("synced", lambda: ready(a) and ready(b))
        api.delete(NODES, "n-0")
        api.put(NODES, node("n-0", declared("n-0")))            # back, with another declaration
        api.put(NODES, node("n-3", declared("n-3", residency=["us"])))
        # objects that turn invalid declare nothing on a replica that saw them valid, as on one
        # started after: n-1 leaves, and alpha passes to the Node that also declares it
        rv_declarations = api.put(DECLARATIONS, agent_declaration("alpha", "team-a", declared("alpha", residency="eu")))
        rv = api.put(NODES, node("n-1", text="{broken"))
        (tmp_path / "r2").mkdir()
        late_app, late = serving(api, tmp_path / "r2")
        with late:
            clients = [a, b, late]

            def applied(c):
                versions = {v["collection"]: int(v["resource_version"] or 0) for v in watch_status(c)["collections"]}
                return versions["nodes"] >= rv and versions["agentdeclarations"] >= rv_declarations
            until("every replica applied the changes", lambda: all(ready(c) and applied(c) for c in clients))
            offered = [node(n) for n in ["n-5", "n-4", "n-3", "n-2", "n-1", "n-0", "alpha", "gpu-1"]]
            sequence = [(f"u-{k}", pod(SECTION_10_TASK, uid=f"u-{k}"), offered[k % 3:]) for k in range(6)]
            answers = []
            for c in clients:
                extender = ExtenderClient("http://testserver/k8s", node_cache_capable=True, client=c)
                seen = []
                for uid, p, nodes in sequence:
                    names = [n["metadata"]["name"] for n in nodes]
                    body = orjson.dumps({"Pod": p, "Nodes": None, "NodeNames": names})
                    seen.append((c.post("/k8s/filter", content=body).content,
                                 c.post("/k8s/prioritize", content=body).content))
                    extender.filter(p, nodes)       # and read as kube-scheduler reads it
                answers.append(seen)
            assert answers[0] == answers[1] == answers[2]
            assert b'"n-3":"residency:eu"' in answers[0][0][0]
            assert b'"n-1":"not an agent of the a3fast fleet"' in answers[0][0][0]
            assert b'"alpha":"clearance:orders.read"' in answers[0][0][0]
    # each replica wrote its own trace; `a3fast verify` takes them all at once
    import subprocess
    import sys

    traces = [str(tmp_path / f"r{k}" / "trace.jsonl") for k in range(3)]
    done = subprocess.run([sys.executable, "-m", "a3fast", "verify", "--json", *traces], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    results = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [r["path"] for r in results] == traces and all(r["valid"] and r["records"] > 0 for r in results)


# -- the command ------------------------------------------------------------------------------------
@pytest.mark.slow   # a server process started and stopped: about 10 s here
def test_serve_watch_k8s_follows_the_cluster_and_stops_cleanly(api, tmp_path):
    from service_process import Server

    api.put(NODES, node("n-1", declared("n-1")))
    server = Server("--watch-k8s", "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")),
                    "--k8s-watch-timeout", "2", "--trace", str(tmp_path / "trace.jsonl"))
    try:
        assert server.client.get("/v1/agents").json()["names"] == ["n-1"]
        api.put(NODES, node("n-2", declared("n-2")))
        until("n-2", lambda: server.client.get("/v1/agents").json()["names"] == ["n-1", "n-2"])
    finally:
        assert server.stop() == 0


def test_a_watch_that_stops_before_its_first_lists_stops_the_start(api, tmp_path, monkeypatch):
    from a3fast.service.k8s_watch import KubeWatch

    async def broken(self):
        raise RuntimeError("the cluster's connection settings changed")

    monkeypatch.setattr(KubeWatch, "run", broken)
    app, client = serving(api, tmp_path)
    failed, said = [], []
    app.state.on_failure = lambda: failed.append(app.state.failure)
    app.state.on_ready = said.append
    with client:
        until("the start stopped", lambda: failed)
    assert failed == ["--watch-k8s: the watch of the cluster stopped before its first lists were applied "
                      "(the log above says why)"]
    assert said == []


class ListsForbiddenAtFirst(FakeApiServer):
    """An API server that answers 403 to every list until `allow` is set."""

    allow = False

    async def _list(self, writer, resource, namespace, query):
        if not self.allow:
            return await self._reply(writer, 403, _status(403, "Forbidden", f"{resource} is forbidden"))
        return await super()._list(writer, resource, namespace, query)


def test_serve_watch_k8s_says_it_is_ready_only_once_the_cluster_is_listed(tmp_path):
    import select

    from service_process import Server

    api = ListsForbiddenAtFirst()
    api.start()
    server = None
    try:
        api.put(NODES, node("n-1", declared("n-1")))
        server = Server("--watch-k8s", "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")),
                        "--trace", str(tmp_path / "trace.jsonl"), ready=False)
        until("a refused list", lambda: server.client.get("/readyz").json().get("status") != "loading"
              and any(c["failures"] for c in server.client.get("/v1/watch").json()["kubernetes"]["collections"]))
        assert server.client.get("/readyz").status_code == 503
        assert select.select([server.proc.stdout], [], [], 0.5)[0] == []     # no ready line yet
        api.allow = True
        ready_line = server.proc.stdout.readline().decode()
        assert ready_line.startswith("a3fast: ready (1 agent); serving on "), ready_line
        assert server.client.get("/readyz").status_code == 200
    finally:
        if server is not None:
            assert server.stop() == 0
        api.close()


@pytest.mark.slow   # a server process started and stopped: about 5 s here
def test_serve_watch_k8s_stops_promptly_while_events_wait_to_be_posted(tmp_path):
    # the Events endpoint never answers (each post would wait out its 30 s timeout): the server
    # still stops at once, dropping the Events not posted
    from service_process import Server

    api = HeldEvents(bookmark_every=0.3)
    api.start()
    try:
        api.put_many(NODES, [node("n-1", declared("n-1"))] + [node(f"bad-{k}", text="{not json") for k in range(4)])
        server = Server("--watch-k8s", "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")),
                        "--k8s-watch-timeout", "2", "--trace", str(tmp_path / "trace.jsonl"))
        assert server.client.get("/v1/agents").json()["names"] == ["n-1"]
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 15 and api.events == []
    finally:
        api.release.set()
        api.close()


@pytest.mark.parametrize("args, message", [
    (["--watch-k8s", "--state", "S"], "--watch-k8s: not with --state: the cluster is the source of truth"),
    (["--watch-k8s", "--fleet", "F"], "--watch-k8s: not with --fleet"),
    (["--k8s-namespace", "a"], "--k8s-namespace/--kubeconfig: only with --watch-k8s"),
    (["--watch-k8s", "--kubeconfig", "missing"], "--watch-k8s: --kubeconfig missing: cannot use it"),
    (["--watch-k8s", "--kubeconfig", "NOT-YAML"], "--watch-k8s: --kubeconfig NOT-YAML: cannot use it"),
    (["--watch-k8s", "--kubeconfig", "LIST"], "--watch-k8s: --kubeconfig LIST: cannot use it"),
    (["--watch-k8s", "--stdio"], "--watch-k8s: the watch runs in the HTTP server"),
])
def test_serve_watch_k8s_refuses_what_it_cannot_do(tmp_path, monkeypatch, args, message):
    from click.testing import CliRunner

    from a3fast.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "F").write_text("")
    (tmp_path / "NOT-YAML").write_text("clusters: [\n")
    (tmp_path / "LIST").write_text("- a\n- b\n")
    done = CliRunner().invoke(main, ["serve", "--port", "0", *args])
    assert done.exit_code == 2 and done.stderr.startswith("a3fast: " + message), done.stderr
    assert done.exception is None or isinstance(done.exception, SystemExit)


def test_batches_of_two_collections_apply_one_after_the_other(tmp_path):
    # A first list of more than LIST_PAGE objects is applied in slices, letting the loop answer in
    # between; the other collection's batch must not be applied in such a gap, or the slices left
    # would serve the Node declarations of names the AgentDeclarations have taken meanwhile.
    import asyncio

    from a3fast.service.k8s_watch import LIST_PAGE, KubeWatch, KubeWatchConfig, read_declaration_object, read_node
    from a3fast.service.state import ServiceState

    names = [f"n-{k:04d}" for k in range(2 * LIST_PAGE + 10)]
    nodes = [read_node(node(n, declared(n, namespace="nodes"))) for n in names]
    declarations = [read_declaration_object(agent_declaration(n, "team-a", declared(n))) for n in names]

    async def both():
        state = ServiceState(trace_path=tmp_path / "trace.jsonl")
        state.open()
        watch = KubeWatch(state, KubeWatchConfig(events=False), client_configuration=object())
        by_kind = {c.kind: c for c in watch.collections}
        await asyncio.gather(watch.apply(by_kind["Node"], ("replace", nodes)),
                             watch.apply(by_kind["AgentDeclaration"], ("replace", declarations)))
        return state, watch

    state, watch = asyncio.run(both())
    assert {state.fleet.get(n).agent.namespace for n in names} == {"team-a"}
    assert all(watch.served[n][0] == "AgentDeclaration" for n in names)


def test_a_problem_that_comes_back_after_it_was_fixed_is_an_event_again(tmp_path):
    # once per problem while it lasts (a Node's status updates would otherwise repeat it every few
    # seconds), but an object fixed and then broken again the same way gets a new Event: Events
    # expire, and the object has left the fleet again
    from a3fast.service.k8s_watch import KubeWatch, KubeWatchConfig, read_declaration_object, read_node
    from a3fast.service.state import ServiceState

    def reasons(events):
        return [reason for _, reason, _ in events]

    async def run():
        state = ServiceState(trace_path=tmp_path / "trace.jsonl")
        state.open()
        watch = KubeWatch(state, KubeWatchConfig(), client_configuration=object())
        by_kind = {c.kind: c for c in watch.collections}
        nodes, declarations = by_kind["Node"], by_kind["AgentDeclaration"]
        seen = []
        for step in ("broken", "broken", "fixed", "broken"):
            text = "{not json" if step == "broken" else orjson.dumps(declared("n-1")).decode()
            seen.append(reasons(await watch.apply(nodes, ("put", [read_node(node("n-1", text=text))]))))
        # a conflict that ends and comes back: an Event each time it begins
        both = read_declaration_object(agent_declaration("n-2", "team-a", declared("n-2")))
        seen.append(reasons(await watch.apply(nodes, ("put", [read_node(node("n-2", declared("n-2", namespace="nodes")))]))))
        for _ in range(2):
            seen.append(reasons(await watch.apply(declarations, ("put", [both]))))
            seen.append(reasons(await watch.apply(declarations, ("delete", [both]))))
        state.close()
        return seen

    assert asyncio.run(run()) == [["InvalidDeclaration"], [], [], ["InvalidDeclaration"],
                                  [], ["DeclarationConflict"], [], ["DeclarationConflict"], []]


def test_a_poster_of_an_earlier_run_never_takes_a_later_runs_events():
    # stopped while its poster is inside a slow post, then run again: the earlier poster ends
    # with its run, and the later run's Events are posted by its own poster alone, in order
    import asyncio

    from a3fast.service.k8s_watch import KubeWatch, KubeWatchConfig

    posted: list[tuple[int, object]] = []
    slow = threading.Event()

    class Watch(KubeWatch):
        def _reflect(self, c, loop):
            self._stop.wait()

        def _post_events(self, posts, ended):
            if posts == "slow":
                slow.wait()
            posted.append((threading.get_ident(), posts))

    def posters():
        return [t for t in threading.enumerate() if t.name == "a3fast-k8s-events"]

    async def main():
        watch = Watch(state=None, config=KubeWatchConfig(), client_configuration=object())
        first = asyncio.ensure_future(watch.run())
        await asyncio.sleep(0.2)
        watch._posts.put("slow")
        await asyncio.sleep(0.2)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        second = asyncio.ensure_future(watch.run())
        await asyncio.sleep(0.2)
        slow.set()                  # the first run's post ends now
        for k in range(6):
            watch._posts.put(k)
        until("posted", lambda: len(posted) == 7)
        running = len(posters())
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        return running

    assert asyncio.run(main()) == 1
    later = [(thread, k) for thread, k in posted if k != "slow"]
    assert [k for _, k in later] == list(range(6)) and len({thread for thread, _ in later}) == 1
    until("no poster left", lambda: not posters())


def test_a_watch_refused_for_a_version_the_server_has_not_reached_is_listed_past(api, tmp_path):
    # etcd restored from a backup: the server's resourceVersion went back, and every watch from the
    # one the service holds is refused with 504 (kube-apiserver's "Too large resource version").
    # client-go's reflector lists again after such an answer; a watch asked again from the same
    # version is refused for ever, the fleet stale and /readyz 200
    api.put(NODES, node("n-1", declared("n-1")))
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client))
        lists = nodes_collection(client)["lists"]
        api.refuse["watch"] = (504, "Timeout", "Too large resource version: 99, current: 4")
        api.drop_watches()
        api.delete(NODES, "n-1")
        api.put(NODES, node("n-2", declared("n-2")))
        until("listed past the refusals", lambda: fleet_names(client) == ["n-2"], timeout=20)
        nodes = nodes_collection(client)
        assert nodes["lists"] > lists and nodes["relists_after_gone"] == 0
        assert nodes["last_error"] == "HTTP 504 Gateway Timeout: Too large resource version: 99, current: 4"
        api.refuse.clear()
        api.put(NODES, node("n-3", declared("n-3")))
        until("watching again", lambda: fleet_names(client) == ["n-2", "n-3"], timeout=20)


def test_a_list_whose_continue_tokens_expire_is_made_whole_as_client_gos_pager_makes_it(api, tmp_path):
    # paging slower than the server keeps its snapshot: every continue token answers 410 Expired.
    # Paging again from the start expires the same way each time; one list without `limit` does not
    api.put_many(NODES, [node(f"n-{k:04d}", declared(f"n-{k:04d}")) for k in range(600)])
    api.expire_continues = True
    app, client = serving(api, tmp_path)
    with client:
        until("synced", lambda: ready(client), timeout=20)
        assert len(fleet_names(client)) == 600
        lists = [r for r in api.requests if r.startswith("GET /api/v1/nodes") and "watch=" not in r]
        assert "limit=500" in lists[0] and "continue=" in lists[1] and "limit=" not in lists[2], lists


def test_a_refused_list_is_told_in_the_api_servers_own_words(api, tmp_path):
    # client-go logs the Status message (who is refused what); the code and reason alone do not
    # tell a missing RBAC rule from anything else
    api.put(NODES, node("n-1", declared("n-1")))
    message = 'nodes is forbidden: User "system:serviceaccount:a3:a3fast" cannot list resource "nodes" at the cluster scope'
    api.refuse["list"] = (403, "Forbidden", message)
    app, client = serving(api, tmp_path)
    with client:
        until("refused", lambda: nodes_collection(client)["failures"] >= 1)
        assert nodes_collection(client)["last_error"] == f"HTTP 403 Forbidden: {message}"
        assert not ready(client)
        api.refuse.clear()
        until("synced", lambda: ready(client), timeout=20)


def test_what_a_failed_request_says_and_whether_a_list_follows():
    # the client raises ApiException for server answers and, with status 0, for a TLS failure that
    # got none; an error event's words come in `reason`, an answer's in its Status body
    from kubernetes.client.rest import ApiException

    from a3fast.service.k8s_watch import ERROR_TEXT, _error_text, _lists_again_after

    no_answer = ApiException(status=0, reason="SSLError\nEOF occurred in violation of protocol (_ssl.c:2427)")
    assert _error_text(no_answer) == "SSLError EOF occurred in violation of protocol (_ssl.c:2427)"
    assert not _lists_again_after(no_answer)
    event = ApiException(status=500, reason="InternalError: " + "etcd is slow " * 100)
    assert len(_error_text(event)) <= ERROR_TEXT + 2 and "\n" not in _error_text(event)
    assert _lists_again_after(event)
    assert not _lists_again_after(ApiException(status=429, reason="Too Many Requests"))
    assert not _lists_again_after(ConnectionResetError(104, "Connection reset by peer"))
    answer = ApiException(status=504, reason="Gateway Timeout")
    answer.body = orjson.dumps(_status(504, "Timeout", "Too large resource version: 99, current: 4"))
    assert _error_text(answer) == "HTTP 504 Gateway Timeout: Too large resource version: 99, current: 4"
    assert _lists_again_after(answer)
