"""The plugin end to end, in real pytest subprocesses: option errors stop the session at start,
thresholds gate, and the benchmark JSON carries the figures and the run manifest."""

from __future__ import annotations

import json

import pytest

from tests.helpers import REPO, run_pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("args,message", [
    (["--carbon-model", "carbon-9b"], "'carbon-9b' is neither a known model (carbon-500m, carbon-3b"),
    (["--carbon-shape", "huge"], "unknown shape 'huge'; known shapes: report-bs1"),
    (["--carbon-hardware", "tpu"], "unknown hardware profile 'tpu'; known profiles:"),
    (["--carbon-backend", "vllm"], "--carbon-backend 'vllm'; known backends: hf, neuron"),
    (["--carbon-runs", "0"], "'0' must be at least 1"),
    (["--carbon-variant", "fp4"], "--carbon-variant: unknown variant 'fp4'; known variants: fused-qkv"),
    (["--carbon-cores-per-worker", "16", "--carbon-hardware", "trn2.3xlarge"],
     "needs cores 0-15 but the host has 4 logical cores"),
])
def test_bad_options_stop_the_session_with_one_message(tmp_path, args, message):
    r = run_pytest("-m", "perf", "--co", *args, cache_dir=tmp_path)
    assert r.returncode in (2, 4), r.stdout + r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def expected_neuron_host_message() -> str | None:
    """What the session must say about this host, stated from the host itself rather than asked of the
    harness's detection (the code under test): what sys.path holds (PathFinder, which the harness's
    CPU-mode stubs never answer for) and what /dev holds. None: a Trn2 host, the session starts."""
    import glob
    from importlib.machinery import PathFinder

    if PathFinder.find_spec("torch_neuronx") is None:
        return "torch_neuronx is not importable: install the Neuron stack on a Trn2 host"
    if PathFinder.find_spec("neuronx_distributed_inference") is None:
        return "neuronx_distributed_inference is not importable: install the Neuron stack on a Trn2 host"
    if not glob.glob("/dev/neuron[0-9]*"):
        return "no /dev/neuron* device: run on a Trainium2 instance with the Neuron driver loaded"
    return None


def test_neuron_backend_stops_the_session_only_where_the_host_cannot_run_it(tmp_path):
    """On a CPU machine (or a simulated Trn2 host without devices: tests/unit/test_trn2_host.py) one
    message naming the missing piece; on a Trn2 host the session starts."""
    expected = expected_neuron_host_message()
    r = run_pytest("-m", "perf", "--co", "--carbon-backend", "neuron", cache_dir=tmp_path)
    if expected is None:
        assert r.returncode in (0, 5) and "cannot run here" not in r.stderr, r.stdout + r.stderr
    else:
        assert r.returncode in (2, 4), r.stdout + r.stderr
        assert f"--carbon-backend neuron cannot run here: {expected}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_malformed_thresholds_file_names_file_entry_and_field(tmp_path):
    bad = tmp_path / "typo.json"
    bad.write_text(json.dumps({"schema": 1, "thresholds": [
        {"hardware": "*", "model": "*", "shape": "*", "metric": "tkg_ms_p50", "max": 1},
        {"hardware": "*", "model": "*", "shape": "*", "metric": "tkg_ms_p05", "max": 1}]}))
    r = run_pytest("-m", "perf", "--co", f"--carbon-thresholds={bad}", cache_dir=tmp_path)
    assert r.returncode == 4
    assert f"{bad}: entry 1: field 'metric' has unknown metric 'tkg_ms_p05' (did you mean 'tkg_ms_p50'?)" in r.stderr


def test_impossible_threshold_fails_naming_the_metric(gated_run):
    r, _, _ = gated_run
    assert r.returncode == 1
    assert "FAILED tests/perf/test_latency.py::test_tkg[carbon-tiny-smoke]" in r.stdout
    assert "tkg_ms_p50 =" in r.stdout and "exceeds max 1e-06, baseline 3.09" in r.stdout
    assert "FAILED tests/perf/test_latency.py::test_e2e[carbon-tiny-smoke]" in r.stdout  # it reports tkg_ms_p50 too
    assert "2 failed, 1 passed" in r.stdout  # test_cte has no tkg figure: it passes

def test_benchmark_json_carries_figures_and_manifest(gated_run):
    _, data, _ = gated_run
    manifest = data["carbon_harness"]  # the run manifest, at the top level (issue 17 item 6)
    assert manifest["versions"]["torch"] and manifest["hardware"]["name"] == "cpu"
    assert manifest["hardware"]["memory_bandwidth_gbps"] > 0
    by_name = {b["name"]: b["extra_info"] for b in data["benchmarks"]}
    e2e = by_name["test_e2e[carbon-tiny-smoke]"]
    for key in ("model", "shape", "backend", "hardware", "batch_size", "prompt_tokens", "new_tokens", "cte_ms_p50",
                "cte_ms_p99", "tkg_ms_p50", "tkg_ms_p99", "e2e_ms_p50", "tokens_per_s", "bp_per_s", "kbp_per_s",
                "valid_dna_fraction", "tkg_roofline_fraction"):
        assert key in e2e, key
    assert (e2e["model"], e2e["shape"], e2e["new_tokens"], e2e["batch_size"]) == ("carbon-tiny", "smoke", 128, 1)
    assert by_name["test_cte[carbon-tiny-smoke]"]["gate"] == "no threshold"


IMPOSSIBLE_SPEEDUP = {"schema": 1, "thresholds": [
    {"hardware": "*", "model": "*", "shape": "tokenizer", "metric": "dna_encode_speedup", "min": 1e9}]}


def test_pytest_benchmark_save_and_compare_work_on_harness_benchmarks(tmp_path, carbon_cache_dir):
    """Plumbing only: without -m perf speedups are recorded but not gated, so neither machine load
    nor an impossible speedup bound can fail it."""
    thresholds = tmp_path / "impossible.json"
    thresholds.write_text(json.dumps(IMPOSSIBLE_SPEEDUP))
    # pytest-benchmark wants its storage below the working directory: run from tmp_path.
    common = (str(REPO / "tests/perf/test_tokenizer_speed.py"), "-k", "dna", "--rootdir", str(REPO),
              f"--carbon-thresholds={thresholds}", "--benchmark-storage", f"file://{tmp_path / 'bench'}")
    saved = run_pytest(*common, "--benchmark-save=base", cache_dir=carbon_cache_dir, cwd=tmp_path)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    files = list((tmp_path / "bench").rglob("*_base.json"))
    assert len(files) == 1
    extra = {b["extra_info"].get("implementation"): b["extra_info"] for b in json.loads(files[0].read_text())["benchmarks"]}
    assert set(extra) == {"carbon", "published per-6-mer reference"}
    assert extra["carbon"]["dna_encode_speedup"] > 0
    assert extra["carbon"]["gate"].startswith("not gated: speed is gated when -m selects perf")
    compared = run_pytest(*common, "--benchmark-compare", "--benchmark-compare-fail=median:1000%",
                          cache_dir=carbon_cache_dir, cwd=tmp_path)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "Comparing against benchmarks from" in compared.stdout + compared.stderr


def test_speedups_are_gated_under_m_perf(tmp_path, carbon_cache_dir):
    thresholds = tmp_path / "impossible.json"
    thresholds.write_text(json.dumps(IMPOSSIBLE_SPEEDUP))
    r = run_pytest("-m", "perf", str(REPO / "tests/perf/test_tokenizer_speed.py"), "-k", "carbon and dna",
                   "--carbon-thresholds", str(thresholds), cache_dir=carbon_cache_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "dna_encode_speedup =" in r.stdout and "is below min 1e+09" in r.stdout


def test_a_scoring_shape_skips_the_generation_tests_and_sizes_the_scan(tmp_path):
    """--carbon-shape scan-8k: the generation tests skip saying where it is measured; test_scan runs at it."""
    r = run_pytest("-m", "perf", "--co", "-q", "tests/perf/test_latency.py", "tests/perf/test_scoring.py",
                   "--carbon-shape", "smoke", "--carbon-shape", "scan-8k", cache_dir=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "test_scoring.py::test_scan[scan-8k-carbon-tiny]" in r.stdout
    r = run_pytest("-m", "perf", "-rs", "tests/perf/test_latency.py", "--carbon-shape", "scan-8k",
                   "--benchmark-disable", cache_dir=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 skipped" in r.stdout and "shape scan-8k is a scoring shape (prefill only, no decode)" in r.stdout
