"""POST /v1/replay against a real server process: the service's own trace replayed on the served
fleet (no change) and on a posted one, a posted trace, bounds, and bad requests as 4xx problems."""
from __future__ import annotations

import jsonschema
import orjson
import pytest

from a3fast.service.openapi import load_schema
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server, put_section_10_agents

pytest.importorskip("starlette")

REVOKED = [{**a, "clearances": [c for c in a["clearances"] if c != "orders.read"]} for a in SECTION_10_AGENTS]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server("--state", str(tmp_path_factory.mktemp("state")))
    put_section_10_agents(s.client)
    for record in ("spec", "compact", "spec"):
        assert s.client.post(f"/v1/place?record={record}", json={"requirements": {**SECTION_10_TASK, "session": "s1"}}
                             ).status_code == 200
    assert s.client.post("/v1/place", json={"requirements": {"v": "1.0", "clearances": ["nobody.has"]}}).status_code == 200
    for record in ("spec", "compact"):   # a session given in the body, beside the requirements
        assert s.client.post(f"/v1/place?record={record}", json={"requirements": SECTION_10_TASK, "session": "s2"}
                             ).status_code == 200
    yield s
    assert s.stop() == 0


def replayed(server, body, status=200):
    r = server.client.post("/v1/replay", json=body)
    assert r.status_code == status, r.text
    jsonschema.validate(r.json(), load_schema("replay.response" if status == 200 else "error"))
    return r.json()


def test_the_services_own_trace_on_the_served_fleet_changes_nothing(server):
    for compare in ("baseline", "recorded"):
        answer = replayed(server, {"since": 0, "fail_on": "changed>0", "compare": compare})
        assert answer["summary"]["placements"] == 6
        assert (answer["summary"]["changed"], answer["passed"]) == (0, True), answer["changes"]
        assert answer["summary"]["kinds"]["still_rejected"] == 1
    assert b'"a3fast.session":"s2"' in server.client.get("/v1/trace").content


def test_a_posted_fleet_shows_what_would_change_and_why(server):
    answer = replayed(server, {"fleet": REVOKED, "fail_on": "unschedulable>0", "show": 1})
    assert answer["summary"]["kinds"]["unschedulable"] == 5 and answer["passed"] is False
    (change,) = answer["changes"]
    assert change["before"] == "order-analyst" and change["before_fails"] == "clearance:orders.read"
    assert change["decided_by"] == "clearance:orders.read"


def test_since_and_until_bound_the_range_replayed(server):
    trace = [orjson.loads(x) for x in server.client.get("/v1/trace").content.splitlines()]
    placements = [r["seq"] for r in trace if r["kind"] in ("task.bound", "task.rejected")]
    answer = replayed(server, {"since": placements[0], "until": placements[2], "fleet": REVOKED})
    assert answer["summary"]["placements"] == 2


def test_a_posted_trace_is_replayed_and_the_served_fleet_is_left_as_it_was(server):
    trace = [orjson.loads(x) for x in server.client.get("/v1/trace").content.splitlines()]
    before = server.client.get("/readyz").json()
    answer = replayed(server, {"trace": trace, "weights": [0, 0, 1, 0]})
    assert answer["summary"]["placements"] == 6
    assert server.client.get("/readyz").json() == before


@pytest.mark.parametrize("body, status, path", [
    ({"since": -1}, 400, "$.since"),
    ({"trace": [], "since": 3}, 400, "$.since"),
    ({"fail_on": "moved>>1"}, 400, "$.fail_on"),
    ({"weights": [1, 2]}, 400, "$.weights"),
    ({"route": {"name": "r", "adds": {}}}, 422, "$.route"),      # as a place request's (the errors table)
    ({"route": {"name": "", "adds": {"clearances": ["a.b"]}}}, 400, "$.route.name"),
    ({"route": {"name": "r\n", "adds": {"clearances": ["a.b"]}}}, 400, "$.route.name"),
    # a route whose additions make requirements no task may have: the route's, not the weights'
    ({"route": {"name": "r", "adds": {"capabilities": [5]}}}, 400, "$.route.adds"),
    ({"fleet": [{"v": "1.0"}]}, 400, "$.fleet[0].agent"),
    ({"bogus": 1}, 400, "$.bogus"),
    ({"trace": [{"seq": 1, "kind": "task.rejected", "content": {}}]}, 422, "$.trace"),
])
def test_bad_replay_requests_are_problems_naming_the_field(server, body, status, path):
    problems = replayed(server, body, status)["problems"]
    assert problems[0]["path"] == path, problems


def test_a_bad_fail_on_rule_is_named_in_the_routes_words_not_the_command_lines(server):
    problem = replayed(server, {"since": 0, "fail_on": "moved>abc"}, 400)["problems"][0]
    assert problem["path"] == "$.fail_on"
    assert problem["found"].startswith("'moved>abc': expected KIND>N") and "--fail-on" not in problem["found"]


def test_a_body_past_the_limit_is_413(tmp_path):
    small = Server("--max-body", "1000")
    try:
        body = orjson.dumps({"trace": [{"seq": i, "kind": "task.note", "content": {}} for i in range(100)]})
        r = small.client.post("/v1/replay", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = small.client.post("/v1/replay", content=iter([body]))   # no Content-Length: counted as read
        assert r.status_code == 413
    finally:
        assert small.stop() == 0


def test_a_range_starting_after_the_compact_snapshot_still_shows_the_recorded_funnel(server):
    # a second compact placement names the fleet snapshot the first one carried: a range that starts
    # between them is given the snapshot, so the change's recorded funnel can still be read
    assert server.client.post("/v1/place?record=compact", json={"requirements": SECTION_10_TASK}).status_code == 200
    trace = [orjson.loads(x) for x in server.client.get("/v1/trace").content.splitlines()]
    compact = [r for r in trace if r["kind"] == "task.bound" and "a3fast.compact" in r["content"]]
    assert isinstance(compact[-1]["content"]["a3fast.compact"]["fleet"], int)
    seq = compact[-1]["seq"]
    answer = replayed(server, {"since": seq - 1, "fleet": REVOKED})
    (change,) = answer["changes"]
    assert change["seq"] == seq
    assert change["funnel_before"]["candidates"] == 2 and change["funnel_before"]["eligible"] == 1
