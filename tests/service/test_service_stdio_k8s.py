"""`a3fast serve --stdio` (the Kubernetes scheduler extender: tests/service/test_k8s_extender.py)."""
from __future__ import annotations

import subprocess
import sys

import jsonschema
import orjson
import pytest

from a3fast.service.openapi import load_schema
from service_process import SECTION_10_AGENTS, SECTION_10_TASK

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
