"""Issue 59's done-when on real runs, replayed: ``fixtures/history/cpu-time`` holds real carbon-tiny perf runs
made one after another on this shared 2-core box under the other engineers' load (fixtures/history/README.md),
timed in process CPU time, with the slowdowns planted in the code (a spin before every Llama forward, on the
side's PYTHONPATH), not by scaling figures. The judged figure is the fastest timed TKG round, ``tkg_ms_min``
in CPU time (the quietest of the figures measured here: docs/history.md, "How noisy each figure is")."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from tests.unit.history.needs import require

require()

from harness.cli import main  # noqa: E402
from harness.core.paths import FIXTURES_DIR  # noqa: E402
from harness.history.changes import FLOOR_NOISES, MAX_PVALUE, find_changes  # noqa: E402
from harness.history.changes import noise as run_to_run  # noqa: E402
from harness.history.clocks import CONTENDED, WHY, unjudged  # noqa: E402
from harness.history.store import add, connected, points  # noqa: E402

RUNS = FIXTURES_DIR / "history" / "cpu-time"
CHOSEN = "tkg_ms_min"
TKG = "test_tkg[carbon-tiny-smoke]"


def aa_runs() -> list[Path]:
    return sorted((RUNS / "aa").glob("run-*.json"))


def step_runs(kind: str = "step10") -> list[Path]:
    """Runs 11-20 of the A/A, then 10 planted runs made after them: 20 runs, the plant from run 11 (``step``:
    made right after the A/A; ``step10``: right after ``step``)."""
    return aa_runs()[10:] + sorted((RUNS / kind).glob("run-*.json"))


def drift_runs(releases: int) -> list[Path]:
    """The first ``releases`` releases' runs (made interleaved: one run of each release in turn)."""
    return sorted(p for p in (RUNS / "drift").glob("rel*-run*.json") if int(p.name[3]) < releases)


def figure(path: Path, name: str = CHOSEN, test: str = "test_tkg") -> float:
    data = json.loads(path.read_text())
    b = next(b for b in data["benchmarks"] if b["name"].startswith(test))
    return 1000 * b["stats"]["min"] if name == CHOSEN else b["extra_info"][name]


def noise(paths: list[Path], name: str) -> float:
    """The standard deviation of log(figure) across runs: the run-to-run noise, as a fraction."""
    return statistics.stdev(math.log(figure(p, name)) for p in paths)


def changes_of(url: str, order: str = "time", figure_name: str | None = None):
    with connected(url) as conn:
        return find_changes(points(conn), order, MAX_PVALUE, figure_name)


def test_the_fixtures_are_the_runs_the_docs_describe():
    assert len(aa_runs()) == 20 and len(step_runs("step")) == len(step_runs("step10")) == 20
    assert len(drift_runs(5)) == 20 and len(drift_runs(4)) == 16
    for p in aa_runs() + step_runs("step") + step_runs("step10") + drift_runs(5):
        data = json.loads(p.read_text())
        assert {b["options"]["timer"] for b in data["benchmarks"]} == {"process_time"}, p
        assert data["carbon_harness"]["load"]["loaded"] is True, p  # made beside the other engineers' jobs


def test_the_chosen_figure_is_quieter_than_the_median_of_the_same_rounds():
    assert noise(aa_runs(), CHOSEN) < noise(aa_runs(), "tkg_ms_p50")


def bandwidth(path: Path) -> float:
    return json.loads(path.read_text())["carbon_harness"]["hardware"]["memory_bandwidth_gbps"]


def test_aa_twenty_real_runs_no_change_point_and_the_roofline_reported_not_judged(sqlite_url):
    """By Otava's test alone the A/A had one change, in ``tkg_roofline_fraction`` at run 19: its denominator is the
    memory bandwidth each session measures by an array copy timed in wall time (harness.core.hardware), which read half
    what it read before under the load of runs 19 and 20 (load average 14-15), and the fraction doubled. It measures
    the neighbours' load, not the code: in these CPU-timed runs it is not judged, and is reported so."""
    add(sqlite_url, aa_runs())
    assert changes_of(sqlite_url) == []
    with connected(sqlite_url) as conn:
        assert [(n.figure, n.series) for n in unjudged(points(conn)) if n.why == WHY] == [("tkg_roofline_fraction", 1)]
    before = statistics.median(map(bandwidth, aa_runs()[:18]))
    assert all(bandwidth(p) < 0.6 * before for p in aa_runs()[18:])


SPIN_MS_PER_1000 = 0.0092  # sum(range(1000)) in CPU time on this box (fixtures/history/README.md)


@pytest.mark.parametrize(("kind", "tkg", "cte"), [("step", [], [("cte_ms_min", 15)]), ("step10", [], [])])
def test_a_planted_step_under_this_load_is_not_told_from_the_load(sqlite_url, capsys, kind, tkg, cte):
    """The spin adds 30,000 x 9.2 us = 0.28 ms of CPU to every TKG step (10% of the A/A's fastest round) for ``step``,
    11,500 x 9.2 us = 0.11 ms (3.8%) for ``step10``, the control. Otava's test finds ``tkg_ms_min`` up from run 12
    in ``step`` (+21%), but at 9.8% noise a run that is 2.1 noises, under the floor; and the control's TKG median
    rose +21% from run 11, and the CTE, to which the spin adds as little, 18-24% in both: the runs after the A/A
    were slower whatever was planted, so a plant made in sequence cannot be told from the load moving
    (docs/history.md: the drift's releases were interleaved; the quiet box finds the step). Judged: the fastest
    rounds only (a typical round of CPU-timed runs is not: clocks.CONTENDED), the step's CTE +24% at run 15."""
    add(sqlite_url, step_runs(kind))
    found = changes_of(sqlite_url)
    assert [(c.series["figure"], c.index) for c in found if c.series["benchmark"].endswith(TKG)] == tkg
    found_cte = [c for c in found if "test_cte" in c.series["benchmark"]]
    assert [(c.series["figure"], c.index) for c in found_cte] == cte
    assert all(c.regression and c.change > 0.15 and abs(c.change) >= c.floor for c in found_cte)
    (raw,) = [r for r in raw_changes(sqlite_url) if r["figure"] == CHOSEN]  # Otava's test alone: under the floor
    assert raw["change"]["value"] > 20 and raw["ratio"] < FLOOR_NOISES
    assert main(["history", "changes", "--store", sqlite_url, "--figure", CHOSEN]) == 0
    assert capsys.readouterr().out.startswith("0 change points in 1 series")


def release_median(k: int) -> float:
    return statistics.median(figure(p) for p in drift_runs(5) if p.name.startswith(f"rel{k}-"))


def test_a_drift_of_releases_each_three_percent_slower_is_not_found_at_this_boxs_noise(sqlite_url, capsys):
    """Five releases, each TKG path 3% slower than the one before (interleaved: one run of each in turn): the
    fastest round's median does rise from release 0 to release 4, but at 7% noise a run, four runs a release
    are not enough: no change point by the 4th release or the 5th (docs/history.md)."""
    assert release_median(4) > release_median(0)
    for releases in (4, 5):
        url = sqlite_url.replace("history.sqlite", f"drift{releases}.sqlite")
        add(url, drift_runs(releases))
        assert [c for c in changes_of(url, "release") if "_ms_" in c.series["figure"]] == []
        assert main(["history", "changes", "--store", url, "--order", "release", "--figure", CHOSEN]) == 0
        assert capsys.readouterr().out.startswith("0 change points in 1 series")


def test_the_summary_the_docs_quote_is_these_runs():
    """fixtures/history/cpu-time/summary.json, which docs/history.md quotes, recomputed from the runs here."""
    from scipy import stats

    summary = json.loads((RUNS / "summary.json").read_text())
    assert round(100 * noise(aa_runs(), CHOSEN), 1) == summary["noise"]["tkg_ms_min_cpu_aa"]["value"]
    assert round(100 * noise(aa_runs(), "tkg_ms_p50"), 1) == summary["noise"]["tkg_ms_p50_cpu_aa"]["value"]
    drift = summary["drift"]
    assert round(release_median(0), 2) == drift["release0"]["value"]
    assert round(release_median(4), 2) == drift["release4"]["value"]
    line = stats.linregress([int(p.name[3]) for p in drift_runs(5)], [math.log(figure(p)) for p in drift_runs(5)])
    assert round(100 * line.slope, 1) == drift["trend_per_release"]["value"]
    assert round(100 * line.stderr, 1) == drift["trend_se"]["value"] and round(line.pvalue, 3) == drift["trend_p"]
    every = aa_runs() + step_runs("step")[10:] + step_runs("step10")[10:] + drift_runs(5)
    readings = [bandwidth(p) for p in every]
    assert (round(min(readings), 1), round(max(readings))) == (summary["bandwidth_gbps"]["low"]["value"],
                                                             summary["bandwidth_gbps"]["high"]["value"])


# The quiet series (fixtures/history/quiet): the same job made on this box with nothing else running (2026-11-29,
# load average 0.6-1.7; each run's carbon_harness.load), by tests/unit/history/make_quiet_fixtures.py from the
# coordinator's runs. A/A, a step of COUNT 30,000 from run 11 of 20, and five releases each a spin of 3% of the
# fastest TKG round slower than the one before, six runs each, interleaved (one run of each release in turn).
QUIET = FIXTURES_DIR / "history" / "quiet"
QUIET_SUMMARY = json.loads((QUIET / "summary.json").read_text())


def quiet(kind: str, releases: int = 5) -> list[Path]:
    return sorted(p for p in (QUIET / kind).glob("*.json") if kind != "drift" or int(p.name[3]) < releases)


def trends_of(url: str, figure_name: str | None = None):
    from harness.history.trend import find_trends

    with connected(url) as conn:
        return find_trends(points(conn), MAX_PVALUE, figure_name)


def as_releases(paths: list[Path], out: Path, per: int) -> list[Path]:
    """The runs in their order as releases of ``per`` runs each (NxDI 0.8.0, 0.9.0, ...), every figure as run."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, p in enumerate(paths):
        data = json.loads(p.read_text())
        data["carbon_harness"]["versions"]["neuronx-distributed-inference"] = f"0.{8 + i // per}.0"
        written.append(out / p.name)
        written[-1].write_text(json.dumps(data))
    return written


def test_the_quiet_fixtures_are_the_runs_the_docs_describe():
    assert (len(quiet("aa")), len(quiet("step")), len(quiet("drift")), len(quiet("drift", 4))) == (20, 20, 30, 24)
    for p in quiet("aa") + quiet("step") + quiet("drift"):
        data = json.loads(p.read_text())
        assert {b["options"]["timer"] for b in data["benchmarks"]} == {"process_time"}, p
        assert data["carbon_harness"]["load"]["loadavg"][0] < 2, p  # nothing else ran (but see the step's)
        planted = data["carbon_harness"].get("planted")
        if "step" in p.parts:
            assert (planted is not None) == (int(p.stem[4:]) >= 11), p
        if "drift" in p.parts:
            k = int(p.name[3])
            assert planted.startswith(f"release {k}: ") and data["carbon_harness"]["versions"][
                "neuronx-distributed-inference"] == f"0.{8 + k}.0", p
    # the harness's own load reading: five of the step's runs had another process beside them (0.5-1 CPU)
    loaded = [int(p.stem[4:]) for p in quiet("step") if json.loads(p.read_text())["carbon_harness"]["load"]["loaded"]]
    assert loaded == [7, 8, 11, 16, 17]
    assert not any(json.loads(p.read_text())["carbon_harness"]["load"]["loaded"] for p in quiet("aa") + quiet("drift"))


def test_quiet_aa_no_change_point_and_no_trend_across_releases(sqlite_url, tmp_path):
    """20 runs of the same code: no change point. Otava's test alone finds one in ``cte_ms_min``, an improvement at
    run 9 (the prefill's fastest of 15 rounds 6% quicker from there on: the quiet box's own level moving), 2.12 times
    the series' run-to-run noise: under the floor (2.75). Read as five releases of four runs in their order, no trend
    in any figure."""
    add(sqlite_url, quiet("aa"))
    assert changes_of(sqlite_url) == []
    (raw,) = raw_changes(sqlite_url)
    held = QUIET_SUMMARY["aa"]["cte_change"]["value"]
    assert (raw["figure"], raw["run"], raw["change"]["value"]) == ("cte_ms_min", 9, held)
    assert round(100 * noise(quiet("aa"), CHOSEN), 1) == QUIET_SUMMARY["aa"]["tkg_ms_min_noise"]["value"]
    assert round(statistics.median(map(figure, quiet("aa"))), 2) == QUIET_SUMMARY["aa"]["tkg_ms_min_median"]["value"]
    url = sqlite_url.replace("history.sqlite", "aa-releases.sqlite")
    add(url, as_releases(quiet("aa"), tmp_path / "aa", 4))
    assert trends_of(url) == []


def test_quiet_step_from_run_11_is_found_at_run_11_with_the_planted_size_inside_its_interval(sqlite_url, capsys):
    """The spin adds 30,000 x 9.2 us = 0.28 ms of CPU to every TKG step, 11% of the runs before it."""
    paths = quiet("step")
    nominal = 30000 / 1000 * SPIN_MS_PER_1000 / statistics.mean(map(figure, paths[:10]))
    add(sqlite_url, paths)
    (c,) = [c for c in changes_of(sqlite_url, figure_name=CHOSEN) if c.series["benchmark"].endswith(TKG)]
    assert (c.index, c.runs, c.regression) == (11, 20, True)
    assert c.low <= nominal <= c.high and c.low <= 0.10 <= c.high and c.low > 0, (nominal, c.describe())
    step = QUIET_SUMMARY["step"]
    assert [round(100 * x, 1) for x in (c.change, c.low, c.high)] == [step[k]["value"]
                                                                      for k in ("change", "low", "high")]
    assert round(100 * nominal, 1) == step["nominal"]["value"]
    assert [c.series["figure"] for c in changes_of(sqlite_url) if c.series["benchmark"].endswith(TKG)] == [CHOSEN]
    assert main(["history", "changes", "--store", sqlite_url, "--figure", CHOSEN]) == 0  # not among the newest
    assert "tkg_ms_min +14.5% [+7.2%, +21.9%] REGRESSION at run 11 of 20" in capsys.readouterr().out


@pytest.mark.parametrize("releases", [4, 5])
def test_quiet_drift_of_three_percent_a_release_is_a_trend_by_the_fourth_release(store_url, capsys, releases):
    """By the 4th release (24 runs) and with all five (30), ordered by release: a regression trend of
    ``tkg_ms_min`` with 3% a release inside its interval, on SQLite and PostgreSQL alike; exit 1."""
    add(store_url, quiet("drift", releases))
    (t,) = trends_of(store_url, CHOSEN)
    assert t.series["benchmark"].endswith(TKG) and t.regression and len(t.releases) == releases and t.exact
    assert t.releases[0].startswith("neuronx-distributed-inference=0.8.0") and t.pvalue < MAX_PVALUE
    assert t.low <= 0.03 <= t.high and t.low > 0
    held = QUIET_SUMMARY["drift"][f"releases{releases}"]
    assert [round(100 * x, 1) for x in (t.per_release, t.low, t.high)] == [held[k]["value"] for k in
                                                                            ("per_release", "low", "high")]
    assert f"{t.pvalue:.2g}" == held["p"]
    assert [round(x, 3) for x in (t.first, t.last)] == [held["first"]["value"], held["last"]["value"]]
    # Otava's test alone finds a step in it as well, ordered by release (inside release 2's runs by the 4th, at
    # release 3's first with all five), but under the floor: 1.73 and 1.34 times the series' noise. No change point.
    (raw,) = [r for r in raw_changes(store_url, "release") if r["figure"] == CHOSEN]
    assert (raw["run"], raw["change"], raw["noise"], raw["ratio"]) == (held["change_run"], held["change"],
                                                                      held["change_noise"], held["ratio"])
    assert raw["ratio"] < FLOOR_NOISES and changes_of(store_url, "release", CHOSEN) == []
    capsys.readouterr()
    assert main(["history", "changes", "--store", store_url, "--order", "release", "--figure", CHOSEN, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["regression_trends"] == 1 and doc["trends"][0]["series"]["figure"] == CHOSEN
    # ordered by time (the runs were interleaved) there is no release trend to test, and no change point in TKG
    assert main(["history", "changes", "--store", store_url, "--figure", CHOSEN]) == 0
    assert "trends across releases" not in capsys.readouterr().out


def test_the_quiet_drifts_pairwise_checks_pass_or_are_inconclusive_each_interval_holding_0_and_3_percent():
    """fixtures/history/quiet/release-checks.json, read from the four checks' verdict.json (docs/history.md)."""
    checks = json.loads((QUIET / "release-checks.json").read_text())["checks"]
    assert [c["verdict"] for c in checks.values()] == ["INCONCLUSIVE", "PASS", "PASS", "INCONCLUSIVE"]
    for c in checks.values():
        assert c["tkg_ms_p50_low"]["value"] < 0 < 3.0 < c["tkg_ms_p50_high"]["value"], c


# What the history judges (docs/history.md): the clock rule and the floor on each real A/A and step. ``raw`` is what
# Otava's test alone found (levels of two runs at least, before either rule: harness.history.changes.levels with no
# floor, over every series, the wall-clock ones included), each with its series' noise and their ratio.
HISTORY = FIXTURES_DIR / "history"
JUDGES = QUIET_SUMMARY["judges"]


def judged_runs(where: str) -> list[Path]:
    """A series of JUDGES by its "dir"; the loaded steps are runs 11-20 of cpu-time's A/A and then the planted runs."""
    if where.startswith("cpu-time/step"):
        return step_runs(where.split("/")[1])
    return sorted((HISTORY / where).glob("run-*.json"))


def raw_changes(url: str, order: str = "time") -> list[dict]:
    from otava.analysis import compute_change_points

    from harness.history.changes import group_series, levels, relative

    with connected(url) as conn:
        series = group_series(points(conn), order)
    out = []
    for key, pts in sorted(series.items()):
        values = [float(p["value"]) for p in pts]
        found, _ = compute_change_points(values, max_pvalue=MAX_PVALUE)
        for i, st in levels(values, [int(c.index) for c in found], MAX_PVALUE, floor=0.0):
            spread = run_to_run(values)
            out.append({"figure": key[0], "run": i + 1, "change": {"value": round(100 * relative(st), 1), "unit": "%"},
                        "noise": {"value": round(100 * spread, 1), "unit": "%"},
                        "ratio": round(abs(relative(st)) / spread, 2)})
    return out


@pytest.mark.parametrize("name", sorted(JUDGES["aa"]))
def test_each_real_aa_has_no_change_point_under_the_clock_rule_and_the_floor(sqlite_url, capsys, name):
    """The A/As of the same command, 20 runs each (docs/history.md, "What the history judges"): quiet (nothing else
    running), beside the project's CI (load 2.5-3.4), loaded (9.8-19), and with busy loops beside the runs, switched
    on and off in blocks or drawn per run. Otava's test alone finds changes in most: a wall-clock figure of these
    CPU-timed runs (load_s, the roofline), a typical round under two busy loops (tkg_ms_p50 +8.4% at 3.22 noises),
    or a change under 2.75 times the series' noise (at most 2.44); with the rules, none."""
    held = JUDGES["aa"][name]
    paths = judged_runs(held["dir"])
    assert len(paths) == 20
    add(sqlite_url, paths)
    assert raw_changes(sqlite_url) == held["raw"]
    assert changes_of(sqlite_url) == []
    assert main(["history", "changes", "--store", sqlite_url]) == 0
    out = capsys.readouterr().out
    # every one measured its bandwidth (a CPU): the roofline is reported, not judged
    assert out.startswith("0 change points in ") and "not judged: " in out and "tkg_roofline_fraction (1 series)" in out
    assert round(100 * run_to_run([figure(p) for p in paths]), 1) == held["tkg_ms_min_noise"]["value"]
    loads = [json.loads(p.read_text())["carbon_harness"]["load"]["loadavg"][0] for p in paths]
    assert f"{min(loads):.1f}-{max(loads):.1f}" == held["load"]


@pytest.mark.parametrize("name", sorted(JUDGES["steps"]))
def test_each_real_step_keeps_the_changes_at_least_the_floor_times_its_noise(sqlite_url, name):
    """The quiet step (the spin from run 11): Otava's test finds ``tkg_ms_min`` +14.5% at 3.12 noises, kept, and
    ``cte_ms_min`` +12.4% at 2.05 (the spin runs before the prefill's forward too), dropped: the floor's price. The
    loaded steps (cpu-time, confounded with the load moving): what is kept is what is at least 2.75 noises."""
    held = JUDGES["steps"][name]
    add(sqlite_url, judged_runs(held["dir"]))
    assert raw_changes(sqlite_url) == held["raw"]
    kept = [(r["figure"], r["run"]) for r in held["raw"] if r["ratio"] >= FLOOR_NOISES and r["figure"] not in
            ("load_s", "tkg_roofline_fraction", *CONTENDED)]
    found = changes_of(sqlite_url)
    assert [(c.series["figure"], c.index) for c in found] == kept == [tuple(k) for k in held["kept"]]
    assert all(math.isclose(c.floor, FLOOR_NOISES * c.noise) and abs(c.change) >= c.floor for c in found)
