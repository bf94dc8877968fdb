"""Speed is gated only when ``-m`` selects perf, and only on a figure measured over enough rounds to
carry an interval: in real pytest subprocesses, a plain ``pytest`` records the speculative speedup
gain ungated (an impossible bound cannot fail it), and under ``-m perf`` a one-round figure is
recorded and reported as not gated while a figure from several rounds is gated."""

from __future__ import annotations

import json

import pytest

from harness.plugin.recording import MIN_GATED_ROUNDS, speed_gate_exemption
from tests.unit.conftest import REPO, run_pytest

pytestmark = pytest.mark.unit

IMPOSSIBLE_GAIN = {"schema": 1, "thresholds": [
    {"hardware": "*", "model": "carbon-tiny", "shape": "speculative-ends", "metric": "spec_speedup_gain", "min": 1e9},
    {"hardware": "*", "model": "carbon-tiny", "shape": "speculative-self", "metric": "spec_acceptance_rate",
     "min": 1.5}]}

# A benchmark that reports a speedup measured over ``rounds`` rounds, through the plugin's own gate.
ROUNDS_TEST = '''
import pytest

pytestmark = pytest.mark.perf


@pytest.mark.parametrize("rounds", [1, 3])
def test_gain(benchmark, carbon_gate, rounds):
    benchmark.pedantic(lambda: None, rounds=rounds)
    carbon_gate(benchmark, model="carbon-tiny", shape="speculative-ends", figures={"spec_speedup_gain": 2.0})


def test_acceptance(benchmark, carbon_gate):
    """Not a speed: gated with or without -m perf, whatever the rounds."""
    benchmark.pedantic(lambda: None, rounds=1)
    carbon_gate(benchmark, model="carbon-tiny", shape="speculative-self", figures={"spec_acceptance_rate": 1.0})
'''


@pytest.mark.parametrize("metric, rounds, markexpr, reason", [
    ("spec_speedup_gain", 5, "", "not gated: speed is gated when -m selects perf"),
    ("tkg_ms_p50", 5, "not perf", "not gated: speed is gated when -m selects perf"),
    ("spec_speedup_gain", 1, "perf", "not gated: only 1 round"),
    ("e2e_ms_p50", 0, "perf", "not gated: only 0 rounds"),
    ("spec_speedup_gain", MIN_GATED_ROUNDS, "perf", None),
    ("spec_acceptance_rate", 1, "", None),  # not a speed: always gated
    ("valid_dna_fraction", 1, "", None),
])
def test_speed_gate_exemption(metric, rounds, markexpr, reason):
    got = speed_gate_exemption(metric, rounds, markexpr)
    assert (got is None) if reason is None else got.startswith(reason), got


def test_a_plain_pytest_records_the_speculative_speedup_gain_ungated(tmp_path, carbon_cache_dir):
    """The issue's case: tests/perf/test_speculative.py gated spec_speedup_gain in a plain ``pytest``."""
    thresholds = tmp_path / "impossible.json"
    thresholds.write_text(json.dumps(IMPOSSIBLE_GAIN))
    out = tmp_path / "out.json"
    r = run_pytest(str(REPO / "tests/perf/test_speculative.py"), "-k", "test_speedup_grows_with_acceptance",
                   "-p", "no:randomly", f"--carbon-thresholds={thresholds}", f"--benchmark-json={out}",
                   "--carbon-runs=1", cache_dir=carbon_cache_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    extra = bench["extra_info"]
    assert extra["spec_speedup_gain"] > 0
    assert extra["gate"].startswith("not gated: speed is gated when -m selects perf"), extra["gate"]


def test_one_round_figures_are_reported_ungated_under_m_perf(tmp_path, carbon_cache_dir):
    thresholds = tmp_path / "impossible.json"
    thresholds.write_text(json.dumps(IMPOSSIBLE_GAIN))
    (tmp_path / "test_rounds.py").write_text(ROUNDS_TEST)
    out = tmp_path / "out.json"
    r = run_pytest("-m", "perf", "-rA", str(tmp_path / "test_rounds.py"), "-p", "no:randomly", f"--rootdir={tmp_path}",
                   f"--carbon-thresholds={thresholds}", f"--benchmark-json={out}", cache_dir=carbon_cache_dir)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "spec_speedup_gain = 2 is below min 1e+09" in r.stdout
    outcomes = {line.split("::")[-1].split(" ")[0]: line.split(" ")[0] for line in r.stdout.splitlines()
                if line.startswith(("PASSED ", "FAILED ")) and "test_rounds.py::" in line}
    assert outcomes == {"test_gain[1]": "PASSED", "test_gain[3]": "FAILED", "test_acceptance": "FAILED"}, outcomes
    assert "spec_acceptance_rate = 1 is below min 1.5" in r.stdout
    extra = {b["name"]: b["extra_info"] for b in json.loads(out.read_text())["benchmarks"]}
    one = extra["test_gain[1]"]
    assert one["gate"].startswith("not gated: only 1 round"), one["gate"]
    assert one["not_gated"] == {"spec_speedup_gain": "only 1 round"}
    assert extra["test_gain[3]"]["gate"]["spec_speedup_gain"]["passed"] is False
