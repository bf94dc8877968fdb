"""``history site``: one static page, opened in a real browser (Playwright driving the system's
Chromium, no network): no console errors, the step planted at run 11 marked on its chart, and a
point's link reaching its run's report."""

from __future__ import annotations

import os
import shutil
import statistics
from pathlib import Path

import pytest

from tests.unit.history.needs import require

require()

from harness.cli import main  # noqa: E402
from harness.history.store import add  # noqa: E402
from tests.unit.history import series  # noqa: E402

CHROMIUM = os.environ.get("CARBON_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def step_site(sqlite_url, tmp_path) -> Path:
    # a step of 4 sigma of the recorded noise: one the history finds on this box (test_changes.py)
    add(sqlite_url, series.step(tmp_path / "step", size=4 * series.recorded_noise()))
    out = tmp_path / "site"
    assert main(["history", "site", str(out), "--store", sqlite_url]) == 0
    return out


def test_the_site_is_one_html_file_and_a_page_per_run_with_no_remote_asset(step_site):
    index = (step_site / "index.html").read_text()
    assert "http://" not in index.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in index
    assert len(list((step_site / "runs").glob("run-*.html"))) == 20
    assert 'class="change" data-index="11"' in index


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the page's browser test needs Playwright: "
                                   "pip install -e '.[history]' (never playwright install: it drives the system's chromium)")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set CARBON_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def test_the_page_in_chromium_shows_the_step_and_links_to_the_runs_report(step_site, browser):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((step_site / "index.html").as_uri())
    chart = page.locator('svg[id^="series-tkg_ms_p50-tests_perf_test_latency_py__test_tkg"]')
    assert chart.count() == 1
    marks = chart.locator("line.change")
    assert marks.count() == 1 and marks.first.get_attribute("data-index") == "11"
    # the planted step, as drawn: the runs from 11 sit higher on the chart (smaller y) than those before, and
    # the change's rule between runs 10 and 11
    points = chart.locator("circle.point").all()
    ys = [float(c.get_attribute("cy")) for c in points]
    assert len(ys) == 20 and statistics.fmean(ys[10:]) < statistics.fmean(ys[:10])
    x = float(marks.first.get_attribute("x1"))
    assert float(points[9].get_attribute("cx")) < x < float(points[10].get_attribute("cx"))
    chart.locator("circle.point").nth(10).click()
    page.wait_for_load_state()
    assert page.url.endswith(".html") and "/runs/run-" in page.url
    assert page.locator("h1#run").inner_text().startswith("Run ")
    assert "run-11.json" in page.content()
    assert errors == []
    page.screenshot(path=str(step_site / "shot.png"))


def test_the_release_check_table_shows_each_checks_pair_and_verdict(sqlite_url, tmp_path):
    from tests.unit.history.test_store import release_check_dir

    add(sqlite_url, [release_check_dir(tmp_path, "FAIL")])
    assert main(["history", "site", str(tmp_path / "site"), "--store", sqlite_url]) == 0
    index = (tmp_path / "site" / "index.html").read_text()
    table = index[index.index('<table id="release-checks">'):index.index("</table>")]
    assert table.count("<tr>") == 2 and '<td class="FAIL">FAIL</td>' in table
    assert "transformers=4.57.6 torch=2.13.0+cpu</td><td>transformers=5.24.0 torch=2.13.0+cpu" in table
    run_page = next((tmp_path / "site" / "runs").glob("run-*.html")).read_text()
    assert "release check 1 (baseline, round 1)" in run_page
