"""GET /ui: the report of the service's own trace, served live by a real `a3fast serve` process —
the same numbers `a3fast report` gives for that trace, new placements seen on the next request,
a 304 for a page the browser already holds, and the token like every other route."""
from __future__ import annotations

import re
import time

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.report.policy import inline_sources, policy_of, source_hash
from a3fast.service.ui import live_page
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server, put_section_10_agents

pytest.importorskip("starlette")

REJECTED_TASK = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 9}]}
_DATA = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>', re.S)


def report_data(html: str) -> dict:
    return orjson.loads(_DATA.search(html).group(1))


def place(server: Server, task: dict) -> None:
    assert server.client.post("/v1/place", json={"requirements": task}).status_code == 200


def report_of_trace(server: Server, tmp_path) -> dict:
    """What `a3fast report` writes for the service's trace as GET /v1/trace gives it."""
    trace = tmp_path / "served.jsonl"
    trace.write_bytes(server.client.get("/v1/trace").content)
    result = CliRunner().invoke(main, ["report", str(trace)])
    assert result.exit_code == 0, result.stderr
    return report_data(trace.with_suffix(".html").read_text())


@pytest.fixture()
def server(tmp_path):
    s = Server("--state", str(tmp_path / "state"))
    put_section_10_agents(s.client)
    yield s
    assert s.stop() == 0


def test_ui_shows_the_funnels_a3fast_report_gives_for_the_trace(server, tmp_path):
    for task in (SECTION_10_TASK, REJECTED_TASK, SECTION_10_TASK):
        place(server, task)
    r = server.client.get("/ui")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    shown = report_data(r.text)
    assert [p["kind"] for p in shown["placements"]] == ["task.bound", "task.rejected", "task.bound"]
    assert shown == report_of_trace(server, tmp_path)
    bound = shown["placements"][0]
    assert (bound["n"], bound["e"], bound["r"]) == (2, 1, [1, 0, 0])   # summariser fails the capability

    for task in (REJECTED_TASK, SECTION_10_TASK):
        place(server, task)
    again = report_data(server.client.get("/ui").text)
    assert len(again["placements"]) == 5
    assert again == report_of_trace(server, tmp_path)


def test_ui_answers_304_while_the_trace_is_unchanged(server):
    place(server, SECTION_10_TASK)
    first = server.client.get("/ui")
    tag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    assert server.client.get("/ui", headers={"If-None-Match": tag}).status_code == 304
    place(server, SECTION_10_TASK)
    changed = server.client.get("/ui", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag


def test_ui_data_names_the_page_it_should_show(server):
    before = server.client.get("/ui/data").json()
    page = server.client.get("/ui").text
    assert f"var version = {before['version']}," in page
    place(server, SECTION_10_TASK)
    deadline = time.monotonic() + 10
    while (after := server.client.get("/ui/data").json())["version"] == before["version"]:
        assert time.monotonic() < deadline, "/ui/data never named the grown trace"
        time.sleep(0.05)
    assert after["version"] > before["version"] and after["next_seq"] == before["next_seq"] + 3


def test_the_poll_keeps_a_recent_page_so_rendering_stays_bounded():
    import asyncio

    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.ui import LiveReport

    async def scenario():
        state = ServiceState(None)
        state.open()
        ops = Operations(state)
        try:
            for agent in SECTION_10_AGENTS:
                await ops.put_agent({"name": agent["agent"]["name"], "declaration": agent})
            await ops.place({"requirements": SECTION_10_TASK})
            kept = LiveReport(state, spacing=1e6)   # a render is "recent" for ages
            fresh = LiveReport(state, spacing=0.0)
            shown = (await kept.page()).version
            await fresh.page()
            await ops.place({"requirements": SECTION_10_TASK})
            grown = await kept.version()
            assert grown > shown
            assert await kept.shown_version() == shown      # the poll is not told yet
            assert await fresh.shown_version() == grown     # no spacing: told at once
            page = await kept.page()                        # a direct GET renders the current trace
            assert page.version == grown and len(report_data(page.html.decode())["placements"]) == 2
            assert await kept.shown_version() == grown
        finally:
            state.close()
    asyncio.run(scenario())


def test_ui_of_an_empty_trace_is_a_page(tmp_path):
    s = Server()
    try:
        r = s.client.get("/ui")
        assert r.status_code == 200 and report_data(r.text)["placements"] == []
    finally:
        assert s.stop() == 0


def test_ui_needs_the_token_like_every_route(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    s = Server("--token-file", str(token))
    try:
        assert s.client.get("/ui").status_code == 401
        assert s.client.get("/ui/data").status_code == 401
        assert s.client.get("/ui?token=s3cret").status_code == 401
        assert s.client.get("/ui", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    finally:
        assert s.stop() == 0


def test_live_page_may_ask_only_its_own_origin():
    html = ('<meta http-equiv="Content-Security-Policy" content="a3fast-content-security-policy">'
            '<script>var a = 1;</script><body></body>')
    live = live_page(html, 42, poll=2.0)
    policy = policy_of(live)
    assert policy.startswith("default-src 'none'; script-src 'sha256-") and "connect-src 'self'" in policy
    assert "unsafe" not in policy
    # the page's own script and the live script, each by its hash
    assert policy.count("'sha256-") == 2 and source_hash("var a = 1;") in policy
    assert "var version = 42, every = 2000;" in live
    with pytest.raises(ValueError, match="no Content-Security-Policy"):
        live_page("<body></body>", 1)


def test_rule_ui_sends_its_policy_as_a_header_with_frame_ancestors_and_nosniff(server):
    answer = server.client.get("/ui")
    assert answer.status_code == 200
    header = answer.headers["content-security-policy"]
    assert header == f"{policy_of(answer.text)}; frame-ancestors 'none'"
    assert "unsafe-inline" not in header and "unsafe-eval" not in header
    scripts, styles = inline_sources(answer.text)
    assert len(scripts) == 3 and all(source_hash(s) in header for s in scripts + styles)
    assert answer.headers["x-content-type-options"] == "nosniff"
    again = server.client.get("/ui", headers={"If-None-Match": answer.headers["etag"]})
    assert again.status_code == 304 and again.headers["content-security-policy"] == header


# -- in a browser ----------------------------------------------------------------------------------
def test_ui_opens_in_a_browser_and_follows_new_placements(server):
    from offline_browser import CHROMIUM, missing_browser
    import os

    missing = missing_browser()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    place(server, SECTION_10_TASK)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            elsewhere: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: None if r.url.startswith(server.url) else elsewhere.append(r.url))
            page.goto(f"{server.url}/ui")
            page.wait_for_selector("[data-testid=funnel-chart] svg")
            count = "JSON.parse(document.getElementById('report-data').textContent).placements.length"
            assert page.evaluate(count) == 1
            place(server, REJECTED_TASK)
            # the page polls every 3 s and reloads itself when the trace has grown
            deadline = time.monotonic() + 15
            while _evaluate(page, count) != 2:
                assert time.monotonic() < deadline, "the page did not reload within 15 s"
                time.sleep(0.2)
            page.wait_for_selector("[data-testid=funnel-chart] svg")
            assert errors == [] and elsewhere == []
        finally:
            browser.close()


def _evaluate(page, expression: str):
    """The expression's value, or None while the page is between two loads."""
    from playwright.sync_api import Error

    try:
        return page.evaluate(expression)
    except Error:
        return None
