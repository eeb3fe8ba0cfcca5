"""Fleets imported live: Agent Cards fetched from running agents (an a2a-sdk agent, a static server
holding every public card at its well-known path), tools listed from running MCP servers (the
official SDK, over stdio and streamable HTTP), and the bad servers: slow, huge, redirect loops,
invalid JSON, errors mid-pagination, cycling cursors. Every server listens on 127.0.0.1 only."""
from __future__ import annotations

import gzip
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import a3fast
from a3fast.cli import main
from a3fast.interop import mcp_live
from a3fast.interop.fetch import EtagCache, FetchError, Limits, fetch_card
from a3fast.interop.signing import canonical_card, jcs
from a3fast.schema import parse_declaration
from pki import certificate, name, new_key, write_pem
from waiting import port_when_listening

REPO = Path(__file__).resolve().parents[2]
MCP_SERVER = REPO / "tests" / "live_mcp_server.py"


def _shared_data() -> Path | None:
    # the copies the repository ships first (examples/interop/public, PROVENANCE.md there)
    candidates = [REPO / "examples" / "interop" / "public", REPO.parent / "shared" / "data"]
    if os.environ.get("A3FAST_SHARED"):
        root = Path(os.environ["A3FAST_SHARED"])
        candidates += [root / "data", root]
    return next((c for c in candidates if (c / "agent-cards").is_dir()), None)


SHARED = _shared_data()
CARDS = sorted((SHARED / "agent-cards").glob("*.json")) if SHARED else []


def _needs_shared(test):
    """Tests of the public cards: skipped loudly where ../shared/data is absent, failed in CI (where it
    is always laid beside the clone), so they never pass for having run on nothing."""
    if SHARED is not None:
        return test
    if os.environ.get("CI"):
        return pytest.mark.usefixtures("_shared_data_required")(test)
    return pytest.mark.skip(reason="SKIPPED LOUDLY: ../shared/data (public Agent Cards) not found "
                                   "beside the repository")(test)


@pytest.fixture
def _shared_data_required():
    pytest.fail("../shared/data (the public Agent Cards) is missing beside the repository in CI")


needs_shared = _needs_shared


def invoke(*args):
    return CliRunner().invoke(main, ["import", *map(str, args)])


def jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


# -- a static server: each real card at its well-known path, and the bad servers ------------------
class Handler(http.server.BaseHTTPRequestHandler):
    cards: dict[str, bytes] = {}
    hits: dict[str, int] = {}

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        try:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # the client gave up first (the timeout cases): had this thread's traceback reached
            # stderr, a later test reading the command's stderr would find it there
            pass

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path
        Handler.hits[path] = Handler.hits.get(path, 0) + 1
        first, _, rest = path.lstrip("/").partition("/")
        if first == "cards" and rest.endswith("/.well-known/agent-card.json"):
            body = Handler.cards.get(rest.split("/")[0])
            return self._send(200, body) if body else self._send(404)
        if first == "legacy":
            return self._send(200, Handler.cards["legacy"]) if rest == ".well-known/agent.json" else self._send(404)
        if first == "etag":
            tag = '"v1"'
            if self.headers.get("If-None-Match") == tag:
                return self._send(304, headers={"ETag": tag})
            return self._send(200, Handler.cards["legacy"], {"ETag": tag})
        if first == "loop":
            return self._send(302, headers={"Location": "/loop2/"})
        if first == "loop2":
            return self._send(302, headers={"Location": "/loop/.well-known/agent-card.json"})
        if first == "huge":  # no Content-Length: the limit must hold while streaming
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b" " * 65536)
            except OSError:
                pass
            return None
        if first == "bomb":
            body = gzip.compress(b" " * (8 << 20))
            return self._send(200, body, {"Content-Encoding": "gzip"})
        if first == "slow":
            time.sleep(3)
            return self._send(200, b"{}")
        if first == "invalid":
            return self._send(200, b'{"name": "x", "skills": [')
        if first == "down":
            return self._send(503)
        return self._send(404)


@pytest.fixture(scope="module")
def static_server():
    cards = {p.stem: p.read_bytes() for p in CARDS}
    cards["legacy"] = json.dumps({"name": "legacy-agent", "skills": [{"id": "ping"}]}).encode()
    Handler.cards = cards
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@needs_shared
def test_every_real_card_imports_live_with_no_flags_and_keeps_its_endpoint(static_server, tmp_path):
    urls = [f"{static_server}/cards/{p.stem}/" for p in CARDS]
    out = tmp_path / "fleet.jsonl"
    result = invoke("a2a", *urls, "-o", out)
    assert result.exit_code == 0, result.stderr
    fleet = jsonl(out)
    names = {json.loads(p.read_bytes())["name"] for p in CARDS}
    assert {d["agent"]["name"] for d in fleet} == names
    for decl in fleet:
        parse_declaration(decl)
        assert decl["capabilities"], decl["agent"]
        assert decl["agent"]["namespace"] == "127.0.0.1"  # the host the cards were fetched from
        assert decl["endpoint"]["card"].startswith(static_server)
    basic = next(d for d in fleet if d["agent"]["name"] == "basic")
    # A partial card names no endpoint: the agent is reached where its card was found.
    assert basic["endpoint"]["url"] == f"{static_server}/cards/kagent__adk_basic"
    route = next(d for d in fleet if d["agent"]["name"] == "GeoSpatial Route Planner Agent")
    assert route["endpoint"]["url"].startswith("https://georoute-agent.example.com")
    assert "namespace derived" in result.stderr and "'127.0.0.1'" in result.stderr


@needs_shared
def test_every_real_card_file_imports_with_namespace_alone(tmp_path):
    out = tmp_path / "fleet.jsonl"
    result = invoke("a2a", SHARED / "agent-cards", "--namespace", "demo", "-o", out)
    assert result.exit_code == 0, result.stderr
    fleet = jsonl(out)
    assert len(fleet) == len({json.loads(p.read_bytes())["name"] for p in CARDS})
    assert all(d["capabilities"] for d in fleet)
    assert result.stderr.splitlines()[0].startswith(f"import a2a: {len(fleet)} agents made")


@needs_shared
def test_a_task_placed_on_a_live_imported_fleet_says_where_to_send_it(static_server, tmp_path):
    urls = [f"{static_server}/cards/{p.stem}/" for p in CARDS]
    out = tmp_path / "fleet.jsonl"
    assert invoke("a2a", *urls, "--namespace", "demo", "-o", out).exit_code == 0
    currency = next(d for d in jsonl(out) if d["agent"]["name"] == "Currency Conversion Agent")
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"v": "1.0", "capabilities": [currency["capabilities"][0]]}))
    trace = tmp_path / "trace.jsonl"
    placed = CliRunner().invoke(main, ["place", "--fleet", str(out), "--requirements", str(task),
                                       "-o", str(trace)])
    assert placed.exit_code == 0, placed.stderr
    [bound] = [r for r in jsonl(trace) if r["kind"] == "task.bound"]
    declaration = bound["content"]["scheduling"]["declaration"]
    assert declaration["agent"]["name"] == "Currency Conversion Agent"
    assert declaration["endpoint"] == currency["endpoint"]
    assert declaration["endpoint"]["url"].startswith("http://localhost:10999")


def test_the_legacy_well_known_path_is_tried_when_the_current_one_is_absent(static_server):
    fetched = fetch_card(f"{static_server}/legacy")
    assert fetched.url == f"{static_server}/legacy/.well-known/agent.json"


def test_an_etag_cache_makes_a_refresh_a_304(static_server, tmp_path):
    cache_path = tmp_path / "etags.json"
    first = fetch_card(f"{static_server}/etag", cache=(cache := EtagCache(cache_path)))
    cache.save()
    again = fetch_card(f"{static_server}/etag", cache=EtagCache(cache_path))
    assert (first.revalidated, again.revalidated) == (False, True) and again.body == first.body
    out = tmp_path / "f.jsonl"
    result = invoke("a2a", f"{static_server}/etag", "--etag-cache", cache_path, "-o", out)
    assert result.exit_code == 0 and "HTTP 304" in result.stderr


@pytest.mark.parametrize("where, message", [
    pytest.param("slow", "timeout", marks=pytest.mark.slow),
    ("huge", "over the limit of 65536 bytes; reading stopped"),
    ("bomb", "decompresses to over the limit"),
    ("loop", "redirect loop"),
    ("down", "HTTP 503"),
    ("nowhere", "answered 404"),
])
def test_bad_servers_are_named_and_nothing_is_written(static_server, tmp_path, where, message):
    with pytest.raises(FetchError) as caught:
        fetch_card(f"{static_server}/{where}", Limits(timeout=1, deadline=3, max_bytes=65536))
    assert message in caught.value.message
    out = tmp_path / "fleet.jsonl"
    out.write_text("previous\n")
    result = invoke("a2a", f"{static_server}/{where}", "--namespace", "n", "--timeout", "1",
                    "--max-bytes", "65536", "-o", out)
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.jsonl"]


def test_invalid_json_from_an_agent_is_a_skipped_item_naming_the_url(static_server):
    result = invoke("a2a", f"{static_server}/invalid", "--namespace", "n")
    assert result.exit_code == 2
    assert f"{static_server}/invalid: $: expected valid JSON" in result.stderr


def test_an_unreachable_agent_is_named():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    result = invoke("a2a", f"http://127.0.0.1:{port}/", "--namespace", "n", "--timeout", "1")
    assert result.exit_code == 2 and "cannot connect" in result.stderr


# -- an agent built with the official a2a-sdk, its card signed by the SDK -------------------------
@pytest.fixture(scope="module")
def signing_key():
    from jwt.api_jwk import PyJWK
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256", private=True)
    private = key.as_dict(private=True)
    public = key.as_dict(private=False)
    return PyJWK({**private, "kid": "agent-key"}), {**public, "kid": "agent-key"}


@pytest.fixture(scope="module")
def a2a_agent(signing_key):
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes.agent_card_routes import create_agent_card_routes
    from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
    from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from a2a.utils.signing import create_agent_card_signer
    from starlette.applications import Starlette

    class Echo(AgentExecutor):
        async def execute(self, context, event_queue):
            return None

        async def cancel(self, context, event_queue):
            return None

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="Order Analyst", description="Investigates orders", version="3.1.0",
        supported_interfaces=[AgentInterface(url=f"{base}/", protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False), default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="order_investigate", name="Investigate", description="Look into an order",
                           tags=["orders"]),
                AgentSkill(id="case.summarise", name="Summarise", description="Summarise a case",
                           tags=["cases"])])
    private, _ = signing_key
    signed = create_agent_card_signer(private, {"alg": "ES256", "kid": "agent-key", "typ": "JOSE"})(card)
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=signed)

    async def tampered(served):
        changed = AgentCard()
        changed.CopyFrom(served)
        changed.description = "Investigates orders and refunds them"
        return changed

    routes = [*create_agent_card_routes(signed), *create_jsonrpc_routes(handler, "/"),
              *create_agent_card_routes(signed, card_modifier=tampered,
                                        card_url="/tampered/.well-known/agent-card.json")]
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the a2a-sdk agent did not start"
    yield base
    server.should_exit = True
    thread.join(5)


def test_a_running_a2a_sdk_agent_imports_ready_for_place(a2a_agent, signing_key, tmp_path):
    key = tmp_path / "agent-key.jwk"
    key.write_text(json.dumps(signing_key[1]))
    out, report = tmp_path / "fleet.jsonl", tmp_path / "report.json"
    result = invoke("a2a", a2a_agent, "--card-key", key, "--report", report, "-o", out)
    assert result.exit_code == 0, result.stderr
    [decl] = jsonl(out)
    assert decl["agent"] == {"name": "Order Analyst", "namespace": "127.0.0.1"}
    assert [(c["name"], c["version"]) for c in decl["capabilities"]] == [("a2a.order-investigate", 1),
                                                                        ("case.summarise", 1)]
    assert decl["endpoint"] == {"url": f"{a2a_agent}/", "transport": "JSONRPC", "protocol_version": "1.0",
                                "card": f"{a2a_agent}/.well-known/agent-card.json"}
    [agent] = orjson.loads(report.read_bytes())["agents"]
    assert agent["signatures"]["status"] == "verified"
    fleet = a3fast.Fleet()
    fleet.add(decl)
    placement = fleet.place({"v": "1.0", "capabilities": [{"name": "case.summarise", "version": 1}]})
    assert placement.bound and placement.scheduling["declaration"]["endpoint"]["url"] == f"{a2a_agent}/"


def test_a_card_changed_after_signing_is_skipped_as_invalid(a2a_agent, signing_key, tmp_path):
    key = tmp_path / "agent-key.jwk"
    key.write_text(json.dumps(signing_key[1]))
    result = invoke("a2a", f"{a2a_agent}/tampered", "--card-key", key)
    assert result.exit_code == 2
    assert "signature invalid" in result.stderr and "not what was signed" in result.stderr


def test_a_signed_card_without_a_key_is_unverifiable_never_verified(a2a_agent, tmp_path):
    report = tmp_path / "report.json"
    result = invoke("a2a", a2a_agent, "--report", report, "-o", tmp_path / "f.jsonl")
    assert result.exit_code == 0
    [agent] = orjson.loads(report.read_bytes())["agents"]
    assert agent["signatures"]["status"] == "unverifiable"
    assert "signatures unverifiable" in result.stderr and "no key was supplied" in result.stderr


def test_a_key_for_another_signer_leaves_the_card_unverifiable(a2a_agent, tmp_path):
    from joserfc.jwk import ECKey

    other = tmp_path / "other.jwk"
    other.write_text(json.dumps({**ECKey.generate_key("P-256").as_dict(private=False), "kid": "someone-else"}))
    report = tmp_path / "report.json"
    assert invoke("a2a", a2a_agent, "--card-key", other, "--report", report,
                  "-o", tmp_path / "f.jsonl").exit_code == 0
    assert orjson.loads(report.read_bytes())["agents"][0]["signatures"]["status"] == "unverifiable"


def test_require_signed_skips_a_card_whose_header_names_an_unknown_key(a2a_agent, signing_key, tmp_path):
    # a card edited after signing, its protected header changed to name a key not given: without
    # --require-signed it is kept as unverifiable (reported); with it, only verified cards are kept
    import base64
    import urllib.request

    key = tmp_path / "agent-key.jwk"
    key.write_text(json.dumps(signing_key[1]))
    with urllib.request.urlopen(f"{a2a_agent}/.well-known/agent-card.json") as answer:
        card = json.loads(answer.read())
    card["skills"].append({"id": "refunds.issue", "name": "Refund", "description": "Refund", "tags": ["x"]})
    header = base64.urlsafe_b64encode(b'{"alg":"ES256","kid":"k9"}').rstrip(b"=").decode()
    card["signatures"] = [{**card["signatures"][0], "protected": header}]
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card))
    kept = invoke("a2a", path, "--namespace", "n", "--card-key", key, "-o", tmp_path / "kept.jsonl")
    assert kept.exit_code == 0 and "unverifiable" in kept.stderr
    out = tmp_path / "f.jsonl"
    refused = invoke("a2a", path, "--namespace", "n", "--card-key", key, "--require-signed", "-o", out)
    assert refused.exit_code == 2 and "not verified (--require-signed)" in refused.stderr
    assert not out.exists() or out.read_bytes() == b""
    # the card as served, signature intact, is verified and kept
    served = invoke("a2a", a2a_agent, "--card-key", key, "--require-signed", "-o", tmp_path / "ok.jsonl")
    assert served.exit_code == 0, served.stderr
    assert invoke("a2a", path, "--namespace", "n", "--require-signed").exit_code == 2       # no --card-key


def test_a_signature_header_or_key_file_nested_too_deep_is_named_not_an_internal_error(tmp_path):
    import base64

    deep = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).rstrip(b"=").decode()
    card = {"name": "A", "url": "https://a.example/", "skills": [{"id": "x.y"}],
            "signatures": [{"protected": deep, "signature": "AA"}]}
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card))
    result = invoke("a2a", path, "--namespace", "n", "-o", tmp_path / "f.jsonl")
    assert result.exit_code == 0 and "not base64url JSON" in result.stderr
    keys = tmp_path / "deep.jwks"
    keys.write_text('{"keys":' + "[" * 5000 + "]" * 5000 + "}")
    result = invoke("a2a", path, "--namespace", "n", "--card-key", keys)
    assert result.exit_code == 2 and "nested too deep" in result.stderr and "internal error" not in result.stderr


def test_a_private_key_is_refused_as_a_card_key(signing_key, tmp_path):
    from joserfc.jwk import ECKey

    private = tmp_path / "private.jwk"
    private.write_text(json.dumps(ECKey.generate_key("P-256").as_dict(private=True)))
    result = invoke("a2a", "http://127.0.0.1:9/", "--card-key", private)
    assert result.exit_code == 2 and "a private key" in result.stderr


def test_the_canonical_form_is_rfc_8785():
    assert jcs({"b": 1, "a": [True, None, 1.5, "é"]}) == '{"a":[true,null,1.5,"é"],"b":1}'
    assert canonical_card({"name": "x", "signatures": [1], "skills": [], "d": ""}) == b'{"name":"x"}'


@pytest.mark.parametrize("number, text", [
    (2.0 ** 60, "1152921504606847000"),            # ECMAScript's shortest digits, padded with zeros,
    (1.2345678901234568e20, "123456789012345680000"),  # not the float's exact binary value
    (2.0 ** 53, "9007199254740992"), (1e16, "10000000000000000"), (1e21, "1e+21"), (1e23, "1e+23"),
    (-0.0, "0"), (-5.0, "-5"), (0.1, "0.1"), (1e-6, "0.000001"), (1e-7, "1e-7"), (5e-324, "5e-324"),
    (333333333.3333333, "333333333.3333333"), (1.7976931348623157e308, "1.7976931348623157e+308"),
])
def test_numbers_in_the_canonical_form_are_written_as_ecmascript_writes_them(number, text):
    assert jcs(number) == text


# -- MCP servers built with the official SDK -------------------------------------------------------
def server_command(mode: str) -> str:
    return f"{sys.executable} {MCP_SERVER} {mode} stdio"


def test_tools_listed_from_a_running_stdio_server_bind_an_agent(tmp_path):
    out, contracts = tmp_path / "fleet.jsonl", tmp_path / "contracts.jsonl"
    result = invoke("mcp", "--server-command", server_command("tools"), "--bind", "ops",
                    "--namespace", "support", "--capability", "order.investigate/1",
                    "--contracts", contracts, "-o", out)
    assert result.exit_code == 0, result.stderr
    [decl] = jsonl(out)
    assert decl["tools"] == ["get_order", "create_ticket", "delete_customer"]
    [server] = decl["tool_servers"]
    assert server["name"] == "live.tools" and server["transport"] == "stdio"
    assert server["command"][-2:] == ["tools", "stdio"]
    by_id = {c["id"]: c for c in jsonl(contracts)}
    # Annotations are mapped exactly as the file importer maps them.
    assert by_id["live.tools.get-order"]["operation"] == "read"
    assert by_id["live.tools.create-ticket"]["operation"] == "create"
    assert by_id["live.tools.delete-customer"]["operation"] == "delete"
    assert "server name mapped" in result.stderr and "'live-tools-mcp-server'" in result.stderr


def test_every_page_of_a_paged_listing_is_read():
    result = invoke("mcp", "--server-command", server_command("paged"), "--bind", "a",
                    "--namespace", "n")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["tools"] == [f"tool_{i}" for i in range(5)]
    assert "pages of tools/list read from the running server: 3" in result.stderr


@pytest.mark.parametrize("mode, message", [
    ("cycle", "the listing cycles; stopped"),
    ("broken", "backend unavailable while listing page 2"),
])
def test_a_server_that_fails_mid_listing_writes_nothing(tmp_path, mode, message):
    out = tmp_path / "fleet.jsonl"
    result = invoke("mcp", "--server-command", server_command(mode), "--bind", "a", "--namespace", "n",
                    "-o", out)
    assert result.exit_code == 2 and message in result.stderr and "nothing written" in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_slow_server_times_out():
    result = invoke("mcp", "--server-command", server_command("slow"), "--bind", "a", "--namespace", "n",
                    "--timeout", "2")
    assert result.exit_code == 2 and "timeout" in result.stderr


def test_a_server_command_that_does_not_exist_is_named():
    result = invoke("mcp", "--server-command", "no-such-mcp-server --flag", "--bind", "a", "--namespace", "n")
    assert result.exit_code == 2 and "no-such-mcp-server not found" in result.stderr


@pytest.fixture(scope="module")
def http_mcp_server(tmp_path_factory):
    portfile = tmp_path_factory.mktemp("mcp") / "port"
    process = subprocess.Popen([sys.executable, str(MCP_SERVER), "tools", "http", str(portfile)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield f"http://127.0.0.1:{port_when_listening(portfile)}/mcp"
    process.terminate()
    process.wait(10)


def test_tools_listed_from_a_streamable_http_server(http_mcp_server):
    result = invoke("mcp", "--server-url", http_mcp_server, "--bind", "ops", "--namespace", "n",
                    "--server", "github-mcp-server")
    assert result.exit_code == 0, result.stderr
    decl = orjson.loads(result.stdout)
    assert decl["tools"] == ["get_order", "create_ticket", "delete_customer"]
    assert decl["tool_servers"] == [{"name": "github", "transport": "streamable-http", "url": http_mcp_server}]


def test_rule_a_servers_url_is_recorded_without_its_credentials(http_mcp_server):
    with_them = http_mcp_server.replace("http://", "http://bot:S3cr3t@")
    result = invoke("mcp", "--server-url", with_them, "--bind", "ops", "--namespace", "n")
    assert result.exit_code == 0, result.stderr
    decl = orjson.loads(result.stdout)
    assert [server["url"] for server in decl["tool_servers"]] == [http_mcp_server]
    assert "S3cr3t" not in result.stdout + result.stderr


# -- over TLS: the CA a listing trusts, and one TLS context for every listing -------------------------
@pytest.fixture(scope="module")
def https_mcp_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("mcp-tls")
    ca_key, other_key, server_key = new_key(), new_key(), new_key()
    ca = certificate("a3fast test CA", ca_key, name("a3fast test CA"), ca_key, ca=True)
    other = certificate("another CA", other_key, name("another CA"), other_key, ca=True)
    cert, key = write_pem(d, "server", certificate("127.0.0.1", server_key, ca.subject, ca_key, server=True),
                          server_key)
    portfile = d / "port"
    process = subprocess.Popen([sys.executable, str(MCP_SERVER), "tools", "https", str(portfile), cert, key],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield (f"https://127.0.0.1:{port_when_listening(portfile)}/mcp",
           {"ca": write_pem(d, "ca", ca)[0], "other": write_pem(d, "other", other)[0]})
    process.terminate()
    process.wait(10)


@pytest.fixture
def fresh_tls_context(monkeypatch):
    """No context left from an earlier test, and every CA bundle a client loads counted."""
    import httpcore2

    monkeypatch.setattr(mcp_live, "_tls", None)
    loads = []
    default = httpcore2.default_ssl_context

    def counted(*args, **kwargs):
        loads.append(os.environ.get("SSL_CERT_FILE"))
        return default(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    return loads


def test_tools_listed_over_https_trust_the_ca_named_by_ssl_cert_file(https_mcp_server, monkeypatch,
                                                                     fresh_tls_context):
    url, files = https_mcp_server
    monkeypatch.setenv("SSL_CERT_FILE", files["ca"])
    result = invoke("mcp", "--server-url", url, "--bind", "ops", "--namespace", "n")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["tools"] == ["get_order", "create_ticket", "delete_customer"]


def test_a_server_certificate_no_trusted_ca_signed_is_refused(https_mcp_server, monkeypatch, fresh_tls_context):
    url, files = https_mcp_server
    monkeypatch.setenv("SSL_CERT_FILE", files["other"])
    with pytest.raises(mcp_live.ListingError, match="CERTIFICATE_VERIFY_FAILED"):
        mcp_live.list_tools(mcp_live.ServerSpec(url=url), timeout=10)


def test_a_missing_ca_bundle_is_named(https_mcp_server, monkeypatch, tmp_path, fresh_tls_context):
    url, _ = https_mcp_server
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
    with pytest.raises(mcp_live.ListingError, match="cannot load the CA certificates to verify the server"):
        mcp_live.list_tools(mcp_live.ServerSpec(url=url), timeout=10)


def test_every_listing_shares_one_tls_context_until_the_bundle_changes_or_ages(https_mcp_server, http_mcp_server,
                                                                               monkeypatch, fresh_tls_context):
    url, files = https_mcp_server
    monkeypatch.setenv("SSL_CERT_FILE", files["ca"])
    for server in (url, url, http_mcp_server):    # an http:// listing's client would make one too
        assert len(mcp_live.list_tools(mcp_live.ServerSpec(url=server), timeout=10).pages) == 1
    assert fresh_tls_context == [files["ca"]]       # the CA bundle loaded once for three listings
    shared = mcp_live.tls_context()
    monkeypatch.setenv("SSL_CERT_FILE", files["other"])
    assert mcp_live.tls_context() is not shared and fresh_tls_context == [files["ca"], files["other"]]
    again = mcp_live.tls_context()
    assert mcp_live.tls_context() is again
    monkeypatch.setattr(mcp_live, "TLS_CONTEXT_MAX_AGE", 0.0)
    time.sleep(0.01)
    assert mcp_live.tls_context() is not again and len(fresh_tls_context) == 3


def test_one_source_of_tools_is_named():
    result = invoke("mcp", "--bind", "a", "--namespace", "n")
    assert result.exit_code == 2 and "name one source of tools" in result.stderr


def test_a_v1_card_the_sdk_serves_beside_a_0_3_interface_verifies_and_reads_as_v1(signing_key, tmp_path):
    # agent_card_to_dict adds 0.3's url, protocolVersion and preferredTransport to the top level of
    # such a card; the SDK's signature does not cover them, and neither does the reading
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict
    from a2a.types import AgentCard, AgentInterface, AgentSkill
    from a2a.utils.signing import create_agent_card_signer

    card = AgentCard(
        name="Dual", description="Speaks two versions", version="1.0.0",
        supported_interfaces=[AgentInterface(url="https://dual.example/a2a", protocol_binding="JSONRPC",
                                             protocol_version="1.0"),
                              AgentInterface(url="https://dual.example/a2a", protocol_binding="JSONRPC",
                                             protocol_version="0.3")],
        default_input_modes=["text"], default_output_modes=["text"],
        skills=[AgentSkill(id="case.review", name="Review", description="Review a case", tags=["cases"])])
    private, public = signing_key
    served = agent_card_to_dict(create_agent_card_signer(private, {"alg": "ES256", "kid": "agent-key"})(card))
    assert {"url", "protocolVersion", "preferredTransport"} <= set(served)       # what makes the case
    path, key, out = tmp_path / "card.json", tmp_path / "key.jwk", tmp_path / "fleet.jsonl"
    path.write_text(json.dumps(served))
    key.write_text(json.dumps(public))
    report = tmp_path / "report.json"
    result = invoke("a2a", path, "--namespace", "n", "--card-key", key, "--require-signed", "--report", report,
                    "-o", out)
    assert result.exit_code == 0, result.stderr
    [decl] = jsonl(out)
    assert decl["endpoint"] == {"url": "https://dual.example/a2a", "transport": "JSONRPC", "protocol_version": "1.0",
                                "interfaces": [{"url": "https://dual.example/a2a", "transport": "JSONRPC",
                                                "protocol_version": "1.0"},
                                               {"url": "https://dual.example/a2a", "transport": "JSONRPC",
                                                "protocol_version": "0.3"}]}
    [agent] = orjson.loads(report.read_bytes())["agents"]
    assert agent["signatures"]["status"] == "verified"
    # a compatibility field changed is outside what was signed and what is read: still verified
    path.write_text(json.dumps({**served, "url": "https://elsewhere.example/"}))
    result = invoke("a2a", path, "--namespace", "n", "--card-key", key, "--require-signed", "-o", out)
    assert result.exit_code == 0 and jsonl(out)[0]["endpoint"]["url"] == "https://dual.example/a2a"
    # what the signature covers, changed, is not what was signed
    path.write_text(json.dumps({**served, "description": "Speaks three versions"}))
    assert "not what was signed" in invoke("a2a", path, "--namespace", "n", "--card-key", key).stderr


def test_a_member_added_empty_to_a_signed_card_changes_nothing_a_verified_import_says(tmp_path):
    # the signature drops empty members; the reading of a verified card drops them too, so an empty
    # supportedInterfaces added to a signed 0.3 card does not make it an interface-less v1.0 card
    from joserfc import jws
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256")
    card = {"name": "Geo", "description": "Routes", "url": "https://geo.example/a2a/v1", "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC", "version": "1.0.0", "skills": [{"id": "route.plan", "name": "Plan"}]}
    token = jws.serialize_compact({"alg": "ES256", "kid": "k"}, canonical_card(card), key)
    protected, _, signature = token.split(".")
    signed = {**card, "signatures": [{"protected": protected, "signature": signature}]}
    keys = tmp_path / "key.jwk"
    keys.write_text(json.dumps({**key.as_dict(private=False), "kid": "k"}))
    endpoints = []
    for extra in ({}, {"supportedInterfaces": []}, {"supportedInterfaces": None}, {"extensions": {}}):
        path, out = tmp_path / "card.json", tmp_path / "fleet.jsonl"
        path.write_text(json.dumps({**signed, **extra}))
        result = invoke("a2a", path, "--namespace", "n", "--card-key", keys, "--require-signed", "-o", out)
        assert result.exit_code == 0, (extra, result.stderr)
        endpoints.append(jsonl(out)[0]["endpoint"])
    assert endpoints == [{"url": "https://geo.example/a2a/v1", "transport": "JSONRPC",
                          "protocol_version": "0.3.0"}] * 4
    # an emptied url is a change the signature sees
    path.write_text(json.dumps({**signed, "url": ""}))
    assert "not what was signed" in invoke("a2a", path, "--namespace", "n", "--card-key", keys).stderr


def test_an_interface_of_an_empty_url_added_to_a_signed_card_is_not_its_endpoint(tmp_path):
    # the signed form leaves `{"url": ""}` out, so the signature still verifies; read as a url, it
    # became the endpoint every placement of the agent reports
    from joserfc import jws
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256")
    keys = tmp_path / "key.jwk"
    keys.write_text(json.dumps({**key.as_dict(private=False), "kid": "k"}))
    v10 = {"name": "Geo", "description": "Routes", "version": "1.0.0",
           "supportedInterfaces": [{"url": "https://geo.example/a2a", "protocolBinding": "JSONRPC",
                                    "protocolVersion": "1.0"}],
           "skills": [{"id": "route.plan", "name": "Plan"}]}
    v03 = {"name": "Geo", "description": "Routes", "url": "https://geo.example/a2a", "protocolVersion": "0.3.0",
           "preferredTransport": "JSONRPC", "version": "1.0.0", "skills": [{"id": "route.plan", "name": "Plan"}],
           "additionalInterfaces": [{"url": "https://geo.example/rest", "transport": "HTTP+JSON"}]}
    for card, member in ((v10, "supportedInterfaces"), (v03, "additionalInterfaces")):
        token = jws.serialize_compact({"alg": "ES256", "kid": "k"}, canonical_card(card), key)
        protected, _, signature = token.split(".")
        signed = {**card, "signatures": [{"protected": protected, "signature": signature}]}
        path, out = tmp_path / "card.json", tmp_path / "fleet.jsonl"
        path.write_text(json.dumps(signed))
        assert invoke("a2a", path, "--namespace", "n", "--card-key", keys, "--require-signed", "-o", out).exit_code == 0
        before = jsonl(out)[0]["endpoint"]
        path.write_text(json.dumps({**signed, member: [{"url": ""}] + card[member]}))
        result = invoke("a2a", path, "--namespace", "n", "--card-key", keys, "--require-signed", "-o", out)
        assert result.exit_code == 0, result.stderr
        assert jsonl(out)[0]["endpoint"] == before, member
        assert f"$.{member}[0]: expected an interface with a url" in result.stderr


def test_a_verified_card_is_read_where_it_lies_below_its_top_level(tmp_path):
    # only top-level members the signature leaves out go unread: an empty skills array still reads
    # as one, and a skill's problems keep the file's own paths
    from joserfc import jws
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256")
    keys = tmp_path / "key.jwk"
    keys.write_text(json.dumps({**key.as_dict(private=False), "kid": "k"}))
    base = {"name": "Geo", "url": "https://geo.example/a2a", "protocolVersion": "0.3.0", "version": "1.0.0"}
    for skills, extra, code in (([], ["--allow-empty"], 0),
                                ([{"id": "", "name": ""}, {"id": "a.b", "name": "x", "description": 5}], [], 0)):
        card = {**base, "skills": skills}
        token = jws.serialize_compact({"alg": "ES256", "kid": "k"}, canonical_card(card), key)
        protected, _, signature = token.split(".")
        path = tmp_path / "card.json"
        path.write_text(json.dumps({**card, "signatures": [{"protected": protected, "signature": signature}]}))
        result = invoke("a2a", path, "--namespace", "n", "--card-key", keys, "--require-signed",
                        "-o", tmp_path / "f.jsonl", *extra)
        assert result.exit_code == code, result.stderr
        if skills:
            assert f"{path}: $.skills[0].id: expected the skill's id" in result.stderr
            assert f"{path}: $.skills[1].description: expected" in result.stderr


def test_a_complete_listing_survives_a_session_teardown_that_hangs():
    # the server answers every page, then never answers the session's DELETE: the listing was whole
    import asyncio

    hung = threading.Event()

    async def handle(reader, writer):
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                return
            lines = head.split(b"\r\n")
            method = lines[0].split()[0]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:] if b":" in line)}
            body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
            if method == b"DELETE":
                hung.set()
                await asyncio.sleep(3600)
            if method == b"GET":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                continue
            message = json.loads(body)
            if "id" not in message:
                writer.write(b"HTTP/1.1 202 Accepted\r\nMcp-Session-Id: s1\r\nContent-Length: 0\r\n\r\n")
                continue
            if message["method"] == "initialize":
                result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                          "serverInfo": {"name": "h", "version": "1"}}
            else:
                result = {"tools": [{"name": "orders_read", "inputSchema": {"type": "object"}}]}
            out = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: s1\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(out) + out)
            await writer.drain()

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        listing = mcp_live.list_tools(mcp_live.ServerSpec(url=f"http://127.0.0.1:{port}/mcp"), timeout=2)
        assert hung.is_set() and listing.complete
        assert [tool["name"] for page in listing.pages for tool in page["tools"]] == ["orders_read"]
    finally:
        async def shut():
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        asyncio.run_coroutine_threadsafe(shut(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
