"""compare raises no false alarm (issue 17, item 5): figures without samples (``load_s`` repeated on
every benchmark of an engine, derived figures such as ``tkg_roofline_fraction``, a one-round no-op
timing) are informational, never a regression; a change is said in the figure's own direction
("slower by", "throughput down by"); a change under the unit's absolute floor is never a regression."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.analysis.compare import (
    DEFAULT_TOLERANCE,
    compare,
    default_tolerance,
    load_floors,
    load_hardware_tolerances,
    require_round_data,
    unit_of,
)
from harness.analysis.results import BenchResult, ReportError
from harness.core.metrics import METRICS
from tests.helpers import REPO
from tests.helpers import run_cli as _cli

pytestmark = pytest.mark.unit


def _bench(figures: dict[str, float], samples: dict[str, list[float]] | None = None, extra: dict | None = None,
           name: str = "tests/perf/test_latency.py::test_e2e[carbon-tiny-smoke]") -> BenchResult:
    return BenchResult(name, "e2e-smoke", dict(extra or {}), figures.get("median_s"), None, dict(figures),
                       dict(samples or {}))


def _steady(value: float, n: int = 20, spread: float = 0.002) -> list[float]:
    """``n`` samples around ``value`` with a small deterministic spread: a tight interval."""
    return list(value * (1 + spread * np.linspace(-1, 1, n)))


def test_an_unsampled_figure_is_informational_not_a_regression():
    """load_s 1.2e-5 -> 3.1e-5 s (+158%) with no samples: shown, never failed."""
    base, new = _bench({"load_s": 1.2e-5}), _bench({"load_s": 3.1e-5})
    c = compare([base], [new], 0.05)
    (d,) = c.deltas
    assert d.informational and not d.regressed and not c.failed
    assert "informational" in c.render() and "REGRESSION" not in c.render()


def test_a_derived_figure_without_an_interval_is_informational():
    base, new = _bench({"tkg_roofline_fraction": 0.30}), _bench({"tkg_roofline_fraction": 0.20})
    c = compare([base], [new], 0.05)
    assert c.deltas[0].informational and not c.regressions


def test_a_one_round_no_op_timing_is_not_compared():
    """test_compile's pedantic(lambda: None, rounds=1): 0.11 -> 0.16 us is +45% of nothing."""
    base = _bench({"median_s": 1.1e-7}, {"median_s": [1.1e-7]})
    new = _bench({"median_s": 1.6e-7}, {"median_s": [1.6e-7]})
    assert not compare([base], [new], 0.05).failed


def test_a_benchmark_names_its_informational_figures():
    """A benchmark whose timed call is not the measurement says so (extra_info["informational"])."""
    extra = {"informational": ["median_s"]}
    base = _bench({"median_s": 1.0}, {"median_s": _steady(1.0)}, extra)
    new = _bench({"median_s": 2.0}, {"median_s": _steady(2.0)}, extra)
    c = compare([base], [new], 0.05)
    assert c.deltas[0].informational and not c.failed
    plain = compare([_bench({"median_s": 1.0}, {"median_s": _steady(1.0)})],
                    [_bench({"median_s": 2.0}, {"median_s": _steady(2.0)})], 0.05)
    assert plain.failed  # without the mark the same change fails


def test_the_compile_benchmark_marks_its_no_op_timing_informational():
    text = (REPO / "tests" / "perf" / "test_compile.py").read_text()
    assert 'extra_info["informational"]' in text


def test_a_throughput_drop_is_said_as_one():
    """1833 -> 1500 tok/s is a regression said as "throughput down by 18.2%", its change -18.2%."""
    base = _bench({"tokens_per_s": 1833.0}, {"tokens_per_s": _steady(1 / 1833.0)})
    new = _bench({"tokens_per_s": 1500.0}, {"tokens_per_s": _steady(1 / 1500.0)})
    c = compare([base], [new], 0.05)
    (d,) = c.regressions
    assert d.describe() == "throughput down by 18.2%"
    row = c.render().splitlines()[1]
    assert "-18.2%" in row and "+18.2%" not in row and "throughput down by 18.2%" in row
    lo, hi = d.interval()
    assert lo < hi < 0  # the interval is of the change as measured: negative, like the change


def test_a_slower_time_is_said_as_slower():
    base = _bench({"tkg_ms_p50": 10.0}, {"tkg_ms_p50": _steady(10.0)})
    new = _bench({"tkg_ms_p50": 12.0}, {"tkg_ms_p50": _steady(12.0)})
    (d,) = compare([base], [new], 0.05).regressions
    assert d.describe() == "slower by 20.0%" and d.interval()[0] > 0
    faster = compare([new], [base], 0.05)
    assert faster.deltas[0].describe() == "faster by 16.7%" and not faster.regressions


def test_a_change_under_the_units_floor_is_never_a_regression():
    """0.004 -> 0.006 ms is +50% with a tight interval, but 2 us is under the 0.01 ms floor."""
    floors = load_floors()
    assert floors["ms"] == pytest.approx(0.01)
    base = _bench({"tkg_ms_p50": 0.004}, {"tkg_ms_p50": _steady(0.004)})
    new = _bench({"tkg_ms_p50": 0.006}, {"tkg_ms_p50": _steady(0.006)})
    assert compare([base], [new], 0.05).regressions  # without floors: flagged
    c = compare([base], [new], 0.05, floors=floors)
    assert not c.regressions and "under the 0.01 ms floor" in c.render()
    big = _bench({"tkg_ms_p50": 0.04}, {"tkg_ms_p50": _steady(0.04)})
    assert compare([base], [big], 0.05, floors=floors).regressions  # 36 us is above it


def test_every_metric_has_a_unit_with_a_floor():
    floors = load_floors()
    for metric in [*METRICS, "median_s"]:
        assert unit_of(metric) in floors, metric


@pytest.mark.parametrize("floors, message", [
    ({"ms": -1}, "floors.ms: -1 must be a finite number >= 0"),
    ({"ms": "fast"}, "floors.ms: 'fast' must be a finite number >= 0"),
    ({"parsecs": 1}, "unknown unit 'parsecs'; units:"),
])
def test_floors_are_validated(tmp_path, floors, message):
    f = tmp_path / "floors.json"
    f.write_text(json.dumps({"schema": 1, "floors": floors}))
    with pytest.raises(ReportError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_floors(f)
    f.write_text(json.dumps({"schema": 1, "floorz": {}}))
    with pytest.raises(ReportError, match="unknown field 'floorz'"):
        load_floors(f)


def _run(tmp_path, name: str, benchmarks: list[dict]):
    f = tmp_path / name
    f.write_text(json.dumps({"machine_info": {}, "benchmarks": benchmarks}))
    return f


def test_compare_cli_says_throughput_down_and_applies_floors(tmp_path):
    def bench(tps: float, load_s: float) -> dict:
        e2e = [1000.0 / tps * (1 + 0.002 * i) for i in range(-5, 6)]
        return {"name": "test_e2e[x]", "fullname": "t::test_e2e[x]", "group": "e2e-smoke",
                "stats": {"median": 0.02, "data": [0.02] * 11},
                "extra_info": {"tokens_per_s": tps, "load_s": load_s, "e2e_ms_p50": float(np.median(e2e)),
                               "samples": {"e2e_ms": e2e}}}

    base, new = _run(tmp_path, "a.json", [bench(1833, 1.2e-5)]), _run(tmp_path, "b.json", [bench(1500, 3.1e-5)])
    r = _cli("compare", str(base), str(new))
    assert r.returncode == 1
    assert "REGRESSION t::test_e2e[x] tokens_per_s: 1833 -> 1500 tok/s (throughput down by 18.2%" in r.stderr
    assert "load_s" not in r.stderr and "+158" not in r.stdout
    assert "REGRESSION t::test_e2e[x] e2e_ms_p50" in r.stderr and "slower by 22.2%" in r.stderr
    same = _cli("compare", str(base), str(_run(tmp_path, "c.json", [bench(1833, 3.1e-5)])))
    assert same.returncode == 0, same.stdout + same.stderr  # load_s alone never fails
    bad = tmp_path / "floors.json"
    bad.write_text(json.dumps({"schema": 1, "floors": {"ms": "x"}}))
    r = _cli("compare", str(base), str(new), "--floors", str(bad))
    assert r.returncode == 2 and "floors.ms: 'x' must be a finite number >= 0" in r.stderr


def test_the_shipped_hardware_tolerances_load_and_keep_accelerators_at_the_default():
    """The cpu tolerance covers the measured A/A spread between two runs; accelerators are not listed."""
    table = load_hardware_tolerances()
    assert table["cpu"] == pytest.approx(0.5)
    assert not {"trn2.3xlarge", "trn2.48xlarge", "h100-sxm"} & set(table)


@pytest.mark.parametrize("base_hw, new_hw, expected", [
    ("cpu", "cpu", 0.5), ("cpu", "trn2.3xlarge", DEFAULT_TOLERANCE), ("trn2.3xlarge", "trn2.3xlarge", DEFAULT_TOLERANCE),
    (None, None, DEFAULT_TOLERANCE)])
def test_default_tolerance_is_the_hardwares_only_when_both_runs_are_on_it(base_hw, new_hw, expected):
    tolerance, why = default_tolerance(base_hw, new_hw, {"cpu": 0.5})
    assert tolerance == pytest.approx(expected)
    assert ("A/A" in why) == (expected == 0.5)


@pytest.mark.parametrize("content, named", [
    ({"schema": 1, "hardware": {"cpu": "5O%"}}, "hardware.cpu"),
    ({"schema": 1, "hardware": {"cpu": 0.5}}, "hardware.cpu"),
    ({"schema": 1, "hardware": {"cpu": "0%"}}, "hardware.cpu"),
    ({"schema": 1, "hardwares": {"cpu": "50%"}}, "'hardwares'"),
])
def test_a_bad_hardware_tolerances_file_is_an_error_naming_the_value(tmp_path, content, named):
    path = tmp_path / "tolerances.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ReportError, match=named.replace(".", r"\.")):
        load_hardware_tolerances(path)


def test_compare_cli_says_which_tolerance_it_used_and_max_regression_overrides_it(tmp_path):
    """Two runs on the cpu profile get the cpu A/A tolerance; --max-regression wins over it."""
    run = {"machine_info": {"carbon_harness": {"hardware": {"name": "cpu"}}}, "carbon_harness": {"hardware": {"name": "cpu"}},
           "benchmarks": []}
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(run))
    new.write_text(json.dumps(run))
    r = _cli("compare", str(base), str(new))
    assert "tolerance: 50% by default, from hardware 'cpu'" in r.stdout, r.stdout + r.stderr
    r = _cli("compare", str(base), str(new), "--max-regression", "7%")
    assert "tolerance: 7% by default, from --max-regression" in r.stdout, r.stdout + r.stderr


def test_compare_says_first_when_either_side_ran_loaded(gated_run, tmp_path):
    """Issue 32, item 7: the same code read CTE 21.8 -> 151.4 ms beside other work. compare now says,
    before anything else, which side ran loaded and where CPU speed is gated under load."""
    import copy

    _, data, _ = gated_run
    sides = {}
    for name, other in (("quiet", 0.1), ("busy", 1.6)):
        side = copy.deepcopy(data)
        side["carbon_harness"]["load"].update(other_cpus=other, cpus=2, loadavg=[5.9, 4.3, 2.8], steal_fraction=0.0)
        sides[name] = tmp_path / f"{name}.json"
        sides[name].write_text(json.dumps(side))
    r = _cli("compare", str(sides["quiet"]), str(sides["busy"]))
    lines = r.stdout.splitlines()
    assert lines[0] == (f"LOADED: {sides['busy']} ran on a loaded box: other work kept 1.6 of 2 CPUs busy on average "
                        "(load average 5.9 at its end)"), r.stdout[:2000]
    assert "carbon-harness release-check, whose interleaved rounds" in lines[1]
    assert lines[2].startswith("tolerance: ")
    r = _cli("compare", str(sides["quiet"]), str(sides["quiet"]))
    assert r.returncode == 0 and "LOADED" not in r.stdout and r.stdout.startswith("tolerance: ")


def _slower(spread: float, change: float = 0.08, n: int = 9) -> tuple[BenchResult, BenchResult]:
    """A base of tight rounds at 100 ms, and a new run ``change`` slower whose rounds spread by +-``spread``."""
    rounds = list(100.0 * (1 + change) * (1 + spread * np.linspace(-1, 1, n)))
    return (_bench({"e2e_ms_p50": 100.0}, {"e2e_ms_p50": _steady(100.0, n)}),
            _bench({"e2e_ms_p50": float(np.median(rounds))}, {"e2e_ms_p50": rounds}))


@pytest.mark.parametrize("spread, change, word", [
    (0.02, 0.08, "FAIL"),  # +8%, its whole interval beyond 5%
    (0.05, 0.08, "INCONCLUSIVE"),  # +8%, its interval reaching back to +4%: neither shown nor ruled out
    (0.05, 0.03, "PASS"),  # +3%: the estimate within the tolerance
])
def test_a_figure_whose_estimate_is_beyond_the_tolerance_but_not_its_interval_is_inconclusive(spread, change, word):
    c = compare(*map(lambda b: [b], _slower(spread, change)), 0.05)
    (d,) = c.deltas
    assert c.word == word and d.undecided is (word == "INCONCLUSIVE") and d.regressed is (word == "FAIL")
    assert c.render().endswith(f"change is new vs base as measured: {word}")
    assert ("INCONCLUSIVE" in c.render().splitlines()[1]) is (word == "INCONCLUSIVE")


def test_compare_cli_exits_3_on_an_inconclusive_figure_saying_what_would_decide_it(tmp_path):
    def run(name: str, bench: BenchResult) -> str:
        rounds = bench.samples["e2e_ms_p50"]
        path = tmp_path / name
        path.write_text(json.dumps({"machine_info": {}, "benchmarks": [{
            "name": "test_e2e[x]", "fullname": "t::test_e2e[x]", "group": "e2e-smoke",
            "stats": {"median": float(np.median(rounds)) / 1000.0, "rounds": len(rounds),
                      "data": [v / 1000.0 for v in rounds]},
            "extra_info": {"e2e_ms_p50": float(np.median(rounds)), "samples": {"e2e_ms": rounds}}}]}))
        return str(path)

    base, new = _slower(0.05)
    r = _cli("compare", run("base.json", base), run("new.json", new), "--max-regression", "5%")
    assert r.returncode == 3, r.stdout + r.stderr
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("INCONCLUSIVE t::test_e2e[x] e2e_ms_p50"))
    assert "reaches within the 5% tolerance): more rounds per run decide it (about" in line
    assert "release-check" in line and "REGRESSION" not in r.stderr


def _bare(name: str, rounds: int, kept: bool) -> BenchResult:
    """A pytest-benchmark entry that timed ``rounds`` rounds and kept them (``--benchmark-json``) or not
    (``--benchmark-save`` without ``--benchmark-save-data``)."""
    b = _bench({"median_s": 0.02}, {"median_s": [0.02] * rounds} if kept else None, name=f"t::{name}")
    b.rounds = rounds
    return b


def test_a_file_that_timed_rounds_and_kept_none_stops_compare_from_two_rounds_and_one_benchmark_up():
    with pytest.raises(ReportError, match="1 of 1 benchmark"):
        require_round_data([_bare("test_tkg", 2, kept=False)], "saved.json")  # two rounds: an interval was due
    require_round_data([_bare("test_compile", 1, kept=False)], "saved.json")  # one round: no interval anyway
    with pytest.raises(ReportError, match=r"1 of 2 benchmark\(s\) timed rounds but kept none \(first: t::test_tkg"):
        require_round_data([_bare("test_cte", 9, kept=True), _bare("test_tkg", 9, kept=False)], "mixed.json")
    require_round_data([_bare("test_cte", 9, kept=True), _bare("test_tkg", 9, kept=True)], "written.json")
