"""The trend page of the quiet series (fixtures/history/quiet, real carbon-tiny runs made on this box with nothing
else running, 2026-11-29): the step, in time order, and the five releases of the drift, in release order. The
browser tests (test_site.py) open these pages; the docs' pictures are screenshots of the same pages:

    python -m tests.unit.history.quiet_pages docs/img   # history-step.png, history-drift.png

Playwright drives the system's Chromium (``$CARBON_CHROMIUM``, else /usr/bin/chromium), never a downloaded one."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from harness.cli import main
from harness.core.paths import FIXTURES_DIR
from harness.history.store import add

QUIET = FIXTURES_DIR / "history" / "quiet"
CHROMIUM = os.environ.get("CARBON_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ORDER = {"step": "time", "drift": "release"}  # the step's runs by time; the drift's by release
# the chart the docs show: the fastest timed TKG round, in CPU time (docs/history.md, "How noisy each figure is")
TKG_MIN = 'svg[id^="series-tkg_ms_min-tests_perf_test_latency_py__test_tkg"]'


def quiet_site(kind: str, store_url: str, out: Path) -> Path:
    """``history add`` of the quiet ``kind``'s runs into ``store_url``, then ``history site out`` in its order."""
    add(store_url, sorted((QUIET / kind).glob("*.json")))
    if main(["history", "site", str(out), "--store", store_url, "--order", ORDER[kind]]) != 0:
        raise RuntimeError(f"history site {out} failed")
    return out / "index.html"


def screenshots(dest: Path) -> list[Path]:
    """``dest/history-{step,drift}.png``: the tkg_ms_min section of each quiet page, as headless Chromium draws it."""
    from playwright.sync_api import sync_playwright

    written = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for kind in ORDER:
                index = quiet_site(kind, f"sqlite:///{Path(tmp) / kind}.sqlite", Path(tmp) / kind)
                page = browser.new_page(viewport={"width": 760, "height": 600})
                page.goto(index.as_uri())
                section = page.locator("section.series", has=page.locator(TKG_MIN))
                written.append(dest / f"history-{kind}.png")
                section.screenshot(path=str(written[-1]))
        finally:
            browser.close()
    return written


if __name__ == "__main__":
    for path in screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img")):
        print(path, path.stat().st_size, "bytes")
