"""``history gate``: a new run against its series' recent history (the prediction interval of one more
run from the runs since the last change point); a series without history is not judged, and says so."""

from __future__ import annotations

import json

from tests.unit.history.needs import require

require()

from harness.cli import main  # noqa: E402
from harness.history.clocks import wall_clock  # noqa: E402
from harness.history.gate import MIN_HISTORY, judge, prediction_interval  # noqa: E402
from harness.history.records import run_of  # noqa: E402
from harness.history.store import SERIES_COLUMNS, add, connected, points  # noqa: E402
from tests.unit.history import series  # noqa: E402


def history_and_new(tmp_path, factor: float):
    paths = series.planted(tmp_path / "runs", lambda i: factor if i == 20 else 1.0)
    return paths[:19], paths[19]


def test_a_new_run_twice_as_slow_as_its_history_is_a_regression(sqlite_url, tmp_path, capsys):
    old, new = history_and_new(tmp_path, 2.0)
    add(sqlite_url, old)
    assert main(["history", "gate", str(new), "--store", sqlite_url, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    worse = {(j["series"]["benchmark"].split("::")[-1], j["series"]["figure"]) for j in doc["judged"] if j["regression"]}
    assert ("test_tkg[carbon-tiny-smoke]", "tkg_ms_p50") in worse
    # the planted figures (the TKG and CTE rounds' median, and so their fastest round): the rounds' own timer
    assert all(j["series"]["figure"].endswith(("_ms_p50", "_ms_min")) for j in doc["judged"] if j["regression"])
    # the wall-clock figures of this CPU-timed run (the e2e test's, load_s, the roofline): reported, not judged
    left = {n["figure"]: n["series"] for n in doc["not_judged"]}
    assert left["load_s"] == 3 and left["tkg_roofline_fraction"] == 2 and left["e2e_ms_p50"] == 1
    assert not {j["series"]["figure"] for j in doc["judged"]} & set(left) - {"cte_ms_p50", "tkg_ms_p50", "cte_ms_p99",
                                                                             "tkg_ms_p99"}


def test_a_new_run_like_its_history_passes(sqlite_url, tmp_path, capsys):
    old, new = history_and_new(tmp_path, 1.0)
    add(sqlite_url, old)
    assert main(["history", "gate", str(new), "--store", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "0 regressions" in out and "0 not judged" in out


def test_without_history_nothing_is_judged_and_the_output_says_so(sqlite_url, tmp_path, capsys):
    _, new = history_and_new(tmp_path, 2.0)
    assert main(["history", "gate", str(new), "--store", sqlite_url]) == 0
    run = run_of(new)
    keys = {tuple(getattr(f, k) for k in SERIES_COLUMNS) for f in run.figures}
    clock = sum(wall_clock(k, keys) for k in keys)
    assert clock == 32  # the e2e test's figures, each test's load_s, the rooflines (harness.history.clocks)
    out = capsys.readouterr().out
    assert f"{len(run.figures) - clock} not judged (fewer than {MIN_HISTORY} runs of history" in out
    assert out.splitlines()[-1].startswith("not judged: bp_per_s (1 series), cte_ms_p50 (1 series)")


def test_the_history_since_the_last_change_point_is_the_baseline(sqlite_url, tmp_path):
    paths = series.step(tmp_path / "step", size=1.0)  # runs 11..20 twice as slow: the new level
    add(sqlite_url, paths[:19])
    with connected(sqlite_url) as conn:
        pts = points(conn)
    judged = {j.series["benchmark"].split("::")[-1] + j.series["figure"]: j for j in judge(run_of(paths[19]), pts)}
    tkg = judged["test_tkg[carbon-tiny-smoke]tkg_ms_p50"]
    assert tkg.history == 9 and not tkg.regression  # judged against runs 11..19, not all 19


def test_the_prediction_interval_widens_with_the_noise():
    quiet = prediction_interval([10.0, 10.1, 9.9, 10.0], 0.001)
    noisy = prediction_interval([10.0, 11.0, 9.0, 10.0], 0.001)
    assert quiet[0] == noisy[0] == 10.0
    assert noisy[2] - noisy[1] > quiet[2] - quiet[1] > 0


def test_the_plugins_carbon_history_judges_the_written_run(sqlite_url, tmp_path):
    from harness.plugin.history import judge_lines

    old, new = history_and_new(tmp_path, 2.0)
    add(sqlite_url, old)
    lines, worse = judge_lines(sqlite_url, new)
    assert worse and any("tkg_ms_p50 of tests/perf/test_latency.py::test_tkg" in line and "REGRESSION" in line
                         for line in lines)
    # the plugin counts the wall-clock figures it leaves unjudged with those without history (the fixed thresholds
    # gate both)
    assert lines[-1].startswith("carbon-harness: history: 7 figures judged") and "32 without history" in lines[-1]
    same = series.planted(tmp_path / "same", lambda i: 1.0)[19]
    assert judge_lines(sqlite_url, same)[1] is False


def test_a_run_already_in_the_store_is_not_its_own_history(sqlite_url, tmp_path, capsys):
    old, new = history_and_new(tmp_path, 2.0)
    add(sqlite_url, [*old, new])
    assert main(["history", "gate", str(new), "--store", sqlite_url, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {j["history"] for j in doc["judged"]} == {19}
