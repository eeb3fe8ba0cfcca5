"""The layer before every route (`Front`): the nosniff header on every answer, once; the latency
histogram by route; exceptions answered from the refusals table or as a bare 500; authentication
before readiness, both before any route; the pure ASGI routes answered without Starlette's."""
from __future__ import annotations

import re

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


def test_a_fault_after_the_answer_started_sends_no_second_answer(client, monkeypatch):
    async def started_then_broken(scope, receive, send):
        await app_module.start_json_answer(send, 2)
        await send({"type": "http.response.body", "body": b"{}"})
        raise RuntimeError("after the answer")
    app = client.app
    front = app.middleware_stack
    while not isinstance(front, app_module.Front):
        front = front.app
    monkeypatch.setitem(front.fast, ("POST", "/v1/place"), started_then_broken)
    answer = client.post("/v1/place", json={"requirements": SECTION_10_TASK}, headers=AUTHORISED)
    assert (answer.status_code, answer.content) == (200, b"{}")
    assert answer.headers.get_list("x-content-type-options") == ["nosniff"]


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
