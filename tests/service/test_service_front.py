"""The layer before every route (`Front`): the nosniff header on every answer, once; the latency
histogram by route; exceptions answered from the refusals table or as a bare 500; authentication
before readiness, both before any route; the pure ASGI routes answered without Starlette's."""
from __future__ import annotations

import asyncio
import re
import threading

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from a3fast.service import app as app_module  # noqa: E402
from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from service_process import SECTION_10_AGENTS, SECTION_10_TASK  # noqa: E402
from test_k8s_extender import wait_ready  # noqa: E402

TOKEN = "front-token"
AUTHORISED = {"Authorization": f"Bearer {TOKEN}"}
PLACE = {"requirements": SECTION_10_TASK}


def front_of(app) -> app_module.Front:
    if app.middleware_stack is None:
        app.middleware_stack = app.build_middleware_stack()
    front = app.middleware_stack
    while not isinstance(front, app_module.Front):
        front = front.app
    return front


@pytest.fixture
def client(tmp_path):
    config = ServiceConfig(token=TOKEN, state=tmp_path / "state", fsync="never")
    with TestClient(create_app(config), raise_server_exceptions=False) as c:
        wait_ready(c)
        for agent in SECTION_10_AGENTS:
            assert c.put(f"/v1/agents/{agent['agent']['name']}", json=agent, headers=AUTHORISED).status_code == 200
        yield c


def timed(client, route: str, method: str) -> float:
    """How many requests the histogram holds for `route` and `method`."""
    text = client.get("/metrics").text
    found = re.findall(rf'^a3fast_request_seconds_count\{{[^}}]*route="{re.escape(route)}"[^}}]*'
                       rf'method="{method}"[^}}]*\}} (\S+)$', text, re.M)
    found += re.findall(rf'^a3fast_request_seconds_count\{{[^}}]*method="{method}"[^}}]*'
                        rf'route="{re.escape(route)}"[^}}]*\}} (\S+)$', text, re.M)
    return sum(float(n) for n in found)


def answered(front: app_module.Front, method: str, path: str, headers: list) -> list[dict]:
    """The ASGI messages `front` sends for one bodiless request, its state taken as loaded."""
    front.state.ready = True
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": headers}
    asyncio.run(front(scope, receive, send))
    return sent


def test_every_answer_says_nosniff_once_whoever_answers(client, monkeypatch):
    answers = [
        client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED),   # the fast route
        client.post("/v1/place", content=b"{", headers=AUTHORISED),                           # its refusal
        client.get("/v1/agents", headers=AUTHORISED),                                         # a Starlette route
        client.get("/v1/nothing", headers=AUTHORISED),                                        # no route
        client.post("/v1/place", json={"requirements": SECTION_10_TASK}),                     # refused before routing
        client.get("/ui", headers=AUTHORISED),                                                # sets its own
    ]
    monkeypatch.setattr(app_module, "decode_place_request", _broken)
    answers.append(client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED))
    assert [a.status_code for a in answers] == [200, 400, 200, 404, 401, 200, 500]
    for answer in answers:
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"], answer.request.url


def _broken(data):
    raise RuntimeError("a fault no refusal names")


def test_an_unexpected_fault_is_a_bare_500_its_traceback_logged_not_sent(client, monkeypatch, caplog):
    monkeypatch.setattr(app_module, "decode_place_request", _broken)
    answer = client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED)
    assert answer.status_code == 500
    assert "a fault no refusal names" not in answer.text and "Traceback" not in answer.text
    assert any("unexpected error answering POST /v1/place" in r.getMessage() for r in caplog.records)


def test_a_fault_after_the_answer_started_sends_nothing_more(tmp_path):
    """Read at the ASGI level: a test client keeps the first answer even if a second one is sent."""
    app = create_app(ServiceConfig(token=TOKEN, state=tmp_path / "state", fsync="never"))

    async def started_then_broken(scope, receive, send):
        await app_module.start_json_answer(send, 2)
        await send({"type": "http.response.body", "body": b"{}"})
        raise RuntimeError("after the answer")
    front = front_of(app)
    front.fast[("POST", "/v1/place")] = started_then_broken
    sent = answered(front, "POST", "/v1/place", [(b"authorization", f"Bearer {TOKEN}".encode())])
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["headers"].count(app_module.NOSNIFF) == 1


def test_a_fault_is_timed_once_by_its_route(client, monkeypatch):
    before = timed(client, "/v1/place", "POST")
    monkeypatch.setattr(app_module, "decode_place_request", _broken)
    assert client.post("/v1/place", json=PLACE, headers=AUTHORISED).status_code == 500
    assert timed(client, "/v1/place", "POST") - before == 1


def test_requests_are_timed_by_route_refusals_before_routing_as_unmatched(client):
    before = {key: timed(client, *key) for key in (("/v1/place", "POST"), ("unmatched", "POST"),
                                                   ("/v1/agents/{name:rest}", "GET"))}
    assert client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED).status_code == 200
    assert client.post("/v1/place", json={"requirements": SECTION_10_TASK}).status_code == 401
    assert client.post("/v1/place", json={"requirements": SECTION_10_TASK},
                       headers={"Authorization": "Bearer wrong"}).status_code == 401
    name = SECTION_10_AGENTS[0]["agent"]["name"]
    assert client.get(f"/v1/agents/{name}", headers=AUTHORISED).status_code == 200
    after = {key: timed(client, *key) for key in before}
    assert after[("/v1/place", "POST")] - before[("/v1/place", "POST")] == 1
    assert after[("unmatched", "POST")] - before[("unmatched", "POST")] == 2
    assert after[("/v1/agents/{name:rest}", "GET")] - before[("/v1/agents/{name:rest}", "GET")] == 1


def test_authentication_comes_before_readiness(client):
    """An unauthorised caller learns nothing of the state: 401 while the journal has failed, where an
    authorised one is told 503; the open routes answer both."""
    front = client.app.middleware_stack
    while not isinstance(front, app_module.Front):
        front = front.app
    journal = front.state.durable_fleet.journal
    journal.failed = "writing the journal failed: a test"
    try:
        assert client.post("/v1/place", json={"requirements": SECTION_10_TASK}).status_code == 401
        refused = client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED)
        assert refused.status_code == 503 and "a test" in refused.text
        assert client.get("/metrics").status_code == 200
    finally:
        journal.failed = None
    assert client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED).status_code == 200


def test_while_the_state_loads_only_the_open_routes_answer(tmp_path, monkeypatch):
    release = threading.Event()
    real_open = app_module._open

    def slow_open(*args):
        release.wait(10)
        real_open(*args)
    monkeypatch.setattr(app_module, "_open", slow_open)
    with TestClient(create_app(ServiceConfig(token=TOKEN, state=tmp_path / "state", fsync="never"))) as c:
        try:
            refused = c.post("/v1/place", json=PLACE, headers=AUTHORISED)
            assert refused.status_code == 503 and "still loading" in refused.text
            assert refused.headers.get_list("x-content-type-options") == ["nosniff"]
            assert c.get("/v1/agents", headers=AUTHORISED).status_code == 503
            assert c.get("/healthz").status_code == 200
            assert c.get("/readyz").status_code == 503            # its own answer: loading
            assert c.get("/v1/agents").status_code == 401         # authentication first
        finally:
            release.set()
        wait_ready(c)


def _with_client_certificate(app, verified: bool):
    """The app behind a TLS connection whose client certificate did, or did not, verify (what
    uvicorn's TLS extension says of it)."""
    tls = {"client_cert_name": "CN=kube-scheduler" if verified else None,
           "client_cert_error": None if verified else "no client certificate presented"}

    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            scope["extensions"] = {**scope.get("extensions", {}), "tls": tls}
        await app(scope, receive, send)
    return asgi


def test_a_client_certificate_passes_authentication_not_readiness(tmp_path):
    app = create_app(ServiceConfig(token=TOKEN, state=tmp_path / "state", fsync="never",
                                   tls_client_ca=tmp_path / "ca.pem"))
    front = front_of(app)
    with TestClient(_with_client_certificate(app, True)) as c:
        wait_ready(c)
        assert c.post("/k8s/filter", json={}).status_code == 400          # past the front: the extender's own
        journal = front.state.durable_fleet.journal
        journal.failed = "writing the journal failed: a test"
        try:
            assert c.post("/k8s/filter", json={}).status_code == 503      # readiness still applies
        finally:
            journal.failed = None

        class Unsynced:
            synced = False
        front.kube = Unsynced()
        try:
            assert c.post("/k8s/filter", json={}).status_code == 503      # the cluster not listed yet
            assert c.post("/v1/place", json=PLACE, headers=AUTHORISED).status_code == 503
            assert c.get("/v1/agents", headers=AUTHORISED).status_code == 200
        finally:
            front.kube = None
    with TestClient(_with_client_certificate(app, False)) as c:
        wait_ready(c)
        refused = c.post("/k8s/filter", json={}, headers=AUTHORISED)       # a token is no certificate
        assert refused.status_code == 401 and "www-authenticate" not in refused.headers


def test_an_answer_whose_headers_are_any_iterable_of_pairs_gets_nosniff_once(tmp_path):
    """ASGI lets an answer's headers be any iterable of pairs (a generator, pairs as lists)."""
    app = create_app(ServiceConfig(state=tmp_path / "state", fsync="never"))
    front = front_of(app)

    async def inner(scope, receive, send):
        pairs = ([b"content-type", b"text/plain"], [b"x-kept", b"1"])
        await send({"type": "http.response.start", "status": 200, "headers": (pair for pair in pairs)})
        await send({"type": "http.response.body", "body": b"ok"})
    front.app = inner
    sent = answered(front, "GET", "/elsewhere", [])
    headers = [tuple(pair) for pair in sent[0]["headers"]]
    assert headers == [(b"content-type", b"text/plain"), (b"x-kept", b"1"), app_module.NOSNIFF]
