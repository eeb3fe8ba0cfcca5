"""`a3fast serve --watch-cards`: a real server process watching a real static HTTP server on
127.0.0.1 whose card each test changes, breaks and removes; the served fleet follows, through the
journal. Every wait is bounded; the watch interval is a tenth of a second."""
from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import jsonschema
import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.service.openapi import load_schema
from service_process import Server
from waiting import until

pytest.importorskip("starlette")
pytest.importorskip("httpx")

INTERVAL = "0.1"


class CardHandler(http.server.BaseHTTPRequestHandler):
    """Serves /<agent>/.well-known/agent-card.json from `cards`, with an ETag per body; counts
    what it answered."""

    cards: dict[str, bytes] = {}
    answered: dict[int, int] = {}
    #: the Authorization headers the fetches sent
    authorizations: set[str] = set()

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization"):
            CardHandler.authorizations.add(self.headers["Authorization"])
        agent, _, rest = self.path.lstrip("/").partition("/")
        body = self.cards.get(agent) if rest == ".well-known/agent-card.json" else None
        if isinstance(body, str):           # a card that moved: a redirect to where it is now
            self.send_response(302)
            self.send_header("Location", body)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if body is None:
            status, body, headers = (410 if agent == "retired" else 404), b"", {}
        else:
            tag = f'"{hash(body) & 0xFFFFFFFF:x}"'
            headers = {"ETag": tag}
            status = 304 if self.headers.get("If-None-Match") == tag else 200
            body = b"" if status == 304 else body
        CardHandler.answered[status] = CardHandler.answered.get(status, 0) + 1
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def cards():
    CardHandler.cards, CardHandler.answered, CardHandler.authorizations = {}, {}, set()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CardHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def card(*skills: str, name: str = "trip-planner") -> bytes:
    return json.dumps({"name": name, "description": "plans trips", "version": "1.0.0",
                       "skills": [{"id": s, "name": s} for s in skills]}).encode()



def declaration(server: Server, name: str):
    r = server.client.get(f"/v1/agents/{name}")
    return r.json()["declaration"] if r.status_code == 200 else None


def capabilities(decl) -> set[str]:
    return {c["name"] for c in decl["capabilities"]} if decl else set()


def source(server: Server, url: str) -> dict:
    status = server.client.get("/v1/watch").json()
    jsonschema.validate(status, load_schema("watch.response"))
    return next(s for s in status["sources"] if s["url"] == url)


def counter(server: Server, result: str) -> float:
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith(f'a3fast_watch_checks_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_a_watched_card_adds_its_agent_as_import_a2a_derives_it(cards, tmp_path):
    CardHandler.cards["planner"] = card("plan-trip", "book_hotel")
    url = f"{cards}/planner/"
    server = Server("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-interval", INTERVAL)
    try:
        served = until("the watched agent is served", lambda: declaration(server, "trip-planner"))
        imported = CliRunner().invoke(main, ["import", "a2a", url])
        assert imported.exit_code == 0, imported.stderr
        assert served == orjson.loads(imported.stdout)
        assert served["agent"]["namespace"] == "127.0.0.1"
        assert served["endpoint"]["card"] == f"{cards}/planner/.well-known/agent-card.json"
        status = source(server, url)
        assert status["agents"] == ["trip-planner"] and status["last_error"] is None
        assert status["last_change"] is not None and status["changes"] == 1
    finally:
        assert server.stop() == 0


def test_rule_a_watched_url_fetches_with_its_credentials_and_never_shows_them(cards, tmp_path):
    import base64

    CardHandler.cards["planner"] = card("plan-trip")
    host = cards.removeprefix("http://")
    url, gone = f"http://bot:S3cr3t@{host}/planner/", f"http://bot:S3cr3t@{host}/gone/"
    server = Server("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-cards", gone,
                    "--watch-interval", INTERVAL)
    try:
        served = until("the watched agent is served", lambda: declaration(server, "trip-planner"))
        assert f"Basic {base64.b64encode(b'bot:S3cr3t').decode()}" in CardHandler.authorizations
        assert served["endpoint"]["card"] == f"{cards}/planner/.well-known/agent-card.json"
        until("the gone card's failure", lambda: source(server, f"{cards}/gone/")["last_error"])
        shown = [server.client.get("/v1/watch").text, server.client.get("/metrics").text,
                 server.client.get("/v1/agents/trip-planner").text]
        assert f'source="{cards}/planner/"' in shown[1]
    finally:
        assert server.stop() == 0
    shown.append(server.stderr())
    assert f"watch {cards}/gone/: " in shown[-1]
    assert not [text for text in shown if "S3cr3t" in text]


def test_an_unchanged_card_costs_a_304_and_no_journal_entry(cards, tmp_path):
    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    server = Server("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-interval", INTERVAL)
    try:
        until("the watched agent is served", lambda: declaration(server, "trip-planner"))
        seq = server.client.get("/readyz").json()["next_seq"]
        until("three unchanged checks", lambda: source(server, url)["checks"] >= 4)
        assert CardHandler.answered.get(304, 0) >= 2
        assert CardHandler.answered[200] == 1
        assert counter(server, "unchanged") >= 2
        assert server.client.get("/readyz").json()["next_seq"] == seq
        assert source(server, url)["changes"] == 1
    finally:
        assert server.stop() == 0


@pytest.mark.slow
def test_a_changed_card_changes_the_agent_durably(cards, tmp_path):
    state = tmp_path / "state"
    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    server = Server("--state", str(state), "--watch-cards", url, "--watch-interval", INTERVAL)
    try:
        until("the first card", lambda: capabilities(declaration(server, "trip-planner")) == {"a2a.plan-trip"})
        CardHandler.cards["planner"] = card("plan-trip", "book_hotel")
        until("the changed card", lambda: capabilities(declaration(server, "trip-planner"))
              == {"a2a.plan-trip", "a2a.book-hotel"})
        assert counter(server, "changed") >= 2
    finally:
        server.kill()   # no clean stop: what was acknowledged must be in the journal
    restarted = Server("--state", str(state))   # no watch: only the journal speaks
    try:
        assert capabilities(declaration(restarted, "trip-planner")) == {"a2a.plan-trip", "a2a.book-hotel"}
    finally:
        assert restarted.stop() == 0


def test_an_invalid_card_keeps_the_last_good_agent_and_is_reported(cards, tmp_path):
    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    server = Server("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-interval", INTERVAL)
    try:
        good = until("the first card", lambda: declaration(server, "trip-planner"))
        CardHandler.cards["planner"] = b'{"name": "trip-planner", "skills": ['
        status = until("the invalid card is reported", lambda: (s := source(server, url))["last_error"] and s)
        assert "keeping the last good agents" in status["last_error"]
        assert status["agents"] == ["trip-planner"]
        assert declaration(server, "trip-planner") == good
        assert counter(server, "invalid") >= 1
        # a card that parses but gives an agent no capability is refused as `import a2a` refuses it
        CardHandler.cards["planner"] = card()
        until("the empty card is reported", lambda: "no capabilities" in (source(server, url)["last_error"] or ""))
        assert declaration(server, "trip-planner") == good
        CardHandler.cards["planner"] = card("plan-trip", "rent-car")
        until("the fixed card is applied", lambda: capabilities(declaration(server, "trip-planner"))
              == {"a2a.plan-trip", "a2a.rent-car"})
        assert source(server, url)["last_error"] is None
    finally:
        assert server.stop() == 0


def test_a_removed_card_removes_its_agent_after_the_misses(cards, tmp_path):
    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    server = Server("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-interval", INTERVAL,
                    "--watch-remove-after", "3")
    try:
        until("the first card", lambda: declaration(server, "trip-planner"))
        del CardHandler.cards["planner"]
        status = until("a first miss", lambda: (s := source(server, url))["misses"] >= 1 and s)
        assert "no Agent Card" in status["last_error"]
        until("the agent is removed", lambda: server.client.get("/v1/agents/trip-planner").status_code == 404)
        # the source's status lists its agents until the removal is durable, a moment after it shows
        status = until("the source lists no agent", lambda: (s := source(server, url))["agents"] == [] and s)
        assert status["misses"] >= 3
        assert counter(server, "removed") == 1
    finally:
        assert server.stop() == 0


@pytest.mark.slow
def test_a_card_gone_while_the_service_was_down_is_still_removed(cards, tmp_path):
    state = tmp_path / "state"
    CardHandler.cards["retired"] = card("plan-trip")
    url = f"{cards}/retired/"
    server = Server("--state", str(state), "--watch-cards", url, "--watch-interval", INTERVAL)
    try:
        until("the first card", lambda: declaration(server, "trip-planner"))
    finally:
        assert server.stop() == 0
    del CardHandler.cards["retired"]   # now 410 Gone
    restarted = Server("--state", str(state), "--watch-cards", url, "--watch-interval", INTERVAL,
                       "--watch-remove-after", "2")
    try:
        # this process never saw the card: only the memory in the state directory can remove it
        until("the agent is removed", lambda: restarted.client.get("/v1/agents/trip-planner").status_code == 404)
        assert "410" in source(restarted, url)["last_error"]
    finally:
        assert restarted.stop() == 0
    again = Server("--state", str(state))
    try:
        assert again.client.get("/v1/agents/trip-planner").status_code == 404
    finally:
        assert again.stop() == 0


@pytest.mark.slow
def test_an_operators_delete_of_a_watched_agent_survives_a_restart_with_the_card_unchanged(cards, tmp_path):
    # "a PUT or DELETE over HTTP changes it until the card next changes": a restart is no change
    state = tmp_path / "state"
    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    args = ("--state", str(state), "--watch-cards", url, "--watch-interval", INTERVAL)
    server = Server(*args)
    try:
        until("the first card", lambda: declaration(server, "trip-planner"))
        assert server.client.delete("/v1/agents/trip-planner").status_code == 200
        until("a check after the delete", lambda: source(server, url)["checks"] >= 3)
    finally:
        assert server.stop() == 0
    restarted = Server(*args)
    try:
        until("checks after the restart", lambda: source(restarted, url)["checks"] >= 3)
        assert restarted.client.get("/v1/agents/trip-planner").status_code == 404
        CardHandler.cards["planner"] = card("plan-trip", "rent-car")     # the card changes: applied
        until("the changed card", lambda: declaration(restarted, "trip-planner"))
    finally:
        assert restarted.stop() == 0


def test_a_card_that_stays_invalid_is_reported_invalid_at_every_check(cards, tmp_path):
    CardHandler.cards["planner"] = card()       # gives an agent no capability: refused
    url = f"{cards}/planner/"
    args = ("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-interval", INTERVAL)
    server = Server(*args)
    try:
        until("three checks", lambda: source(server, url)["checks"] >= 3)
        assert source(server, url)["last_result"] == "invalid"
        assert counter(server, "invalid") >= 2 and counter(server, "unchanged") == 0
    finally:
        assert server.stop() == 0
    restarted = Server(*args)     # the refusal is remembered, and said again, with its words
    try:
        status = until("a check after the restart", lambda: (s := source(restarted, url))["checks"] >= 2 and s)
        assert status["last_result"] == "invalid" and "no capabilities" in status["last_error"]
    finally:
        assert restarted.stop() == 0


def test_only_a_body_applied_or_refused_is_remembered():
    # a body still being applied (or whose apply failed) is not: after a restart it is applied again
    from a3fast.service.watch import Watched

    source = Watched("http://127.0.0.1:9/agent")
    assert source.remembered() == {"agents": [], "digest": None, "refusal": None, "fetched": None}
    source.settled, source.agents, source.fetched = b"\x01" * 32, ("trip-planner",), source.url
    again = Watched(source.url)
    again.recall(source.remembered())
    assert (again.settled, again.refusal, again.agents, again.fetched) == (source.settled, None, ("trip-planner",),
                                                                          source.url)
    old = Watched(source.url)
    old.recall(["trip-planner"])            # the memory of an earlier a3fast: agents only
    assert (old.agents, old.settled) == (("trip-planner",), None)
    worded = Watched(source.url)            # an earlier form that kept no words for a refusal
    worded.recall({"agents": [], "digest": "01" * 32, "refused": True})
    assert worded.settled is None


def _in_process(tmp_path, url: str, fail: dict, remove_after: int = 3):
    """The watch in this process over a real state directory, its operations with faults put in:
    `put_agent` fails for the names in `fail` (a shard that does not answer, a refusal), and
    `delete_agent` for the names there written "-name", each once."""
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.watch import WatchConfig, Watcher

    class Faulty(Operations):
        async def put_agent(self, body):
            exc = fail.pop(body["name"], None)
            if exc is not None:
                raise exc
            return await super().put_agent(body)

        async def delete_agent(self, body):
            exc = fail.pop("-" + body["name"], None)      # "-name": its delete fails
            if exc is not None:
                raise exc
            return await super().delete_agent(body)

    state = ServiceState(tmp_path / "state")
    state.open()
    watcher = Watcher(Faulty(state), WatchConfig(cards=(url,), interval=60, remove_after=remove_after),
                      memory=tmp_path / "watch.json")
    return state, watcher


def test_a_card_whose_apply_failed_is_applied_at_the_next_check(cards, tmp_path):
    import asyncio

    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    state, watcher = _in_process(tmp_path, url, {"trip-planner": ConnectionError("shard 1 did not answer")})
    try:
        source = watcher.sources[0]
        assert asyncio.run(watcher.check(source)) == "error" and state.fleet.get("trip-planner") is None
        assert "shard 1 did not answer" in source.last_error
        assert asyncio.run(watcher.check(source)) == "changed"      # where it said "unchanged" forever
        assert state.fleet.get("trip-planner") is not None and source.last_error is None
    finally:
        state.close()


def test_agents_put_before_a_refusal_are_the_cards_and_go_with_it(cards, tmp_path):
    import asyncio

    from a3fast.service.problems import ServiceError

    CardHandler.cards["team"] = card("plan-trip", name="planner") + b"\n" + card("book", name="booker")
    url = f"{cards}/team/"
    conflict = ServiceError(409, [{"path": "$.agent.name", "expected": "a free name", "found": "booker"}])
    state, watcher = _in_process(tmp_path, url, {"booker": conflict}, remove_after=1)
    try:
        source = watcher.sources[0]
        assert asyncio.run(watcher.check(source)) == "invalid"
        assert source.agents == ("planner",) and state.fleet.get("planner") is not None
        del CardHandler.cards["team"]                     # the card goes: its agents go with it
        assert asyncio.run(watcher.check(source)) == "removed"
        assert state.fleet.get("planner") is None
    finally:
        state.close()


def test_a_card_back_at_its_last_good_body_after_a_part_applied_one_is_applied_again(cards, tmp_path):
    # the part of the failed body already put must not outlive it: the planner went on declaring
    # book-hotel while the card said plan-trip only again
    import asyncio

    from a3fast.service.problems import ServiceError

    good = card("plan-trip", name="planner")
    CardHandler.cards["team"] = good
    url = f"{cards}/team/"
    fail: dict = {}
    state, watcher = _in_process(tmp_path, url, fail)
    try:
        source = watcher.sources[0]
        assert asyncio.run(watcher.check(source)) == "changed"
        fail["booker"] = ServiceError(409, [{"path": "$.agent.name", "expected": "a free name", "found": "booker"}])
        CardHandler.cards["team"] = card("plan-trip", "book-hotel", name="planner") + b"\n" + card("book", name="booker")
        assert asyncio.run(watcher.check(source)) == "invalid"
        assert "applied so far: 'planner'" in source.last_error
        assert len(state.fleet.get("planner").capabilities) == 2
        CardHandler.cards["team"] = good
        assert asyncio.run(watcher.check(source)) == "changed"            # where it said "unchanged"
        assert [c.name for c in state.fleet.get("planner").capabilities] == ["a2a.plan-trip"]
    finally:
        state.close()


def test_agents_put_before_a_failed_removal_go_with_their_card(cards, tmp_path):
    import asyncio

    CardHandler.cards["team"] = card("plan-trip", name="planner") + b"\n" + card("old", name="old")
    url = f"{cards}/team/"
    fail: dict = {}
    state, watcher = _in_process(tmp_path, url, fail, remove_after=1)
    try:
        source = watcher.sources[0]
        assert asyncio.run(watcher.check(source)) == "changed"
        fail["-old"] = ConnectionError("shard 2 did not answer")
        CardHandler.cards["team"] = card("plan-trip", name="planner") + b"\n" + card("new", name="newbie")
        assert asyncio.run(watcher.check(source)) == "error"
        assert set(source.agents) == {"planner", "old", "newbie"}
        del CardHandler.cards["team"]
        assert asyncio.run(watcher.check(source)) == "removed"
        assert [n for n in ("planner", "old", "newbie") if state.fleet.get(n) is not None] == []
    finally:
        state.close()


def test_an_unchanged_card_after_a_failed_fetch_or_a_restart_is_a_good_fetch(cards, tmp_path):
    import asyncio

    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    state, watcher = _in_process(tmp_path, url, {})
    try:
        source = watcher.sources[0]
        assert asyncio.run(watcher.check(source)) == "changed"
        CardHandler.do_GET, original = _answer_503, CardHandler.do_GET
        try:
            assert asyncio.run(watcher.check(source)) == "error" and "503" in source.last_error
        finally:
            CardHandler.do_GET = original
        assert asyncio.run(watcher.check(source)) == "unchanged"
        assert source.last_error is None and source.last_error_at is None    # where "HTTP 503" stayed
    finally:
        state.close()
    state, restarted = _in_process(tmp_path, url, {})
    try:
        source = restarted.sources[0]
        assert asyncio.run(restarted.check(source)) == "unchanged"
        assert source.last_good is not None and source.last_error is None   # where it stayed null
    finally:
        state.close()


def test_an_unreachable_agent_keeps_its_agent_and_backs_off(cards, tmp_path):
    CardHandler.cards["planner"] = card("plan-trip")
    url = f"{cards}/planner/"
    server = Server("--state", str(tmp_path / "state"), "--watch-cards", url, "--watch-interval", INTERVAL)
    try:
        good = until("the first card", lambda: declaration(server, "trip-planner"))
        CardHandler.do_GET, original = _answer_503, CardHandler.do_GET
        try:
            status = until("two failures", lambda: (s := source(server, url))["failures"] >= 2 and s)
        finally:
            CardHandler.do_GET = original
        assert "503" in status["last_error"]
        assert status["misses"] == 0 and status["agents"] == ["trip-planner"]
        assert declaration(server, "trip-planner") == good
        assert counter(server, "error") >= 2
    finally:
        assert server.stop() == 0


def _answer_503(self):
    self.send_response(503)
    self.send_header("Content-Length", "0")
    self.end_headers()


def test_watching_needs_an_http_url_and_the_http_server(tmp_path):
    runner = CliRunner()
    bad = runner.invoke(main, ["serve", "--watch-cards", "ftp://example/agent"])
    assert bad.exit_code == 2 and "--watch-cards ftp://example/agent: expected an http" in bad.stderr
    assert "its scheme is 'ftp'" in bad.stderr
    no_port = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--watch-cards",
                              "http://127.0.0.1:99999/agent"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert no_port.returncode == 2 and b"expected an http" in no_port.stderr
    assert b"its port '99999' is no number from 0 to 65535" in no_port.stderr
    stdio = runner.invoke(main, ["serve", "--stdio", "--watch-cards", "http://127.0.0.1:9/"])
    assert stdio.exit_code == 2 and "--stdio" in stdio.stderr


def test_watch_status_without_watched_cards_lists_none(tmp_path):
    server = Server()
    try:
        status = server.client.get("/v1/watch").json()
        jsonschema.validate(status, load_schema("watch.response"))
        assert status == {"interval": None, "remove_after": None, "sources": []}
    finally:
        assert server.stop() == 0


def test_a_watched_body_of_card_lines_skips_a_broken_line_as_the_import_does():
    # derive_declarations derives "as `a3fast import a2a` derives them": a line that cannot be
    # read is skipped, the other cards kept; a body with nothing readable is an error
    from a3fast.service.watch import WatchError, derive_declarations

    cards = [json.dumps({"name": f"agent{i}", "url": "https://a.example/",
                         "skills": [{"id": "order.investigate"}]}) for i in range(3)]
    cards[1] = cards[1][:30]
    declarations = derive_declarations(("\n".join(cards) + "\n").encode(), "https://a.example/", "https://a.example/")
    assert [d["agent"]["name"] for d in declarations] == ["agent0", "agent2"]
    with pytest.raises(WatchError, match="expected valid JSON"):
        derive_declarations(b'{"name": "x",', "https://a.example/", "https://a.example/")


def test_a_watch_stopped_in_the_middle_of_a_put_counts_it_as_the_cards(cards, tmp_path):
    # the fleet takes a put before its durable wait ends: cancelled there (the watch stopping),
    # the agent was in the fleet and in no card's memory, and outlived the card
    import asyncio

    from a3fast.service.operations import Operations

    CardHandler.cards["team"] = card("plan-trip", name="planner")
    url = f"{cards}/team/"
    state, watcher = _in_process(tmp_path, url, {}, remove_after=1)
    try:
        source = watcher.sources[0]
        assert asyncio.run(watcher.check(source)) == "changed"
        CardHandler.cards["team"] = card("plan-trip", name="planner") + b"\n" + card("new", name="newbie")
        put = Operations.put_agent

        async def put_then_stop(self, body, *args, **kwargs):
            await put(self, body, *args, **kwargs)
            raise asyncio.CancelledError        # as if cancelled in the wait after the change

        watcher.ops.put_agent = put_then_stop.__get__(watcher.ops)
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(watcher.check(source))
        assert state.fleet.get("newbie") is not None and "newbie" in source.agents and source.settled is None
        del watcher.ops.put_agent
        del CardHandler.cards["team"]
        assert asyncio.run(watcher.check(source)) == "removed"
        assert state.fleet.get("newbie") is None and state.fleet.get("planner") is None
    finally:
        state.close()


def _two_cards(tmp_path, urls: tuple[str, ...], remove_after: int = 1):
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.watch import WatchConfig, Watcher

    state = ServiceState(tmp_path / "state")
    state.open()
    return state, Watcher(Operations(state), WatchConfig(cards=urls, interval=60, remove_after=remove_after),
                          memory=tmp_path / "watch.json")


@pytest.mark.parametrize("applied_last", ["the card that stays", "the card that goes"])
def test_a_card_that_goes_deletes_only_the_agent_it_gave(cards, tmp_path, applied_last):
    import asyncio

    CardHandler.cards["a"] = card("from-a")
    CardHandler.cards["b"] = card("from-b")
    urls = (f"{cards}/a/", f"{cards}/b/")
    state, watcher = _two_cards(tmp_path, urls)
    going, staying = watcher.sources
    try:
        order = (going, staying) if applied_last == "the card that stays" else (staying, going)
        for source in order:
            assert asyncio.run(watcher.check(source)) == "changed"
        del CardHandler.cards["a"]
        assert asyncio.run(watcher.check(going)) == "removed"
        if applied_last == "the card that stays":
            # the fleet holds the other card's agent: the card that went has nothing of its own to delete
            assert capabilities(state.fleet.get("trip-planner").to_dict()) == {"a2a.from-b"}
            assert going.changes == 1
            assert asyncio.run(watcher.check(staying)) == "unchanged"
        else:
            assert state.fleet.get("trip-planner") is None and going.changes == 2
            # the card that stays, unchanged, puts its agent back
            assert asyncio.run(watcher.check(staying)) == "changed"
            assert capabilities(state.fleet.get("trip-planner").to_dict()) == {"a2a.from-b"}
    finally:
        state.close()


def test_a_card_that_moved_host_moves_its_own_agent(cards, tmp_path):
    import asyncio

    CardHandler.cards["planner"] = card("plan-trip")
    state, watcher = _two_cards(tmp_path, (f"{cards}/planner/",))
    (source,) = watcher.sources
    try:
        assert asyncio.run(watcher.check(source)) == "changed"
        assert state.fleet.get("trip-planner").agent.namespace == "127.0.0.1"
        CardHandler.cards["moved"] = card("plan-trip", "book-hotel")     # and it changed on the way
        CardHandler.cards["planner"] = cards.replace("127.0.0.1", "localhost") + "/moved/.well-known/agent-card.json"
        assert asyncio.run(watcher.check(source)) == "changed"      # a 409 at every check before
        assert state.fleet.get("trip-planner").agent.namespace == "localhost"
        assert source.changes == 2 and source.last_error is None
    finally:
        state.close()


def test_a_renamed_agent_is_one_change(cards, tmp_path):
    import asyncio

    CardHandler.cards["planner"] = card("plan-trip")
    state, watcher = _two_cards(tmp_path, (f"{cards}/planner/",))
    (source,) = watcher.sources
    try:
        assert asyncio.run(watcher.check(source)) == "changed"
        CardHandler.cards["planner"] = card("plan-trip", name="trip-planner-2")
        assert asyncio.run(watcher.check(source)) == "changed"
        assert state.fleet.get("trip-planner") is None and state.fleet.get("trip-planner-2") is not None
        assert source.changes == 2
    finally:
        state.close()
