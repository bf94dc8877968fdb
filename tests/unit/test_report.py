"""report / compare / cost / plan from the command line, on real pytest-benchmark JSON."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from harness.cost import cost
from harness.report import ReportError, compare, load_results, markdown, parse_percent

pytestmark = pytest.mark.unit


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("bp_per_s,usd_per_gbp,mbp_per_usd", [(10998, 56.45, 17.71), (8212, 75.60, 13.23)])
def test_cost_of_the_reference_runs(bp_per_s, usd_per_gbp, mbp_per_usd):
    c = cost(bp_per_s, 2.235)
    assert c.usd_per_gbp == pytest.approx(usd_per_gbp, abs=0.01)
    assert c.mbp_per_usd == pytest.approx(mbp_per_usd, abs=0.01)
    assert c.bp_per_hour == bp_per_s * 3600


def test_cost_cli_json():
    r = cli("cost", "--hardware", "trn2.3xlarge", "--bp-per-s", "10998", "--json")
    data = json.loads(r.stdout)
    assert r.returncode == 0 and data["hardware"] == "trn2.3xlarge"
    assert round(data["usd_per_gbp"]) == 56 and round(data["mbp_per_usd"], 1) == 17.7


def test_cost_cli_needs_a_price():
    r = cli("cost", "--hardware", "cpu", "--bp-per-s", "100")
    assert r.returncode == 2 and "has no price_per_hour; pass --price-per-hour" in r.stderr


def test_report_tables_from_real_json(gated_run, tmp_path):
    _, _, path = gated_run
    results, manifest = load_results(path)
    table = markdown(results)
    assert "| test_e2e[carbon-tiny-smoke] | carbon-tiny | smoke |" in table
    assert "TKG p50 ms" in table and "kbp/s" in table
    assert "$/Gbp" not in table  # the CPU profile has no price
    r = cli("report", str(path), "--markdown", str(tmp_path / "r.md"))
    assert r.returncode == 0 and (tmp_path / "r.md").read_text() == table


def test_report_shows_cost_when_a_price_is_known(gated_run, tmp_path):
    _, data, _ = gated_run
    priced = copy.deepcopy(data)
    priced["machine_info"]["carbon_harness"]["hardware"]["price_per_hour"] = 2.235
    f = tmp_path / "priced.json"
    f.write_text(json.dumps(priced))
    assert "$/Gbp" in markdown(load_results(f)[0])


def test_report_plot(gated_run, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs the [plot] extra: pip install -e '.[plot]'")
    _, _, path = gated_run
    r = cli("report", str(path), "--plot", str(tmp_path / "t.png"))
    assert r.returncode == 0 and (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_report_rejects_other_json(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("{}")
    with pytest.raises(ReportError, match="not pytest-benchmark JSON"):
        load_results(f)


def slower(data: dict, factor: float) -> dict:
    new = copy.deepcopy(data)
    for b in new["benchmarks"]:
        if b["name"] == "test_e2e[carbon-tiny-smoke]":
            b["stats"]["median"] *= factor
            b["extra_info"]["tkg_ms_p50"] *= factor
            b["extra_info"]["tokens_per_s"] /= factor
    return new


def test_compare_identical_runs_pass(gated_run):
    _, _, path = gated_run
    r = cli("compare", str(path), str(path), "--max-regression", "5%")
    assert r.returncode == 0 and "0 regression(s)" in r.stdout


def test_compare_fails_on_a_regression_naming_the_benchmark(gated_run, tmp_path):
    _, data, path = gated_run
    new = tmp_path / "new.json"
    new.write_text(json.dumps(slower(data, 1.2)))
    r = cli("compare", str(path), str(new), "--max-regression", "5%")
    assert r.returncode == 1
    assert "REGRESSION tests/perf/test_latency.py::test_e2e[carbon-tiny-smoke] tokens_per_s" in r.stderr
    assert "tkg_ms_p50" in r.stderr
    assert cli("compare", str(path), str(new), "--max-regression", "25%").returncode == 0


def test_compare_improvements_are_not_regressions(gated_run, tmp_path):
    _, data, path = gated_run
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(slower(data, 0.5)))
    assert compare(load_results(path)[0], load_results(faster)[0], 0.05).regressions == []


def test_compare_reports_missing_benchmarks(gated_run, tmp_path):
    _, data, path = gated_run
    fewer = copy.deepcopy(data)
    fewer["benchmarks"] = [b for b in fewer["benchmarks"] if "test_cte" not in b["name"]]
    f = tmp_path / "fewer.json"
    f.write_text(json.dumps(fewer))
    r = cli("compare", str(path), str(f))
    assert "missing in new run: tests/perf/test_latency.py::test_cte[carbon-tiny-smoke]" in r.stdout


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.1", 0.1), ("12.5%", 0.125)])
def test_parse_percent(text, value):
    assert parse_percent(text) == pytest.approx(value)


def test_parse_percent_rejects_junk():
    with pytest.raises(ValueError, match="'five' is not a percentage"):
        parse_percent("five")


def test_plan_cli_reports_an_unfit_plan_with_numbers():
    r = cli("plan", "--model", "carbon-8b", "--shape", "a100-style-bs16", "--tp", "1", "--dtype", "fp32")
    assert r.returncode == 1
    assert "does not fit: weights 30.75 GiB + KV 2.00 GiB per rank > 24.00 GiB HBM per rank" in r.stderr


def test_plan_cli_json():
    r = cli("plan", "--model", "carbon-500m", "--shape", "report-bs1", "--hardware", "trn2.3xlarge", "--json")
    data = json.loads(r.stdout)
    assert data["sharding"]["fallback"] is True and data["sharding"]["strategy"] == "convert-to-mha"
    assert data["fits"] is True and data["tp_degree"] == 4

