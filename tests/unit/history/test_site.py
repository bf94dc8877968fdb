"""``history site``: one static page, opened in a real browser (Playwright driving the system's
Chromium, no network), on the quiet series' real runs (fixtures/history/quiet, tests/unit/history/quiet_pages.py,
the pages the docs' screenshots show): no console errors, the step planted from run 11 marked at run 11 on its
chart, a point's link reaching its run's report; in release order, the drift's trend across the five releases drawn
and listed."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from tests.unit.history.needs import require

require()

from harness.cli import main  # noqa: E402
from harness.history.store import add  # noqa: E402
from tests.helpers import REPO  # noqa: E402
from tests.unit.history.quiet_pages import ARGS, CHROMIUM, ORDER, QUIET, TKG_MIN, quiet_site  # noqa: E402

SUMMARY = json.loads((QUIET / "summary.json").read_text())  # the figures docs/history.md quotes


@pytest.fixture
def step_site(sqlite_url, tmp_path) -> Path:
    """The quiet step, in time order: the spin from run 11 (fixtures/history/README.md)."""
    return quiet_site("step", sqlite_url, tmp_path / "site").parent


@pytest.fixture
def drift_site(sqlite_url, tmp_path) -> Path:
    """The quiet drift's five releases, in release order."""
    return quiet_site("drift", sqlite_url, tmp_path / "site").parent


def svg(index: str, figure: str) -> str:
    start = index.index(f'<svg id="series-{figure}-tests_perf_test_latency_py__test_tkg')
    return index[start:index.index("</svg>", start)]


def test_the_site_is_one_html_file_and_a_page_per_run_with_no_remote_asset(step_site):
    index = (step_site / "index.html").read_text()
    assert "http://" not in index.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in index
    assert len(list((step_site / "runs").glob("run-*.html"))) == 20
    assert re.findall(r'class="change" data-index="(\d+)"', svg(index, "tkg_ms_min")) == ["11"]
    # in time order: no releases drawn, no trend listed
    assert 'class="release"' not in index and 'id="trends"' not in index and "runs in time order" in index


def test_in_release_order_each_chart_draws_its_runs_release_by_release(drift_site):
    """The change points' indices count runs in release order, so the chart is drawn in it: the drift's runs
    were made interleaved (one of each release in turn), which time order would draw."""
    chart = svg((drift_site / "index.html").read_text(), "tkg_ms_min")
    releases = re.findall(r"<title>run \d+: [^(]*\(neuronx-distributed-inference=0\.(\d+)\.0", chart)
    assert [int(r) for r in releases] == [8 + k for k in range(5) for _ in range(6)]
    assert re.findall(r'class="release" data-release="(\d)"', chart) == list("01234")
    drift = SUMMARY["drift"]["releases5"]
    # Otava's step at release 3's first run is under the floor (drift["ratio"] noises): no change marked, the trend is
    assert drift["ratio"] < 2.75 and re.findall(r'class="change" data-index="(\d+)"', chart) == []
    assert f"trend {drift['per_release']['value']:+.1f}% a release [{drift['low']['value']:+.1f}%, " \
           f"{drift['high']['value']:+.1f}%]" in chart


def test_the_trend_is_drawn_through_each_releases_middle_run_at_its_fitted_figure(drift_site, sqlite_url, tmp_path):
    """At release K's middle run, the first release's median times (1 + the size a release)^K, read back through
    the chart's own scale (each point's value against its height)."""
    chart = svg((drift_site / "index.html").read_text(), "tkg_ms_min")
    dots = [(float(x), float(y), float(v)) for v, x, y in
            re.findall(r'data-value="([^"]+)" cx="([^"]+)" cy="([^"]+)"', chart)]
    (lo_y, lo_v), (hi_y, hi_v) = min((y, v) for _, y, v in dots), max((y, v) for _, y, v in dots)

    def value_at(y: float) -> float:
        return lo_v + (y - lo_y) / (hi_y - lo_y) * (hi_v - lo_v)

    trend = re.search(r'class="trend" data-per-release="([^"]+)" points="([^"]+)"', chart)
    per_release, xy = float(trend[1]), [tuple(map(float, p.split(","))) for p in trend[2].split()]
    first = SUMMARY["drift"]["releases5"]["first"]["value"]
    for k, (x, y) in enumerate(xy):
        assert x == pytest.approx(statistics.fmean(d[0] for d in dots[6 * k:6 * k + 6]), abs=0.1)
        assert value_at(y) == pytest.approx(first * (1 + per_release) ** k, rel=2e-3)
    # in time order, neither the releases nor a trend: the trend is a release order's
    assert main(["history", "site", str(tmp_path / "by-time"), "--store", sqlite_url]) == 0
    by_time = (tmp_path / "by-time" / "index.html").read_text()
    assert 'class="trend"' not in by_time and 'class="release"' not in by_time and 'id="trends"' not in by_time


@pytest.fixture(scope="module")
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


def opened(browser, index: Path):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(index.as_uri())
    return page, errors


def test_the_page_in_chromium_shows_the_real_step_at_run_11_and_links_to_the_runs_report(step_site, browser):
    page, errors = opened(browser, step_site / "index.html")
    chart = page.locator(TKG_MIN)
    assert chart.count() == 1 and chart.is_visible()
    marks = chart.locator("line.change")
    assert marks.count() == 1 and marks.first.get_attribute("data-index") == "11"
    step = SUMMARY["step"]
    label = f"run 11: {step['change']['value']:+.1f}% [{step['low']['value']:+.1f}%, {step['high']['value']:+.1f}%]"
    shown = chart.locator("text.change-label")  # the rule itself is a line of no width: Playwright calls it hidden
    assert shown.is_visible() and shown.text_content() == label
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
    assert "quiet/step/run-11.json" in page.content()
    assert errors == []


def test_the_page_in_chromium_shows_the_drifts_trend_across_releases(drift_site, browser):
    page, errors = opened(browser, drift_site / "index.html")
    drift = SUMMARY["drift"]["releases5"]
    size = f"{drift['per_release']['value']:+.1f}% [{drift['low']['value']:+.1f}%, {drift['high']['value']:+.1f}%]"
    row = page.locator("#trends tr", has=page.locator("a", has_text="tkg_ms_min"))
    assert row.count() == 1 and row.is_visible() and size in row.inner_text() and "regression" in row.inner_text()
    trend = page.locator(TKG_MIN).locator("polyline.trend")
    assert trend.count() == 1 and trend.is_visible()
    # drawn through each release's middle run, rising (smaller y) release by release
    xy = [tuple(map(float, p.split(","))) for p in trend.get_attribute("points").split()]
    assert len(xy) == 5 and all(b[0] > a[0] and b[1] < a[1] for a, b in zip(xy, xy[1:]))
    # its row links to its chart
    row.locator("a").click()
    assert page.url.endswith("#" + page.locator(TKG_MIN).get_attribute("id"))
    assert errors == []


def test_the_docs_show_both_quiet_pages_as_small_pngs_with_what_they_show():
    """The screenshots of the pages above (``python -m tests.unit.history.quiet_pages docs/img``), each shown in
    docs/history.md beside the change or trend the page marks."""
    page = (REPO / "docs" / "history.md").read_text()
    step, drift = SUMMARY["step"], SUMMARY["drift"]["releases5"]
    said = {"step": f"marked at run 11, {step['change']['value']:+.1f}% [{step['low']['value']:+.1f}%, "
                    f"{step['high']['value']:+.1f}%]",
            "drift": f"{drift['per_release']['value']:+.1f}% a release\n[{drift['low']['value']:+.1f}%, "
                     f"{drift['high']['value']:+.1f}%]"}
    for kind in ORDER:
        shown = page.index(f"](img/history-{kind}.png)")
        assert said[kind] in page[shown - 400:shown], kind
        png = (REPO / "docs" / "img" / f"history-{kind}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and 10_000 < len(png) < 60_000, (kind, len(png))


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
