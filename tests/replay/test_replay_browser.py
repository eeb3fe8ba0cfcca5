"""The replay page as a person sees it, in headless Chromium with the network cut off (as the report's
page is tested): no console error, no request beyond the file, the totals and each change's funnels
those of the replay, and names from the trace shown as text, never run."""
from __future__ import annotations

import a3fast
from a3fast.replay import summarise, parse_thresholds
from a3fast.workload import generate_fleet

from offline_browser import Opened, browser  # noqa: F401  (the browser fixture)
from report_traces import HOSTILE, hostile_placements, page_of, placed_trace, placements_trace


def test_replay_page_opens_offline_with_the_replays_totals_and_funnels(browser, tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=300, tasks=60)
    docs = generate_fleet(300, 0)
    revoked = a3fast.Fleet()
    revoked.extend([{**d, "clearances": [c for c in d["clearances"] if c != "orders.read"]} for d in docs])
    verdicts, path = page_of(tmp_path / "t.jsonl", revoked, tmp_path / "replay.html",
                             thresholds=parse_thresholds("unschedulable>0"))
    summary = summarise(verdicts)
    assert summary.changed > 0
    view = Opened(browser, path)
    try:
        page = view.page
        assert int(page.locator("[data-testid=changed]").inner_text()) == summary.changed
        assert int(page.locator("[data-testid=unschedulable]").inner_text()) == summary.kinds["unschedulable"]
        assert "beyond" in page.locator("[data-testid=thresholds]").inner_text()
        first = next(v for v in verdicts if v.changed)
        details = page.locator(f"details#seq-{first.seq}")
        details.locator("summary").click()
        rows = details.locator("[data-testid=funnel-after] tbody tr").all()[:-1]
        shown = {r.locator("td").nth(0).inner_text(): int(r.locator("td").nth(2).inner_text()) for r in rows}
        assert shown == {c.predicate: c.removed for c in first.funnel_after.predicates}
        assert details.locator("[data-testid=funnel-before]").is_visible()
        view.screenshot("replay-page.png", tmp_path)
        view.assert_clean()
    finally:
        view.close()


def test_replay_page_shows_hostile_names_as_text(browser, tmp_path):
    fleet, placements = hostile_placements()
    placements_trace(tmp_path / "h.jsonl", placements)
    fleet.remove(HOSTILE)
    _, path = page_of(tmp_path / "h.jsonl", fleet, tmp_path / "h.html")
    view = Opened(browser, path)
    try:
        assert HOSTILE in view.page.locator("[data-testid=changes]").inner_text()
        view.assert_clean()
    finally:
        view.close()


def test_replay_page_of_no_change_says_so(browser, tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=100, tasks=10)
    fleet = a3fast.Fleet()
    fleet.extend(generate_fleet(100, 0))
    _, path = page_of(tmp_path / "t.jsonl", fleet, tmp_path / "same.html")
    view = Opened(browser, path)
    try:
        assert view.page.locator("[data-testid=unchanged]").is_visible()
        view.assert_clean()
    finally:
        view.close()
