"""A place request decoded straight into its typed fields (a stdio line, an HTTP body) answers
exactly as the general path (the request as a dict, each field checked by the operation) answers
the same text, and every text the typed decoding cannot vouch for goes the general way."""
from __future__ import annotations

import io
import re

import orjson
import pytest

from a3fast.schema import parse_declaration
from a3fast.service import stdio
from a3fast.service.operations import Operations, PlaceRequest, decode_place_request
from a3fast.service.problems import MAX_DEPTH, MAX_STRING
from a3fast.service.state import ServiceState
from a3fast.workload import generate_fleet, generate_tasks

FLEET = generate_fleet(30, seed=8)
TASKS = generate_tasks(FLEET, 8, seed=8)
_TIMINGS = re.compile(rb',?"timings":\{[^}]*\}')


def _lines() -> list[bytes]:
    task = TASKS[0]
    requests = [{"op": "place", "id": i, "requirements": t, "record": form}
                for i, t in enumerate(TASKS) for form in ("spec", "compact", "compact-stream")]
    requests += [
        {"op": "place", "id": "session", "requirements": task, "session": "s1"},
        {"op": "place", "id": "unknown-field", "requirements": task, "extra": [1, 2]},
        {"op": "place", "id": "record-x", "requirements": task, "record": "x"},
        {"op": "place", "id": "record-7", "requirements": task, "record": 7},
        {"op": "place", "id": "session-7", "requirements": task, "session": 7},
        {"op": "place", "id": "requirements-list", "requirements": [task]},
        {"op": "place", "id": "no-requirements"},
        {"op": "place", "id": "bad-requirements", "requirements": {"capabilities": 7}},
        # more than one problem: each way names the same one first (session, record, requirements)
        {"op": "place", "id": "bad-requirements-and-session", "requirements": {"capabilities": 7}, "session": ""},
        {"op": "place", "id": "bad-session-and-record", "requirements": task, "session": "", "record": "x"},
        {"op": "place", "id": "bad-requirements-and-record", "requirements": {"capabilities": 7}, "record": "x"},
        {"op": "place", "id": "route", "requirements": task, "route": {"name": "r", "adds": {"clearances": ["x.y"]}}},
        {"op": "place", "id": "deep", "requirements": task, "extra": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
        {"op": "place", "id": "long", "requirements": {**task, "kind": "k" * (MAX_STRING + 1)}},
    ]
    task_json = orjson.dumps(task)
    return [orjson.dumps(r) for r in requests] + [
        b'{"op": "place", "id": "twice", "requirements": {}, "requirements": ' + task_json + b"}",
        b'{"op": "place", "id": 18446744073709551616, "requirements": ' + task_json + b"}",
        *(b'{"op": "place", "id": "unknown-' + name + b'", "requirements": ' + task_json + b', "extra": ' + value + b"}"
          for name, value in BAD_MEMBERS)]


#: values JSON or the document rule refuses, in a member the typed request does not know (the
#: general path reads and refuses them; the typed one must not pass over them)
BAD_MEMBERS = [(b"huge", b"1e400"), (b"bad-utf8", b'"\xff\xfe"'),
               (b"nested", b'{"k": -1e999}'), (b"surrogate", b'"\\ud800"')]


def _answers(typed: bool, monkeypatch) -> bytes:
    if not typed:
        monkeypatch.setattr(stdio, "decode_place_request", lambda line: None)
    state = ServiceState()
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in FLEET])
        out = io.BytesIO()
        data = b"\n".join(_lines()) + b"\n"
        stdio.serve_stdio_sync(Operations(state, stream=True), io.BytesIO(data), out, len(data) + 1)
        return _TIMINGS.sub(b"", out.getvalue())
    finally:
        state.close()
        monkeypatch.undo()


def test_typed_place_requests_answer_as_the_general_path_does(monkeypatch):
    typed, general = _answers(True, monkeypatch), _answers(False, monkeypatch)
    assert typed.count(b"\n") == len(_lines())
    assert typed == general


@pytest.mark.parametrize("request_", [
    {"op": "place", "requirements": {}, "route": {"name": "r"}},
    {"op": "place", "requirements": {}, "session": 7},
    {"op": "place", "requirements": []},
    {"op": "trace"},
])
def test_lines_the_typed_decoding_cannot_vouch_for_go_the_general_way(request_):
    assert decode_place_request(orjson.dumps(request_)) is None


def test_an_integer_past_64_bits_goes_the_general_way():
    assert decode_place_request(b'{"op":"place","id":18446744073709551616,"requirements":{}}') is None


def test_nesting_past_the_service_bound_goes_the_general_way():
    deep = b'{"op":"place","requirements":{},"x":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"
    assert decode_place_request(deep) is None
    assert isinstance(decode_place_request(b'{"op":"place","requirements":{"kind":"[[["}}'), PlaceRequest)



def _http_answers(typed: bool, monkeypatch) -> list[tuple[int, bytes]]:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from a3fast.service import app as app_module
    from test_k8s_extender import wait_ready

    if not typed:
        monkeypatch.setattr(app_module, "decode_place_request", lambda data: None)
    bodies = [orjson.dumps({"requirements": t, **extra}) for t in TASKS[:3]
              for extra in ({}, {"session": "s"}, {"record": "x"}, {"session": 7}, {"op": "trace"})]
    bodies += [b"[]", b'{"requirements": 7}']
    bodies += [b'{"requirements": ' + orjson.dumps(TASKS[0]) + b', "extra": ' + value + b"}" for _, value in BAD_MEMBERS]
    out = []
    with TestClient(app_module.create_app()) as client:
        wait_ready(client)
        assert client.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in FLEET)).status_code == 200
        for query in ("", "?record=compact", "?record=compact-stream"):
            for body in bodies:
                r = client.post("/v1/place" + query, content=body)
                out.append((r.status_code, _TIMINGS.sub(b"", r.content)))
    monkeypatch.undo()
    return out


def test_http_place_bodies_decoded_typed_answer_as_the_general_path_does(monkeypatch):
    typed, general = _http_answers(True, monkeypatch), _http_answers(False, monkeypatch)
    assert {status for status, _ in typed} == {200, 400}
    assert typed == general


def test_nesting_inside_requirements_past_the_service_bound_goes_the_general_way_and_is_refused():
    """The typed decoding knows every member of a place request but not what is inside
    `requirements`, so only the service's own nesting bound (32, not the document rule's 128) lets
    it vouch for a text: a requirements document 40 levels deep is refused as the general path
    refuses it, not placed."""
    depth = MAX_DEPTH + 8
    deep = orjson.dumps({"op": "place", "id": "deep", "requirements": {**TASKS[0], "x": 1}})
    deep = deep.replace(b'"x":1', b'"x":' + b"[" * depth + b"1" + b"]" * depth)
    assert deep.count(b"[") + deep.count(b"{") <= 128
    assert decode_place_request(deep) is None
    state = ServiceState()
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in FLEET])
        out = io.BytesIO()
        stdio.serve_stdio_sync(Operations(state), io.BytesIO(deep + b"\n"), out, len(deep) + 2)
    finally:
        state.close()
    answer = orjson.loads(out.getvalue())
    assert "records" not in answer, answer
    assert f"at most {MAX_DEPTH} nested arrays and objects".encode() in out.getvalue()

