"""``history gate``: a new run against its series' recent history (the prediction interval of one more
run from the runs since the last change point); a series without history is not judged, and says so."""

from __future__ import annotations

import json

from tests.unit.history.needs import require

require()

from harness.cli import main  # noqa: E402
from harness.history.clocks import WHY, WHY_CONTENDED, why_not_judged  # noqa: E402
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
    # the planted rounds' fastest (their typical round is not judged in CPU time: clocks.CONTENDED)
    assert worse == {("test_tkg[carbon-tiny-smoke]", "tkg_ms_min"), ("test_cte[carbon-tiny-smoke]", "cte_ms_min")}
    # the wall-clock figures of this CPU-timed run (the e2e test's, load_s, the roofline): reported, not judged, and
    # the typical rounds of test_cte / test_tkg, for their own reason
    left = {(n["figure"], n["why"]): n["series"] for n in doc["not_judged"]}
    assert left[("load_s", WHY)] == 3 and left[("tkg_roofline_fraction", WHY)] == 2 and left[("e2e_ms_p50", WHY)] == 1
    assert left[("tkg_ms_p50", WHY_CONTENDED)] == left[("cte_ms_p99", WHY_CONTENDED)] == 1
    assert left[("tkg_ms_p50", WHY)] == 1  # the e2e test's: its engine's Timer
    assert not {j["series"]["figure"] for j in doc["judged"]} & {f for f, _ in left}


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
    whys = [why_not_judged(k, keys) for k in keys]
    # the e2e test's figures, each test's load_s, the rooflines; and test_cte's / test_tkg's typical rounds
    assert (whys.count(WHY), whys.count(WHY_CONTENDED)) == (32, 4)
    out = capsys.readouterr().out
    assert f"{len(run.figures) - 36} not judged (fewer than {MIN_HISTORY} runs of history" in out
    assert out.splitlines()[-2].startswith("not judged: bp_per_s (1 series), cte_ms_p50 (1 series)")
    assert out.splitlines()[-1] == (f"not judged: cte_ms_p50 (1 series), cte_ms_p99 (1 series), tkg_ms_p50 (1 series), "
                                    f"tkg_ms_p99 (1 series), 4 series: {WHY_CONTENDED}")


def test_the_history_since_the_last_change_point_is_the_baseline(sqlite_url, tmp_path):
    paths = series.step(tmp_path / "step", size=1.0)  # runs 11..20 twice as slow: the new level
    add(sqlite_url, paths[:19])
    with connected(sqlite_url) as conn:
        pts = points(conn)
    judged = {j.series["benchmark"].split("::")[-1] + j.series["figure"]: j for j in judge(run_of(paths[19]), pts)}
    tkg = judged["test_tkg[carbon-tiny-smoke]tkg_ms_min"]
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
    assert worse and any("tkg_ms_min of tests/perf/test_latency.py::test_tkg" in line and "REGRESSION" in line
                         for line in lines)
    # the figures the history does not judge are reported apart from those without history, one line a reason
    assert lines[-3] == ("carbon-harness: history: 3 figures judged against their history, 2 regressions; 0 without "
                         "history (the fixed thresholds gate them)")
    assert lines[-2].startswith("carbon-harness: history: not judged: bp_per_s (1 series)") and WHY in lines[-2]
    assert lines[-1].endswith(f"4 series: {WHY_CONTENDED}")
    same = series.planted(tmp_path / "same", lambda i: 1.0)[19]
    assert judge_lines(sqlite_url, same)[1] is False


def test_a_run_already_in_the_store_is_not_its_own_history(sqlite_url, tmp_path, capsys):
    old, new = history_and_new(tmp_path, 2.0)
    add(sqlite_url, [*old, new])
    assert main(["history", "gate", str(new), "--store", sqlite_url, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {j["history"] for j in doc["judged"]} == {19}
