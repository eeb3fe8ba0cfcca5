"""Edges of the HTTP API where a request was read as something its client did not send: path names
decoded with bytes replaced or re-split, bodies of the wrong shape named at a member that does not
exist, members ignored, bounds clamped or dropped. A real server process and a real HTTP client."""
from __future__ import annotations

import subprocess
import sys

import pytest

from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server, put_section_10_agents

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server("--state", str(tmp_path_factory.mktemp("state")))
    put_section_10_agents(s.client)
    for _ in range(3):
        assert s.client.post("/v1/place", json={"requirements": SECTION_10_TASK}).status_code == 200
    yield s
    assert s.stop() == 0


def _problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["problems"][0]


def test_a_path_name_whose_bytes_are_not_utf8_is_refused_not_replaced(server):
    decl = {**SECTION_10_AGENTS[0], "agent": {"name": "\ufffd", "namespace": "support"}}
    # every such byte decoded to U+FFFD: %FF added an agent that %FE read and %80 deleted
    assert _problem(server.client.put("/v1/agents/%FF", json=decl), 400) == {
        "path": "$", "expected": "a path whose percent-encoded bytes are UTF-8", "found": "the byte 0xff"}
    assert _problem(server.client.get("/v1/agents/%FE"), 400)["found"] == "the byte 0xfe"
    assert _problem(server.client.put("/v1/sessions/%ED%A0%80/order-analyst"), 400)["found"] == "the byte 0xed"
    assert server.client.get("/v1/agents/%EF%BF%BD").status_code == 404     # U+FFFD written as itself: a name


def test_an_encoded_slash_in_a_session_id_is_refused_not_moved_to_the_agent(server):
    # the path was split after decoding: s%2Fteam/order-analyst held session "s" on agent "team/order-analyst"
    found = _problem(server.client.put("/v1/sessions/s%2Fteam/order-analyst"), 400)
    assert found["path"] == "$.session" and found["found"] == "'s%2Fteam'"
    assert server.client.put("/v1/sessions/s1/order-analyst").json() == {
        "agent": "order-analyst", "session": "s1", "held": True}


def test_a_body_that_is_no_object_is_named_at_the_top(server):
    assert _problem(server.client.put("/v1/agents/x", content=b"null"), 400) == {
        "path": "$", "expected": "a declaration (§3)", "found": "null"}
    assert _problem(server.client.post("/v1/outcomes", content=b"[1]"), 400)["path"] == "$"


def test_an_outcomes_requirements_are_checked_when_a_kind_is_given_too(server):
    before = server.client.post("/v1/outcomes", json={"agent": "order-analyst", "kind": "k", "success": True}).json()
    for bad in (5, {"v": "9.9", "capabilities": "junk"}):
        r = server.client.post("/v1/outcomes", json={"agent": "order-analyst", "kind": "k", "requirements": bad,
                                                     "success": True})
        assert _problem(r, 400)["path"].startswith("$.requirements")
    after = server.client.post("/v1/outcomes", json={"agent": "order-analyst", "kind": "k", "success": True}).json()
    assert after["attempts"] == before["attempts"] + 1          # the refused ones counted nothing


def test_the_trace_route_takes_limit_as_the_stdio_op_does(server):
    whole = server.client.get("/v1/trace").content.splitlines()
    assert len(whole) >= 9
    assert server.client.get("/v1/trace?limit=2").content.splitlines() == whole[:2]
    for bad in ("0", "100001", "abc"):
        assert _problem(server.client.get(f"/v1/trace?limit={bad}"), 400)["path"] == "$.limit"
    # a slice from where a placement's records begin stands alone and verifies
    piece = server.client.get("/v1/trace?since=3&limit=3").content
    done = subprocess.run([sys.executable, "-m", "a3fast", "verify", "-"], input=piece, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout


def test_replay_refuses_what_it_clamped_or_misplaced(server):
    post = server.client.post
    assert _problem(post("/v1/replay", json={"since": 0, "show": 5000}), 400)["path"] == "$.show"
    assert _problem(post("/v1/replay", json={"since": 50, "until": 3}), 400)["path"] == "$.until"
    assert _problem(post("/v1/replay", json={"since": 0, "route": {"name": "r", "adds": 5}}), 400)["path"] == \
        "$.route.adds"
    # a route that would change what a recorded task asks is the route's fault, not the range's
    changing = {"since": 0, "route": {"name": "r", "adds": {"residency": ["eu"]}}}
    found = _problem(post("/v1/replay", json=changing), 422)
    assert found["path"] == "$.route" and "would change residency" in found["found"]
