"""`a3fast serve --watch-mcp AGENT=URL`: a real server process watching a real MCP server (the SDK's
low-level server over streamable HTTP on 127.0.0.1) whose tool list each test changes between
checks by rewriting the file the server reads at every tools/list. Every wait is bounded; the watch
interval is a tenth of a second."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.service.openapi import load_schema
from service_process import Server
from waiting import port_when_listening, until

pytest.importorskip("starlette")
pytest.importorskip("mcp")

MCP_SERVER = Path(__file__).resolve().parents[1] / "live_mcp_server.py"
INTERVAL = "0.1"
OPS = {"v": "1.0", "agent": {"name": "ops", "namespace": "support"},
       "capabilities": [{"name": "order.investigate", "version": 1}], "clearances": [],
       "tools": ["send_email"]}


class McpServer:
    """The `file` mode of tests/live_mcp_server.py: its tools are the JSON list in `tools_file`."""

    def __init__(self, directory: Path, tools: list[str]):
        self.tools_file = directory / "tools.json"
        self.set_tools(tools)
        portfile = directory / "port"
        self.proc = subprocess.Popen([sys.executable, str(MCP_SERVER), "file", "http", str(portfile)],
                                     env={**os.environ, "A3FAST_TEST_TOOLS": str(self.tools_file)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port_when_listening(portfile)}/mcp"

    def set_tools(self, tools: list[str]) -> None:
        tmp = self.tools_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(tools))
        os.replace(tmp, self.tools_file)   # the server never reads half a list

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture()
def mcp_server(tmp_path):
    server = McpServer(tmp_path, ["get_order", "create_ticket"])
    yield server
    server.stop()



def declaration(server: Server, name: str = "ops"):
    r = server.client.get(f"/v1/agents/{name}")
    return r.json()["declaration"] if r.status_code == 200 else None


def tools(server: Server) -> list[str] | None:
    decl = declaration(server)
    return decl.get("tools") if decl else None


def source(server: Server, url: str) -> dict:
    status = server.client.get("/v1/watch").json()
    jsonschema.validate(status, load_schema("watch.response"))
    return next(s for s in status["sources"] if s["url"] == url)


def watching(state: Path, url: str) -> Server:
    return Server("--state", str(state), "--watch-mcp", f"ops={url}", "--watch-interval", INTERVAL)


@pytest.mark.slow
def test_a_watched_servers_tools_appear_change_and_go_as_import_mcp_binds_them(mcp_server, tmp_path):
    server = watching(tmp_path / "state", mcp_server.url)
    try:
        assert server.client.put("/v1/agents/ops", json=OPS).status_code == 200
        until("the server's tools bound", lambda: tools(server) == ["send_email", "get_order", "create_ticket"])
        served = declaration(server)
        fleet = tmp_path / "fleet.json"
        fleet.write_bytes(orjson.dumps(OPS))
        imported = CliRunner().invoke(main, ["import", "mcp", "--server-url", mcp_server.url, "--bind", "ops",
                                             "--fleet", str(fleet)])
        assert imported.exit_code == 0, imported.stderr
        assert served == orjson.loads(imported.stdout)
        assert served["tool_servers"] == [{"name": "file", "transport": "streamable-http", "url": mcp_server.url}]
        status = source(server, mcp_server.url)
        assert status["kind"] == "mcp" and status["agents"] == ["ops"]
        assert status["tools"] == ["get_order", "create_ticket"] and status["last_error"] is None

        seq = server.client.get("/readyz").json()["next_seq"]
        checks = status["checks"]
        until("two unchanged checks", lambda: source(server, mcp_server.url)["checks"] >= checks + 2)
        assert server.client.get("/readyz").json()["next_seq"] == seq   # unchanged: nothing journaled

        mcp_server.set_tools(["get_order", "close_ticket"])
        until("a changed tool", lambda: tools(server) == ["send_email", "get_order", "close_ticket"])
        mcp_server.set_tools([])
        until("the tools gone", lambda: tools(server) == ["send_email"])
        assert declaration(server)["tool_servers"] == served["tool_servers"]
    finally:
        assert server.stop() == 0


def test_an_unreachable_server_keeps_the_last_tools_and_backs_off(mcp_server, tmp_path):
    server = watching(tmp_path / "state", mcp_server.url)
    try:
        server.client.put("/v1/agents/ops", json=OPS)
        until("the server's tools bound", lambda: tools(server) == ["send_email", "get_order", "create_ticket"])
        mcp_server.stop()
        status = until("the failure reported", lambda: (s := source(server, mcp_server.url))["failures"] >= 1 and s)
        assert "keeping the last tools" in status["last_error"]
        assert status["delay"] >= 2 * float(INTERVAL)   # backed off: interval x 2^failures
        assert tools(server) == ["send_email", "get_order", "create_ticket"]
    finally:
        assert server.stop() == 0


def test_an_agent_not_in_the_fleet_is_reported_and_waited_for(mcp_server, tmp_path):
    server = watching(tmp_path / "state", mcp_server.url)
    try:
        status = until("the missing agent reported", lambda: (s := source(server, mcp_server.url))["last_error"] and s)
        assert "'ops' is not in the fleet" in status["last_error"]
        assert server.client.get("/v1/agents").json()["names"] == []   # no agent made up
        server.client.put("/v1/agents/ops", json=OPS)
        until("the tools bound once declared", lambda: tools(server) == ["send_email", "get_order", "create_ticket"])
        assert source(server, mcp_server.url)["last_error"] is None
    finally:
        assert server.stop() == 0


@pytest.mark.slow
def test_a_restart_with_the_same_state_keeps_the_tools_and_still_removes_a_gone_one(mcp_server, tmp_path):
    state = tmp_path / "state"
    server = watching(state, mcp_server.url)
    try:
        server.client.put("/v1/agents/ops", json=OPS)
        until("the server's tools bound", lambda: tools(server) == ["send_email", "get_order", "create_ticket"])
    finally:
        server.kill()   # what was acknowledged is in the journal
    mcp_server.set_tools(["get_order"])
    restarted = watching(state, mcp_server.url)
    try:
        assert tools(restarted) == ["send_email", "get_order", "create_ticket"]
        # the memory says create_ticket came from the server, so it goes; send_email stays
        until("the gone tool removed after the restart", lambda: tools(restarted) == ["send_email", "get_order"])
    finally:
        assert restarted.stop() == 0


def test_a_listing_that_hangs_does_not_hold_the_services_stop(tmp_path):
    # a "server" that accepts the connection and never answers: the listing runs until its 30 s
    # deadline, and the service's stop must not wait for it
    silent = socket.create_server(("127.0.0.1", 0))
    silent.settimeout(30)
    server = watching(tmp_path / "state", f"http://127.0.0.1:{silent.getsockname()[1]}/mcp")
    try:
        server.client.put("/v1/agents/ops", json=OPS)
        connection, _ = silent.accept()   # a listing is under way
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 15, "the stop waited for the stuck listing"
        connection.close()
    finally:
        if server.proc.poll() is None:
            server.kill()
        silent.close()


@pytest.mark.parametrize("value, expected", [("http://127.0.0.1:9/mcp", "expected AGENT=URL"),
                                             ("ops=file:///tmp/x", "expected an http:// or https:// URL")])
def test_watch_mcp_needs_agent_equals_an_http_url(value, expected, tmp_path):
    result = CliRunner().invoke(main, ["serve", "--watch-mcp", value])
    assert result.exit_code == 2 and expected in result.stderr


@pytest.mark.parametrize("value, why", [("ops=http://", "it names no host"),
                                        ("ops=http://[::1/mcp", "its IPv6 address has an unbalanced bracket"),
                                        ("ops=http://127.0.0.1:99999/mcp", "its port '99999' is no number from 0 to 65535")])
def test_watch_mcp_refuses_a_url_no_client_can_reach_as_watch_cards_does(value, why):
    # where the service started and retried it forever (in a process: a service that starts ends
    # the test at its timeout rather than holding it)
    done = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--watch-mcp", value],
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert f"--watch-mcp {value}: expected an http:// or https:// URL with a host".encode() in done.stderr
    assert why.encode() in done.stderr           # and what is wrong with this one



def test_a_tool_the_import_skips_is_skipped_and_the_rest_bound(mcp_server, tmp_path):
    server = watching(tmp_path / "state", mcp_server.url)
    try:
        server.client.put("/v1/agents/ops", json=OPS)
        until("the server's tools bound", lambda: tools(server) == ["send_email", "get_order", "create_ticket"])
        mcp_server.set_tools(["get_order", "x" * 2000])   # a name longer than a declaration's tool may be
        until("the listing bound without it", lambda: tools(server) == ["send_email", "get_order"])
        fleet = tmp_path / "fleet.json"
        fleet.write_bytes(orjson.dumps(OPS))
        imported = CliRunner().invoke(main, ["import", "mcp", "--server-url", mcp_server.url, "--bind", "ops",
                                             "--fleet", str(fleet)])
        assert imported.exit_code == 0, imported.stderr
        assert declaration(server) == orjson.loads(imported.stdout)
        assert source(server, mcp_server.url)["tools"] == ["get_order"]
    finally:
        assert server.stop() == 0
