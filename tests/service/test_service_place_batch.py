"""POST /v1/place with a JSON array of place requests: the answers come in order, one per request,
with exactly the placements, records and trace of the same requests posted one at a time (sessions
in order: the second task of a session is scored with the hold the first one made); a refused
request is answered in its turn with the status and problems it alone gets, and the rest are placed;
the array's length is bounded (docs/service.md, "Placing many tasks in one request"). Answers in the
`compact-stream` form are the one exception: a response's are one slice, each snapshot carried once
(tests/service/test_service_stdio_stream.py)."""
from __future__ import annotations

import re

import orjson
import pytest

from a3fast.service.app import MAX_PLACE_BATCH
from a3fast.workload import generate_fleet, generate_tasks

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from test_k8s_extender import wait_ready  # noqa: E402

FLEET = generate_fleet(30, seed=5)
TASKS = generate_tasks(FLEET, 12, seed=5)
_TIMINGS = re.compile(rb',?"timings":\{[^{}]*\}')


def _requests() -> list[bytes]:
    """Every neighbour a placement can have: sessions repeated, a route, refused requests of each
    kind, hostile values, every record form an HTTP request may ask for."""
    out = []
    for i, task in enumerate(TASKS):
        body: dict = {"requirements": task}
        if i % 3 == 1:
            body["session"] = f"s{i % 2}"                # each session placed more than once
        if i % 4 == 2:
            body["record"] = "compact"
        if i == 5:
            body["route"] = {"name": "strict", "adds": {"clearances": ["audit.read"]}}
        out.append(orjson.dumps(body))
        if i == 3:
            out += [orjson.dumps({"requirements": task, "session": "twice"})] * 2
    out[7:7] = [b'{"requirements": {"capabilities": 7}}', b'{"requirements": 7}', b"7",
                b'{"requirements": {}, "record": "compacted"}', b'{"requirements": {}, "session": 7}',
                b'{"requirements": {"x": 1e400}}', b'{"requirements": {}, "x": "\xff"}',
                b'{"requirements": {}, "x": ' + b"[" * 40 + b"]" * 40 + b"}",
                b'{"requirements": {"residency": "eu"}, "route": {"name": "r", "adds": {"residency": "us"}}}',
                b'{"requirements": ' + orjson.dumps(TASKS[0]) + b', "route": {"name": ""}}']
    return out


def _client():
    client = TestClient(create_app(ServiceConfig()))
    client.__enter__()
    wait_ready(client)
    assert client.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in FLEET)).status_code == 200
    return client


def _one_at_a_time(bodies: list[bytes], query: str = "") -> tuple[list[tuple[int, bytes]], bytes]:
    client = _client()
    try:
        answers = [client.post("/v1/place" + query, content=b) for b in bodies]
        return [(a.status_code, _TIMINGS.sub(b"", a.content)) for a in answers], client.get("/v1/trace").content
    finally:
        client.__exit__(None, None, None)


def _batched(bodies: list[bytes], query: str = "") -> tuple[list[tuple[int, bytes]], bytes]:
    client = _client()
    try:
        r = client.post("/v1/place" + query, content=b"[" + b",".join(bodies) + b"]")
        assert r.status_code == 200, r.text
        answers = []
        for answer in r.json():
            status = answer.pop("status", 200)
            answers.append((status, _TIMINGS.sub(b"", orjson.dumps(answer))))
        return answers, client.get("/v1/trace").content
    finally:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("query", ["", "?record=compact"])
def test_a_batch_answers_and_traces_as_its_requests_one_at_a_time(query):
    bodies = _requests()
    alone, alone_trace = _one_at_a_time(bodies, query)
    together, together_trace = _batched(bodies, query)
    assert len(together) == len(bodies)
    assert together == [(status, orjson.dumps(orjson.loads(body))) for status, body in alone]
    assert {status for status, _ in together} == {200, 400, 422}
    assert _TIMINGS.sub(b"", together_trace) == _TIMINGS.sub(b"", alone_trace)


def test_the_second_task_of_a_session_sees_the_hold_of_the_first():
    task = TASKS[0]
    body = orjson.dumps({"requirements": task, "session": "held"})
    answers, _ = _batched([body, body])
    first, second = (orjson.loads(a) for _, a in answers)
    admitted = [r["content"]["agent"] for r in first["records"] if r["kind"] == "task.admitted"]
    assert admitted, "the task is schedulable by construction"
    again = [r["content"]["agent"] for r in second["records"] if r["kind"] == "task.admitted"]
    assert again == admitted                  # the session's holder, preferred by affinity
    assert [r["seq"] for r in second["records"]][0] == first["records"][-1]["seq"] + 1


def test_a_batch_inside_a_batch_is_a_request_refused_in_its_turn():
    body = orjson.dumps({"requirements": TASKS[0]})
    answers, _ = _batched([body, b"[" + body + b"]", body])
    assert [status for status, _ in answers] == [200, 400, 200]
    assert orjson.loads(answers[1][1]) == {"problems": [{"path": "$", "expected": "an object {requirements, session?, route?, record?}",
                                                         "found": "another value"}]}


def test_an_empty_batch_is_answered_with_no_answers():
    client = _client()
    try:
        r = client.post("/v1/place", content=b" \n[ ]")
        assert (r.status_code, r.json()) == (200, [])
    finally:
        client.__exit__(None, None, None)


def test_a_batch_past_its_bound_is_refused_whole_and_places_nothing():
    client = _client()
    try:
        before = client.get("/v1/trace").content
        body = orjson.dumps({"requirements": TASKS[0]})
        r = client.post("/v1/place", content=b"[" + b",".join([body] * (MAX_PLACE_BATCH + 1)) + b"]")
        assert r.status_code == 413
        assert r.json() == {"problems": [{"path": "$", "expected": f"an array of at most {MAX_PLACE_BATCH} place requests",
                                          "found": str(MAX_PLACE_BATCH + 1)}]}
        assert client.get("/v1/trace").content == before
        r = client.post("/v1/place", content=b"[" + b",".join([body] * MAX_PLACE_BATCH) + b"]")
        assert r.status_code == 200 and len(r.json()) == MAX_PLACE_BATCH
    finally:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("body", [b"[", b'[{"requirements": {}},]', b"[1, 2", b'[{"requirements": {}}] x',
                                  b'[{"requirements": {}}, {"requirements": {"kind": "\\ud800"}}]'])
def test_a_batch_that_is_not_json_is_refused_as_a_single_body_would_be(body):
    client = _client()
    try:
        r = client.post("/v1/place", content=body)
        assert r.status_code == 400
        problem = r.json()["problems"][0]
        assert (problem["path"], problem["expected"]) == ("$", "valid JSON")
    finally:
        client.__exit__(None, None, None)
