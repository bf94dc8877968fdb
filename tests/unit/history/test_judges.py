"""What the history judges (docs/history.md): a figure only in the clock its run was timed in (a wall-clock figure of
runs timed in CPU time is recorded and drawn but not judged, and reported so, once), and a change only when it is at
least ``FLOOR_NOISES`` times its series' run-to-run noise. On real runs (fixtures/history/ci-load, cpu-time: the A/As'
own wall-clock figures) and on constructed series whose noise and step are exact."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.history.needs import require

require()

from harness.cli import main  # noqa: E402
from harness.core.paths import FIXTURES_DIR  # noqa: E402
from harness.history.changes import (FLOOR_NOISES, MASD_SIGMA, MAX_PVALUE, find_changes, levels, noise,  # noqa: E402
                                     relative, series_changes)
from harness.history.clocks import WHY, WHY_CONTENDED, unjudged, wall_clock, why_not_judged  # noqa: E402
from harness.history.store import SERIES_COLUMNS, add, connected, points  # noqa: E402

HISTORY = FIXTURES_DIR / "history"
CTE = "tests/perf/test_latency.py::test_cte[carbon-tiny-smoke]"


def key(figure: str, timer: str = "cpu", hardware: str = "cpu") -> tuple:
    s = {"figure": figure, "benchmark": CTE, "model": "carbon-tiny", "shape": "smoke", "backend": "hf", "dtype": "fp32",
         "hardware": hardware, "timer": timer}
    return tuple(s[k] for k in SERIES_COLUMNS)


@pytest.mark.parametrize("timer", ["cpu", "thread-cpu"])  # records.TIMERS' names of process_time and thread_time
@pytest.mark.parametrize(("figure", "hardware", "siblings", "wall"), [
    ("load_s", "cpu", (), True),  # perf_counter around the engine's load, always
    ("load_s", "trn2.3xlarge", ("tkg_ms_min",), True),
    ("e2e_ms_p50", "cpu", (), True),  # the engine's own Timer
    ("tokens_per_s", "cpu", (), True),
    ("tkg_roofline_fraction", "cpu", ("tkg_ms_min",), True),  # a CPU's bandwidth is an array copy, timed in wall time
    ("tkg_roofline_fraction", "no-such-profile", ("tkg_ms_min",), True),  # unknown: not known to be the spec's
    ("tkg_roofline_fraction", "trn2.3xlarge", ("tkg_ms_min",), False),  # the profile's bandwidth, the rounds' p50
    ("tkg_roofline_fraction", "trn2.3xlarge", (), True),  # its tkg_ms_p50 not the rounds' (the e2e test's)
    ("cte_ms_p50", "cpu", ("cte_ms_min",), False),  # the benchmark's own rounds (records.round_minimums)
    ("cte_ms_p50", "cpu", ("tkg_ms_min",), True),  # not this prefix's rounds
    ("tkg_ms_p99", "cpu", (), True),  # the e2e test's or scoring's: the engine's Timer
    ("tkg_ms_min", "cpu", (), False),  # the fastest round: the benchmark's timer, always
    ("valid_dna_fraction", "cpu", (), False),  # no clock
])
def test_a_figure_is_judged_only_in_the_clock_its_run_was_timed_in(timer, figure, hardware, siblings, wall):
    keys = {key(figure, timer, hardware), *(key(s, timer, hardware) for s in siblings)}
    assert wall_clock(key(figure, timer, hardware), keys) is wall
    # a series timed in wall time judges every figure
    assert wall_clock(key(figure, "wall", hardware), {key(f, "wall", hardware) for f in (figure, *siblings)}) is False


@pytest.mark.parametrize("timer", ["cpu", "thread-cpu"])
@pytest.mark.parametrize(("figure", "hardware", "siblings", "why"), [
    ("tkg_ms_p50", "cpu", ("tkg_ms_min",), WHY_CONTENDED),  # the benchmark's rounds: a typical one, in CPU time
    ("cte_ms_p99", "cpu", ("cte_ms_min",), WHY_CONTENDED),
    ("tkg_roofline_fraction", "trn2.3xlarge", ("tkg_ms_min",), WHY_CONTENDED),  # over the rounds' p50
    ("tkg_ms_p50", "cpu", (), WHY),  # the e2e test's: the engine's Timer, wall time first
    ("load_s", "cpu", (), WHY),
    ("tkg_ms_min", "cpu", (), None),  # the fastest round: judged
    ("cte_ms_min", "cpu", ("cte_ms_p50",), None),
    ("valid_dna_fraction", "cpu", (), None),
])
def test_a_typical_round_of_cpu_timed_runs_is_judged_by_its_fastest(timer, figure, hardware, siblings, why):
    """The contended A/A (fixtures/history/contended/aa): with the same code, tkg_ms_p50 +8.4% and p99 +23.9% in CPU
    time when two neighbours took both CPUs from run 17; the fastest round moved 2.1 noises, under the floor."""
    keys = {key(figure, timer, hardware), *(key(s, timer, hardware) for s in siblings)}
    assert why_not_judged(key(figure, timer, hardware), keys) == why
    assert why_not_judged(key(figure, "wall", hardware), {key(f, "wall", hardware) for f in (figure, *siblings)}) is None


def relabelled(paths: list[Path], out: Path, timer: str | None = None, load_s_from: int | None = None) -> list[Path]:
    """The real runs, each benchmark's timer set to ``timer`` (pytest-benchmark's name) and, from run ``load_s_from``
    on, each engine's load time doubled: a change of 100%, far above the floor."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, p in enumerate(paths, 1):
        data = json.loads(p.read_text())
        for b in data["benchmarks"]:
            if timer:
                b["options"]["timer"] = timer
            if load_s_from and i >= load_s_from:
                b["extra_info"]["load_s"] *= 2
        written.append(out / p.name)
        written[-1].write_text(json.dumps(data))
    return written


def ci_load() -> list[Path]:
    return sorted((HISTORY / "ci-load" / "aa").glob("run-*.json"))


def test_load_s_of_cpu_timed_runs_is_not_judged_and_reported_once_and_the_same_in_wall_time_is(tmp_path, capsys):
    """The engine's load time doubled from run 11 of the A/A beside CI: in these CPU-timed runs no change point, and
    the report names load_s (2 series: the CTE's and the TKG's) and the roofline, once, with why; timed in wall time
    the same series have their change at run 11."""
    cpu, wall = (f"sqlite:///{tmp_path / name}.sqlite" for name in ("cpu", "wall"))
    add(cpu, relabelled(ci_load(), tmp_path / "cpu", load_s_from=11))
    add(wall, relabelled(ci_load(), tmp_path / "wall", "perf_counter", load_s_from=11))
    assert main(["history", "changes", "--store", cpu]) == 0
    out = capsys.readouterr().out
    # 9 series, 3 of them not judged: the 6 judged are counted
    # 9 series: 3 wall-clock, 4 typical rounds (clocks.CONTENDED); the 2 fastest rounds are judged and counted
    assert out.startswith("0 change points in 2 series (0 regressions in the newest runs)\n")
    assert "load_s" not in out.split("not judged: ")[0] and out.count("not judged: ") == 2
    assert (f"not judged: load_s (2 series), tkg_roofline_fraction (1 series), 3 series: {WHY}\n") in out
    assert (f"not judged: cte_ms_p50 (1 series), cte_ms_p99 (1 series), tkg_ms_p50 (1 series), tkg_ms_p99 "
            f"(1 series), 4 series: {WHY_CONTENDED}\n") in out
    assert main(["history", "changes", "--store", cpu, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"] == [] and doc["not_judged"][:2] == [{"figure": "load_s", "series": 2, "why": WHY},
                                                              {"figure": "tkg_roofline_fraction", "series": 1, "why": WHY}]
    assert [(n["figure"], n["why"]) for n in doc["not_judged"][2:]] == [
        (f, WHY_CONTENDED) for f in ("cte_ms_p50", "cte_ms_p99", "tkg_ms_p50", "tkg_ms_p99")]
    assert main(["history", "changes", "--store", wall, "--json", "--figure", "load_s"]) == 0  # not among the newest
    doc = json.loads(capsys.readouterr().out)
    assert [(c["series"]["figure"], c["index"]) for c in doc["changes"]] == [("load_s", 11)] * 2
    assert doc["not_judged"] == [] and all(c["change"] > c["floor"] > 0 for c in doc["changes"])


def test_the_roofline_of_the_loaded_aa_is_reported_not_judged_and_judged_when_timed_in_wall_time(tmp_path):
    """The loaded A/A's roofline doubled at run 19 when the session's bandwidth copy read half under load."""
    paths = sorted((HISTORY / "cpu-time" / "aa").glob("run-*.json"))
    cpu, wall = (f"sqlite:///{tmp_path / name}.sqlite" for name in ("cpu", "wall"))
    add(cpu, paths)
    add(wall, relabelled(paths, tmp_path / "wall", "perf_counter"))
    for url, changes, left in ((cpu, [], [("tkg_roofline_fraction", 1)]), (wall, [("tkg_roofline_fraction", 19)], [])):
        with connected(url) as conn:
            pts = points(conn)
        assert [(c.series["figure"], c.index) for c in find_changes(pts)] == changes
        assert [(n.figure, n.series) for n in unjudged(pts) if n.why == WHY] == left


def test_the_gate_reports_a_cpu_timed_runs_wall_clock_figures_not_judged(tmp_path, capsys):
    cpu = f"sqlite:///{tmp_path / 'cpu'}.sqlite"
    runs = relabelled(ci_load(), tmp_path / "cpu", load_s_from=20)
    add(cpu, runs[:19])
    assert main(["history", "gate", str(runs[19]), "--store", cpu, "--json"]) == 0  # load_s doubled: not judged
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_judged"][:2] == [{"figure": "load_s", "series": 2, "why": WHY},
                                     {"figure": "tkg_roofline_fraction", "series": 1, "why": WHY}]
    assert {n["why"] for n in doc["not_judged"][2:]} == {WHY_CONTENDED}
    assert "load_s" not in {j["series"]["figure"] for j in doc["judged"]} and doc["without_history"] == 0
    assert main(["history", "gate", str(runs[19]), "--store", cpu]) == 0
    assert capsys.readouterr().out.splitlines()[-2] == (f"not judged: load_s (2 series), tkg_roofline_fraction "
                                                        f"(1 series), 3 series: {WHY}")
    wall = f"sqlite:///{tmp_path / 'wall'}.sqlite"
    runs = relabelled(ci_load(), tmp_path / "wall", "perf_counter", load_s_from=20)
    add(wall, runs[:19])
    assert main(["history", "gate", str(runs[19]), "--store", wall, "--json"]) == 1  # judged: twice its history
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_judged"] == [] and {j["series"]["figure"] for j in doc["judged"] if j["regression"]} == {"load_s"}


def alternating(step: float, runs: int = 20, at: int = 11, spread: float = 1.0) -> list[float]:
    """100 +- ``spread`` in turn, times 1 + ``step`` from run ``at``: every successive difference but the step's is
    2 x spread, so the noise is exact: 2 x spread / MASD_SIGMA over the median, 100 + 50 x step."""
    return [(100 * (1 + step * (i >= at)) + spread * (-1) ** i) for i in range(1, runs + 1)]


def step_of_ratio(ratio: float) -> float:
    """The step that is ``ratio`` times its alternating series' noise (bisection: the median moves with the step)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if mid / noise(alternating(mid)) < ratio else (low, mid)
    return (low + high) / 2


def points_of(values: list[float]) -> list[dict]:
    return [{"value": v, "direction": "max", "commit": f"c{i}", "release": "r", "time": f"t{i:03d}",
             "report": f"run{i}.json"} for i, v in enumerate(values)]


def test_the_noise_is_the_median_successive_difference_scaled_to_a_standard_deviation():
    values = alternating(0.1)
    assert noise(values) == pytest.approx(2 / MASD_SIGMA / 105)  # the step's one difference changes nothing
    assert MASD_SIGMA == pytest.approx(0.9539, abs=1e-4)
    assert noise([5.0]) == 0 == noise([0.0, 0.0, 0.0])
    rng = np.random.default_rng(11)  # a standard deviation of 1% a run reads about 1%
    assert noise(list(100 * (1 + 0.01 * rng.standard_normal(4000)))) == pytest.approx(0.01, rel=0.05)


@pytest.mark.parametrize(("ratio", "kept"), [(2.65, False), (2.85, True)])
def test_a_change_is_kept_only_at_least_the_floor_times_the_series_noise(ratio, kept, capsys):
    """At 2.65 noises a change Otava's t-test finds at p < 1e-8 is dropped; at 2.85 it is kept, with its floor."""
    from otava.analysis import compute_change_points

    assert FLOOR_NOISES == 2.75
    step = step_of_ratio(ratio)
    values = alternating(step)
    found, _ = compute_change_points(values, max_pvalue=MAX_PVALUE)
    (raw,) = levels(values, [int(c.index) for c in found], MAX_PVALUE)  # without the floor: found either way
    assert raw[0] == 10 and raw[1].pvalue < 1e-8
    found = series_changes(key("tkg_ms_min"), points_of(values))
    assert bool(found) is kept
    if kept:
        (c,) = found
        assert c.index == 11 and c.pvalue < 1e-8 and c.change == pytest.approx(step)
        assert c.noise == pytest.approx(noise(values)) and c.floor == pytest.approx(2.75 * c.noise)
        assert c.change / c.noise == pytest.approx(ratio)
        assert f"floor {100 * c.floor:.1f}% = 2.75 x noise {100 * c.noise:.1f}%; " in c.describe()
        assert json.loads(json.dumps(c.to_dict()))["floor"] == pytest.approx(c.floor)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 0.3), st.sampled_from([0.01, 0.03, 0.08]))
def test_every_change_kept_is_at_least_its_floor_on_random_draws(seed, size, sigma):
    rng = np.random.default_rng(seed)
    values = list(100 * (1 + sigma * rng.standard_normal(30)) * np.r_[np.ones(15), np.full(15, 1 + size)])
    for c in series_changes(key("tkg_ms_min"), points_of(values)):
        assert c.floor == FLOOR_NOISES * noise(values) and abs(c.change) >= c.floor and math.isfinite(c.floor)


def test_the_page_draws_a_series_not_judged_and_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'cpu'}.sqlite"
    add(url, relabelled(ci_load(), tmp_path / "cpu", load_s_from=11))
    assert main(["history", "site", str(tmp_path / "site"), "--store", url]) == 0
    sections = (tmp_path / "site" / "index.html").read_text().split('<section class="series">')[1:]
    said = {s.split("</h3>")[0].split(":")[0].removeprefix("<h3>"): 'class="not-judged"' in s for s in sections}
    assert said["load_s"] and said["tkg_roofline_fraction"] and not said["tkg_ms_min"] and not said["cte_ms_min"]
    assert said["cte_ms_p50"]  # a typical round of CPU-timed runs (clocks.CONTENDED)
    assert all('class="change"' not in s for s in sections)  # load_s doubled from run 11: drawn, not marked
    assert sum("load_s" in s.split("</h3>")[0] for s in sections) == 2


def test_the_smallest_change_under_the_floor_is_dropped_first_and_the_rest_tested_again():
    """Three levels, 10, 5 and 10 runs, two steps of 1.5 and 2.0 noises: neither is kept, but dropping the smaller
    first leaves the larger between the levels now around it, 2.9 noises (the first ten runs against the last ten,
    the five between counted with the first): kept there, at run 16, not at run 11."""
    values = [100 * (1 + 0.03 * (i >= 10) + 0.04 * (i >= 15)) + (-1) ** i for i in range(25)]
    spread = noise(values)
    assert [round(relative(st) / spread, 2) for _, st in levels(values, [10, 15], MAX_PVALUE)] == [1.59, 1.83]
    ((i, st),) = levels(values, [10, 15], MAX_PVALUE, FLOOR_NOISES * spread)
    assert i == 15 and round(relative(st) / spread, 2) == 2.91


def test_a_trend_across_releases_is_found_only_in_a_judged_figure(sqlite_url):
    """The quiet drift (five releases, each TKG step 3% slower): its TKG median and roofline trend too, by Mann-Kendall
    alone, but in these CPU-timed runs they are not judged (a typical round; a wall-clock bandwidth), so the trends
    `history changes --order release` reports, and exits 1 on, are the fastest rounds' only."""
    from harness.history.changes import group_series
    from harness.history.trend import find_trends, release_trend

    add(sqlite_url, sorted((HISTORY / "quiet" / "drift").glob("rel*-run*.json")))
    with connected(sqlite_url) as conn:
        pts = points(conn)
    alone = {key[0] for key, p in group_series(pts, "release").items()
             if (t := release_trend(key, p, MAX_PVALUE)) is not None and t.pvalue < MAX_PVALUE}
    assert {"tkg_ms_p50", "tkg_roofline_fraction"} <= alone
    assert sorted(t.series["figure"] for t in find_trends(pts)) == ["cte_ms_min", "tkg_ms_min"]
