"""The report as a person sees it: each page opened in headless Chromium with the network cut off,
no console error, no request beyond the file itself, the funnel's numbers those of the placement,
and the candidate search finding a named agent.

The browser and the page come from tests/offline_browser.py.
"""
from __future__ import annotations

import subprocess
import sys

from a3fast.report import write_report

from offline_browser import Opened, browser  # noqa: F401  (the browser fixture)
from report_traces import HOSTILE, findings_trace, hostile_placements, placed_trace, placements_trace, renumbered


def test_demo_report_opens_offline_and_its_funnels_are_the_placements(browser, tmp_path):
    placed = placed_trace(tmp_path / "demo.jsonl", agents=400, tasks=40)
    page_path = write_report(tmp_path / "demo.jsonl")
    view = Opened(browser, page_path)
    try:
        view.page.wait_for_selector("[data-testid=funnel-chart] svg")
        assert view.page.locator("[data-testid=chart-removed] svg").count() == 1
        view.screenshot("report-overview.png", tmp_path, full_page=False)
        bound_seq, bound = next((s, p) for s, p in placed if p.bound and len(p.eligible) > 1)
        rejected_seq, rejected = next((s, p) for s, p in placed if not p.bound)
        for seq, p in ((bound_seq, bound), (rejected_seq, rejected)):
            view.page.evaluate(f"location.hash = '#seq-{seq}'")
            view.page.wait_for_selector(f"[data-testid=detail-title]:has-text('seq {seq} ')")
            assert view.funnel() == p.failed_counts()
        view.page.evaluate(f"location.hash = '#seq-{bound_seq}'")
        view.page.wait_for_selector(f"[data-testid=detail-title]:has-text('seq {bound_seq} ')")
        view.page.wait_for_selector("[data-testid=scores-chart] svg")
        view.page.locator("#detail").scroll_into_view_if_needed()
        view.screenshot("report-placement.png", tmp_path)
        view.assert_clean()
    finally:
        view.close()


def test_candidate_search_finds_a_named_agent(browser, tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=300, tasks=6)
    seq, p = next((s, p) for s, p in placed if not p.bound)
    wanted = p.candidates[-7]  # past the first page of the table
    view = Opened(browser, write_report(tmp_path / "t.jsonl"), f"#seq-{seq}")
    try:
        table = view.page.locator("#candidate-rows")
        view.page.wait_for_selector("#candidate-rows tr")
        assert wanted not in table.inner_text()
        view.page.fill("#candidate-search", wanted)
        names = [row.locator("td").first.inner_text() for row in table.locator("tr").all()]
        assert names == [wanted]
        assert table.locator("tr td").nth(1).inner_text() == p.first_failed()[wanted]
        view.assert_clean()
    finally:
        view.close()


def test_findings_report_links_each_finding_to_its_record(browser, tmp_path):
    expected = findings_trace(tmp_path / "findings.jsonl")
    view = Opened(browser, write_report(tmp_path / "findings.jsonl"))
    try:
        rows = view.page.locator("[data-testid=findings] tbody tr")
        codes = [row.locator("td").first.inner_text() for row in rows.all()]
        assert {e["code"] for e in expected["errors"]} <= set(codes)
        view.page.locator("[data-testid=findings] a").first.click()
        seq = expected["errors"][0]["seq"]
        view.page.wait_for_selector(f"[data-testid=detail-title]:has-text('seq {seq} ')")
        view.screenshot("report-findings.png", tmp_path)
        view.assert_clean()
    finally:
        view.close()


def test_compact_trace_report_shows_the_same_funnel(browser, tmp_path):
    placed = placed_trace(tmp_path / "spec.jsonl", agents=200, tasks=10)
    encoded = subprocess.run([sys.executable, "-m", "a3fast", "encode", str(tmp_path / "spec.jsonl")],
                             capture_output=True, check=True).stdout
    (tmp_path / "compact.jsonl").write_bytes(encoded)
    seq, p = placed[3]
    view = Opened(browser, write_report(tmp_path / "compact.jsonl"), f"#seq-{seq}")
    try:
        assert view.funnel() == p.failed_counts()
        view.assert_clean()
    finally:
        view.close()


def test_markup_in_names_is_shown_as_text(browser, tmp_path):
    fleet, placements = hostile_placements()
    placed = placements_trace(tmp_path / "h.jsonl", placements)
    view = Opened(browser, write_report(tmp_path / "h.jsonl"), f"#seq-{placed[0][0]}")
    try:
        view.page.wait_for_selector("#candidate-rows tr")
        view.page.fill("#placement-search", HOSTILE)
        assert HOSTILE in view.page.locator("#placement-rows").inner_text()
        view.page.fill("#candidate-search", "alert(1)")
        assert view.page.locator("#candidate-rows tr td").first.inner_text() == HOSTILE
        assert view.page.locator("script:not([id]):not([type])").count() == 2  # vega, the page's own
        view.assert_clean()
    finally:
        view.close()


def test_notebook_views_render_offline(browser, tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=300, tasks=40)
    p = next(p for _, p in placed if p.bound and len(p.eligible) > 1)
    (tmp_path / "placement.html").write_text(p._repr_html_())
    view = Opened(browser, tmp_path / "placement.html")
    try:
        rows = view.page.locator("[data-testid=funnel] tbody tr").all()[:-1]
        assert {r.locator("td").nth(0).inner_text(): int(r.locator("td").nth(2).inner_text()) for r in rows} \
            == p.failed_counts()
        view.screenshot("notebook-placement.png", tmp_path)
        view.assert_clean()
    finally:
        view.close()


def test_rule_an_inline_script_not_in_the_policy_does_not_run(browser, tmp_path):
    from a3fast.report.policy import policy_of, with_policy

    placed_trace(tmp_path / "t.jsonl", agents=60, tasks=4)
    html = write_report(tmp_path / "t.jsonl").read_text()
    policy = policy_of(html)
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    end = html.rfind("</body>")
    injected = html[:end] + "<script>window.injected = 1;</script>" + html[end:]
    (hostile := tmp_path / "hostile.html").write_text(injected)
    # the control: the same script, once the policy names its hash, runs
    (allowed := tmp_path / "allowed.html").write_text(with_policy(injected))
    view = Opened(browser, hostile)
    try:
        # the page's own scripts ran, and Vega drew the chart without eval (its interpreter)
        view.page.wait_for_selector("[data-testid=funnel-chart] svg")
        assert view.page.evaluate("window.injected") is None
        assert any("Content Security Policy" in e for e in view.errors), view.errors
    finally:
        view.close()
    control = Opened(browser, allowed)
    try:
        control.page.wait_for_selector("[data-testid=funnel-chart] svg")
        assert control.page.evaluate("window.injected") == 1
        control.assert_clean()
    finally:
        control.close()


def test_rule_the_replay_page_allows_its_styles_by_hash_and_its_bars_by_attribute(browser, tmp_path):
    import a3fast
    from a3fast.report.policy import policy_of
    from a3fast.workload import generate_fleet

    from report_traces import page_of

    placed_trace(tmp_path / "t.jsonl", agents=200, tasks=30)
    revoked = a3fast.Fleet()
    revoked.extend([{**d, "clearances": [c for c in d["clearances"] if c != "orders.read"]}
                    for d in generate_fleet(200, 0)])
    _, path = page_of(tmp_path / "t.jsonl", revoked, tmp_path / "replay.html")
    policy = policy_of(path.read_text())
    assert "script-src 'none'" in policy and "style-src 'sha256-" in policy
    assert policy.count("'unsafe-inline'") == 1 and "style-src-attr 'unsafe-inline'" in policy
    view = Opened(browser, path)
    try:
        bar = view.page.locator(".bar").first
        # the style element applied (its hash allowed it) and the bar's width attribute too
        assert bar.evaluate("e => getComputedStyle(e).display") == "inline-block"
        assert bar.evaluate("e => e.getBoundingClientRect().width") > 0
        view.assert_clean()
    finally:
        view.close()


def test_negative_and_huge_seqs_open_from_their_links(browser, tmp_path):
    # a negative seq, and one a JavaScript number would round (2^60 + 1 reads as 2^60)
    for first in (-100, 2 ** 60 + 1):
        trace = tmp_path / f"t{first}.jsonl"
        placed_trace(trace, agents=30, tasks=3)
        seqs = renumbered(trace, first)
        view = Opened(browser, write_report(trace), f"#seq-{seqs[1]}")
        try:
            view.page.wait_for_selector(f"[data-testid=detail-title]:has-text('seq {seqs[1]} ')")
            rows = view.page.locator("[data-testid=placements] tbody tr")
            assert [row.get_attribute("data-seq") for row in rows.all()] == [str(s) for s in seqs]
            view.assert_clean()
        finally:
            view.close()
