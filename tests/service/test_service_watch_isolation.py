"""Watched sources are independent: one card server dripping its response head, one redirecting to
`javascript:`, one healthy. The healthy card is still checked on schedule, the watch keeps running,
and each bad source's error (and when) shows at /v1/watch and /metrics. Real servers on 127.0.0.1
(tests/hostile_http.py), the real Watcher in-process with a short deadline, and a real
`a3fast serve --watch-cards` process with the default one."""
from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from hostile_http import RawServer, dripping, redirecting_to  # noqa: E402
from service_process import Server  # noqa: E402
from test_service_watch import CardHandler, card, cards, source, until  # noqa: E402,F401 (cards: fixture)


@pytest.fixture
def hostile():
    drip, js = RawServer(dripping), RawServer(redirecting_to("javascript:alert(document.cookie)"))
    yield drip, js
    drip.close()
    js.close()


def _metric(text: str, name: str, source: str) -> float | None:
    prefix = f'{name}{{source="{source}"}} '
    return next((float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), None)


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
def test_rule_a_dripping_source_delays_no_other_and_every_error_shows(hostile, cards, tmp_path):
    from prometheus_client import generate_latest

    from a3fast.interop.fetch import Limits
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.watch import WatchConfig, Watcher

    drip, js = hostile
    CardHandler.cards["planner"] = card("plan-trip")
    healthy = f"{cards}/planner/"
    state = ServiceState(tmp_path / "state")
    state.open()
    watcher = Watcher(Operations(state), WatchConfig(cards=(drip.url, js.url, healthy), interval=0.2,
                                                     limits=Limits(timeout=1, deadline=1.5)))

    async def watch_for(seconds: float) -> bool:
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(seconds)
        running = watcher.running and not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return running

    started = time.monotonic()
    try:
        assert asyncio.run(watch_for(4.0)), "the watch stopped"
    finally:
        state.close()
    assert time.monotonic() - started < 8
    by_url = {s["url"]: s for s in watcher.status()["sources"]}
    good, slow, redirected = by_url[healthy], by_url[drip.url], by_url[js.url]
    # every 0.2 s for 4 s (20 on schedule; sequential checks behind the dripping one made 1)
    assert good["checks"] >= 8 and good["last_error"] is None and good["agents"] == ["trip-planner"]
    assert slow["checks"] >= 1 and "no complete card within 1.5 s" in slow["last_error"]
    assert slow["last_result"] == "error" and slow["last_error_at"] and slow["errors"] == slow["checks"]
    assert "a URL the client cannot follow" in redirected["last_error"] and redirected["errors"] >= 1
    assert state.fleet.get("trip-planner") is not None
    text = generate_latest().decode()
    assert _metric(text, "a3fast_watch_source_failing", drip.url) == 1
    assert _metric(text, "a3fast_watch_source_failing", js.url) == 1
    assert _metric(text, "a3fast_watch_source_failing", healthy) == 0
    assert _metric(text, "a3fast_watch_source_last_error_timestamp_seconds", js.url) > started - 1
    assert "a3fast_watch_running 0.0" in text


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
def test_rule_under_serve_the_healthy_card_is_checked_while_another_drips(hostile, cards, tmp_path):
    drip, js = hostile
    CardHandler.cards["planner"] = card("plan-trip")
    healthy = f"{cards}/planner/"
    server = Server("--watch-cards", drip.url, "--watch-cards", js.url, "--watch-cards", healthy,
                    "--watch-interval", "0.1")
    try:
        until("the healthy card checked five times", lambda: source(server, healthy)["checks"] >= 5)
        redirected = until("the redirect's error shown", lambda: (s := source(server, js.url))["last_error"] and s)
        assert "a URL the client cannot follow" in redirected["last_error"] and redirected["last_error_at"]
        # the dripping card's first fetch is still waiting for its 30 s deadline
        assert source(server, drip.url)["checks"] == 0
        status = server.client.get("/v1/watch").json()
        assert status["running"] is True
        metrics = server.client.get("/metrics").text
        assert _metric(metrics, "a3fast_watch_source_failing", js.url) == 1
        assert _metric(metrics, "a3fast_watch_source_failing", healthy) == 0
        assert "a3fast_watch_running 1.0" in metrics
        assert server.client.get("/v1/agents/trip-planner").status_code == 200
    finally:
        assert server.stop() == 0
