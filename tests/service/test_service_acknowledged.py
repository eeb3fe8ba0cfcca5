"""Each state-changing operation, on its own: killed with SIGKILL straight after its acknowledgement
(no later request that could flush the journal for it), the change is there after the restart —
over HTTP and over stdio."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from a3fast.service.state import ServiceState
from service_process import Server

pytest.importorskip("starlette")

KIND = "order.investigate"
TASK = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 1}], "residency": "eu"}


def decl(name, version=1):
    return {"v": "1.0", "agent": {"name": name, "namespace": "acked"},
            "capabilities": [{"name": "order.investigate", "version": version}],
            "clearances": [], "residency": ["eu"]}


# operation -> (HTTP request, stdio request, what the restarted state shows)
OPERATIONS = {
    "put_agent": (("PUT", "/v1/agents/new", {"json": decl("new")}),
                  {"op": "put_agent", "name": "new", "declaration": decl("new")},
                  lambda st: st.fleet.get("new") is not None),
    "put_agent (replace)": (("PUT", "/v1/agents/a", {"json": decl("a", 2)}),
                            {"op": "put_agent", "name": "a", "declaration": decl("a", 2)},
                            lambda st: st.fleet.get("a").doc == decl("a", 2)),
    "put_agents": (("POST", "/v1/agents", {"content": b"\n".join(orjson.dumps(decl(f"bulk{k}")) for k in range(3))}),
                   {"op": "put_agents", "declarations": [decl(f"bulk{k}") for k in range(3)]},
                   lambda st: all(f"bulk{k}" in st.fleet for k in range(3))),
    "delete_agent": (("DELETE", "/v1/agents/b", {}), {"op": "delete_agent", "name": "b"},
                     lambda st: "b" not in st.fleet),
    "outcome": (("POST", "/v1/outcomes", {"json": {"agent": "a", "kind": KIND, "success": True}}),
                {"op": "outcome", "agent": "a", "kind": KIND, "success": True},
                lambda st: st.fleet.outcomes("a", KIND) == (1, 1)),
    "hold_session": (("PUT", "/v1/sessions/s1/a", {}), {"op": "hold_session", "agent": "a", "session": "s1"},
                     lambda st: st.fleet.holds_session("a", "s1")),
    "release_session": (("DELETE", "/v1/sessions/held/b", {}),
                        {"op": "release_session", "agent": "b", "session": "held"},
                        lambda st: not st.fleet.holds_session("b", "held")),
    "place": (("POST", "/v1/place", {"json": {"requirements": TASK, "session": "placed"}}),
              {"op": "place", "requirements": TASK, "session": "placed"},
              lambda st: st.next_seq > 1 and any(st.fleet.holds_session(x, "placed") for x in ("a", "b"))),
}


def _prepare_http(state: Path) -> Server:
    s = Server("--state", str(state))
    assert s.client.put("/v1/agents/a", json=decl("a")).status_code == 200
    assert s.client.put("/v1/agents/b", json=decl("b")).status_code == 200
    assert s.client.put("/v1/sessions/held/b").status_code == 200
    assert s.client.get("/v1/agents/b").status_code == 200   # a read waits until the setup is durable
    return s


def _restarted(state: Path) -> ServiceState:
    st = ServiceState(state, log=lambda message: None)
    st.open()
    return st


def _close_without_checkpoint(st: ServiceState) -> None:
    st.close(checkpoint=False)


POD = {"metadata": {"name": "worker", "namespace": "default", "uid": "pod-1",
                    "annotations": {"a3.dev/requirements": orjson.dumps(TASK).decode()}}}
#: HTTP only: the Kubernetes extender's filter records a placement in the trace
HTTP_ONLY = {
    "k8s filter": (("POST", "/k8s/filter", {"json": {"Pod": POD, "NodeNames": ["a", "b"]}}), None,
                   lambda st: st.next_seq > 1 and b'"pod-1"' in st.trace_path.read_bytes()),
}


@pytest.mark.parametrize("operation", list(OPERATIONS) + list(HTTP_ONLY))
def test_an_acknowledged_change_over_http_survives_kill_9_straight_after_its_answer(tmp_path, operation):
    (method, path, kwargs), _, shows = {**OPERATIONS, **HTTP_ONLY}[operation]
    state = tmp_path / "state"
    server = _prepare_http(state)
    answer = server.client.request(method, path, **kwargs)
    assert answer.status_code == 200, answer.text
    os.kill(server.proc.pid, signal.SIGKILL)          # before anything else reaches the server
    server.proc.wait(timeout=10)
    server.client.close()
    st = _restarted(state)
    try:
        assert shows(st), operation
    finally:
        _close_without_checkpoint(st)


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_an_acknowledged_change_over_stdio_survives_kill_9_straight_after_its_answer(tmp_path, operation):
    _, request, shows = OPERATIONS[operation]
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for setup in ({"op": "put_agent", "name": "a", "declaration": decl("a")},
                      {"op": "put_agent", "name": "b", "declaration": decl("b")},
                      {"op": "hold_session", "agent": "b", "session": "held"},
                      {"op": "get_agent", "name": "b"},   # a read waits until the setup is durable
                      request):
            proc.stdin.write(orjson.dumps(setup) + b"\n")
            proc.stdin.flush()
            reply = orjson.loads(proc.stdout.readline())
            assert reply["ok"], reply
        os.kill(proc.pid, signal.SIGKILL)             # the answer to `request` is the last thing read
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    st = _restarted(state)
    try:
        assert shows(st), operation
    finally:
        _close_without_checkpoint(st)
