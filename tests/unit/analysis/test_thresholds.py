"""Thresholds carry their provenance, and regenerate from a run in one command (issue 17 item 8).

The derivation is checked on a real run: the smoke shape of the embedded default, measured by the
plugin in a pytest subprocess (``gated_run``), derived by the real ``carbon-harness thresholds`` in
another, loaded back with the real loader, and used to gate the same run (passes) and a copy of it
with every figure planted 50% worse (fails, naming the figures).
"""

from __future__ import annotations

import copy
import json

import pytest

from harness.analysis.gates import (
    PROVENANCE_REQUIRED,
    ThresholdError,
    load_thresholds,
    parse_provenance,
    parse_thresholds,
)
from harness.analysis.thresholds import derive, gate_run, parse_headroom
from harness.core.metrics import METRICS
from harness.core.paths import FIXTURES_DIR
from harness.release.children import child_env
from tests.helpers import REPO, run_cli as cli

pytestmark = pytest.mark.unit

PROVENANCE = {"sdk": "2.29", "nxdi": "0.9.0", "neuronx_cc": "2.21", "instance": "trn2.3xlarge", "date": "2026-05-21",
              "run": "reference runs"}
ENTRY = {"hardware": "trn2.3xlarge", "model": "carbon-3b", "shape": "smoke", "metric": "tkg_ms_p50", "max": 7.4}


@pytest.mark.parametrize("path", sorted((FIXTURES_DIR / "thresholds").glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_thresholds_file_says_where_its_numbers_come_from(path):
    data = json.loads(path.read_text())
    assert set(PROVENANCE_REQUIRED) <= set(data.get("provenance", {})), f"{path.name} lacks a provenance block"
    parse_provenance(data["provenance"], path.name)


@pytest.mark.parametrize("document,message", [
    ({"provenance": {**PROVENANCE, "neuronx-cc": "2.21"}}, "unknown field 'neuronx-cc' (did you mean 'neuronx_cc'?)"),
    ({"provenence": PROVENANCE}, "f.json: unknown field 'provenence' (did you mean 'provenance'?)"),
    ({"provenance": {k: v for k, v in PROVENANCE.items() if k != "run"}}, "provenance: field 'run' is required"),
    ({"provenance": {**PROVENANCE, "sdk": ""}}, "provenance: field 'sdk' is required"),
    ({"provenance": {**PROVENANCE, "date": "21/05/2026"}}, "field 'date' '21/05/2026' is not an ISO date"),
    ({"provenance": {**PROVENANCE, "versions": {"torch": 2.9}}}, "field 'versions' must map package names"),
    ({"provenance": "trn2"}, "provenance: must be an object"),
])
def test_provenance_is_checked_like_the_entries(document, message):
    with pytest.raises(ThresholdError) as err:
        parse_thresholds({"schema": 1, "thresholds": [ENTRY], **document}, "f.json")
    assert message in str(err.value)


@pytest.mark.parametrize("text,value", [("10%", 0.10), ("0.1", 0.10), ("2.5%", 0.025), ("150%", 1.5)])
def test_headroom_accepts_a_percentage_or_a_fraction(text, value):
    assert parse_headroom(text) == pytest.approx(value)


@pytest.mark.parametrize("text,message", [
    ("0%", "must be above 0%"), ("0", "must be above 0%"), ("-5%", "out of range"), ("10", "ambiguous"),
    ("ten", "is not a percentage"), ("nan", "out of range"), ("2000%", "out of range")])
def test_headroom_refuses_nonsense_naming_it(text, message):
    with pytest.raises(ValueError, match="--headroom") as err:
        parse_headroom(text)
    assert message in str(err.value) and repr(text) in str(err.value)


def test_a_figure_gated_under_another_label_or_never_recorded_with_one_is_not_mixed_in():
    """The bound holds for the worst of the benchmarks that share a gate key; a benchmark without
    ``gated_as`` (an older file) is skipped, saying why, and a zero figure gives no bound."""
    def bench(name, shape, value, gated=True):
        info = {"tkg_ms_p50": value, "valid_dna_fraction": 0.0, "gate": "no threshold",
                "not_gated": {"tkg_ms_p50": "no threshold", "valid_dna_fraction": "no threshold"}}
        if gated:
            info["gated_as"] = {"hardware": "cpu", "model": "carbon-tiny", "shape": shape}
        return {"name": name, "extra_info": info}

    d = derive([bench("a", "smoke", 2.0), bench("b", "smoke", 3.0), bench("c", "smoke-fns", 9.0),
                bench("old", "smoke", 50.0, gated=False)], 0.10)
    by_shape = {(e.shape, e.metric): e for e in d.entries}
    assert set(by_shape) == {("smoke", "tkg_ms_p50"), ("smoke-fns", "tkg_ms_p50")}
    assert by_shape["smoke", "tkg_ms_p50"].baseline == 3.0 and by_shape["smoke", "tkg_ms_p50"].bound == 3.3
    assert any(s.startswith("old: no 'gated_as'") for s in d.skipped)
    assert any("valid_dna_fraction: measured 0.0, a bound that gates nothing" in s for s in d.skipped)


def _planted_slower(data: dict, factor: float) -> dict:
    """The same run with every figure ``factor`` worse: times longer, throughputs lower."""
    slow = copy.deepcopy(data)
    for b in slow["benchmarks"]:
        for metric, value in list(b["extra_info"].items()):
            if metric in METRICS and isinstance(value, (int, float)) and not isinstance(value, bool):
                b["extra_info"][metric] = value * factor if METRICS[metric] == "max" else value / factor
    return slow


def test_thresholds_from_a_real_smoke_run_gate_it_and_fail_a_slower_copy(gated_run, tmp_path):
    _, data, run_json = gated_run
    out = tmp_path / "cpu-derived.json"
    r = cli("thresholds", "--from", str(run_json), "--headroom", "10%", "--out", str(out), "--sdk", "none (CPU)")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{out}: " in r.stdout and "its run passes all" in r.stdout

    thresholds = load_thresholds([out])  # the session's own loader
    written = json.loads(out.read_text())
    manifest = data["carbon_harness"]
    prov = written["provenance"]
    assert prov["sdk"] == "none (CPU)" and prov["headroom"] == "10%" and prov["date"] == data["datetime"][:10]
    assert prov["instance"].startswith("cpu (") and prov["neuronx_cc"] == "none"
    assert prov["versions"]["torch"] == manifest["versions"]["torch"] and str(run_json) in prov["run"]
    by_key = {(t.model, t.shape, t.metric): t for t in thresholds}
    assert {t.hardware for t in thresholds} == {"cpu"}
    for metric in ("cte_ms_p50", "tkg_ms_p50", "e2e_ms_p50", "tokens_per_s"):
        assert ("carbon-tiny", "smoke", metric) in by_key, metric
    tkg = by_key["carbon-tiny", "smoke", "tkg_ms_p50"]  # reported by test_tkg and test_e2e: the larger is the base
    tkg_values = [b["extra_info"]["tkg_ms_p50"] for b in data["benchmarks"] if "tkg_ms_p50" in b["extra_info"]]
    assert len(tkg_values) == 2 and tkg.baseline == pytest.approx(max(tkg_values), rel=1e-5)
    assert tkg.kind == "max" and tkg.bound == pytest.approx(1.1 * max(tkg_values), rel=1e-5)
    tps = by_key["carbon-tiny", "smoke", "tokens_per_s"]
    # the written baseline is rounded to SIGNIFICANT digits and the bound, from the unrounded one, rounded down:
    # two roundings of up to one unit in the 6th digit each (114.796 against 126.2770 / 1.1 = 114.7973, 2026-11-28)
    assert tps.kind == "min" and tps.bound == pytest.approx(tps.baseline / 1.1, rel=2e-5)

    same = gate_run(thresholds, data["benchmarks"])
    assert len(same) >= len(thresholds) and all(g.passed for g in same), [g.message() for g in same if not g.passed]
    slower = gate_run(thresholds, _planted_slower(data, 1.5)["benchmarks"])
    failed = {g.metric for g in slower if not g.passed}
    assert {"cte_ms_p50", "tkg_ms_p50", "e2e_ms_p50", "tokens_per_s"} <= failed
    assert len(failed) == len({t.metric for t in thresholds})  # every figure 50% worse crosses a 10% headroom
    barely = gate_run(thresholds, _planted_slower(data, 1.05)["benchmarks"])
    assert all(g.passed for g in barely)  # 5% worse is within the 10% headroom


def test_a_file_written_into_the_default_thresholds_directory_must_load_with_the_rest(gated_run, tmp_path):
    """The README's --out fixtures/thresholds/mine.json from a CPU run collided with the shipped cpu.json:
    the file loaded alone, and the next default run stopped at start on the ambiguity."""
    _, _, run_json = gated_run
    shipped = tmp_path / "fixtures" / "thresholds"
    shipped.mkdir(parents=True)
    (shipped / "cpu.json").write_text((FIXTURES_DIR / "thresholds" / "cpu.json").read_text())
    into = shipped / "mine.json"
    env = child_env({"PYTHONPATH": str(REPO)})  # run from elsewhere: this checkout's harness, not an installed one
    r = cli("thresholds", "--from", str(run_json), "--out", str(into), "--headroom", "50%", cwd=tmp_path, env=env)
    assert r.returncode == 2 and f"--out {into}: a run that loads its directory would stop on it" in r.stderr, r.stderr
    assert "pass --carbon-thresholds=FILE" in r.stderr and not into.exists()
    beside = tmp_path / "mine.json"
    r = cli("thresholds", "--from", str(run_json), "--out", str(beside), "--headroom", "50%", cwd=tmp_path, env=env)
    assert r.returncode == 0 and load_thresholds([beside]), r.stderr


def test_the_thresholds_command_refuses_to_overwrite_and_bad_headroom(gated_run, tmp_path):
    _, _, run_json = gated_run
    out = tmp_path / "t.json"
    out.write_text("keep me")
    r = cli("thresholds", "--from", str(run_json), "--out", str(out))
    assert r.returncode == 2 and f"--out {out} exists: refusing to overwrite it; pass --force" in r.stderr
    assert out.read_text() == "keep me"
    r = cli("thresholds", "--from", str(run_json), "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert load_thresholds([out])
    r = cli("thresholds", "--from", str(run_json), "--out", str(tmp_path / "u.json"), "--headroom", "10")
    assert r.returncode == 2 and "--headroom '10' is ambiguous" in r.stderr
    assert not (tmp_path / "u.json").exists()
    r = cli("thresholds", "--from", str(run_json), "--out", str(run_json))
    assert r.returncode == 2 and "is the input file" in r.stderr


def test_the_thresholds_command_warns_below_the_measured_spread_and_of_an_sdk_without_nxdi(gated_run, tmp_path):
    """Issue 32, item 8: --headroom 10% on a CPU run, whose measured run-to-run spread is 50%, and
    --sdk 2.29 on a run without NxDI were both taken silently."""
    _, _, run_json = gated_run
    r = cli("thresholds", "--from", str(run_json), "--headroom", "10%", "--out", str(tmp_path / "a.json"),
            "--sdk", "2.29")
    assert r.returncode == 0, r.stderr  # written all the same: a warning, not a refusal
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: --headroom 10% is below the run-to-run spread measured on 'cpu' hardware, 50% "
        "(fixtures/compare/tolerances.json): the next run of the same code will likely fail this file; give "
        "--headroom 50% or more",
        "warning: --sdk 2.29 names a Neuron SDK release, but this run used no NxDI (backend hf, hardware cpu): the "
        "provenance will say sdk '2.29' with nxdi 'none'; for a CPU run give --sdk 'none (CPU)'"]
    r = cli("thresholds", "--from", str(run_json), "--headroom", "50%", "--out", str(tmp_path / "b.json"),
            "--sdk", "none (CPU)")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
