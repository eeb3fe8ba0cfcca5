"""Pages opened in headless Chromium with the network cut off, shared by the suites that look at
a3fast's HTML as a person does (the report, the replay page, the service's /ui).

Chromium comes from the system packages (/usr/bin/chromium), driven by Playwright. Without it the
tests are skipped, except in CI (CI set), where a missing browser fails.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("A3FAST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
#: Where the tests keep their screenshots when set (docs/ is refreshed this way).
SCREENSHOTS = os.environ.get("A3FAST_REPORT_SCREENSHOTS")


def missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install '.[test]')"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    missing = missing_browser()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Opened:
    """A page opened offline, with everything it logged and asked for."""

    def __init__(self, browser, path: Path, fragment: str = ""):
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url + fragment)
        self.page.wait_for_load_state("load")

    def funnel(self) -> dict[str, int]:
        self.page.wait_for_selector("#detail [data-testid=funnel] tbody tr")
        rows = self.page.locator("#detail [data-testid=funnel] tbody tr").all()
        out = {}
        for row in rows[:-1]:  # the last row is the eligible total
            cells = row.locator("td").all_inner_texts()
            out[cells[0]] = int(cells[2])
        return out

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.requests == [self.url]
        assert self.dialogs == []

    def screenshot(self, name: str, tmp: Path, full_page: bool = True) -> Path:
        out = Path(SCREENSHOTS) / name if SCREENSHOTS else tmp / name
        self.page.screenshot(path=str(out), full_page=full_page)
        assert out.stat().st_size > 10_000
        return out

    def close(self) -> None:
        self.context.close()
