"""Bad session options stop pytest at start with one line (a usage error), never per test."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from harness.core.options import parse_positive_float, parse_runs, parse_warmup
from harness.session.config import make_config
from harness.session.config import HarnessConfig
from harness.session.workers import limit_torch_threads, torch_thread_cap, worker_cpu_threads
from tests.helpers import REPO, plugin_options, run_pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("overrides,message", [
    ({"thresholds": [""]}, "--carbon-thresholds '' is empty"),
    ({"cache_dir": ""}, "--carbon-cache-dir '' is empty"),
    ({"device": ""}, "--carbon-device '' is empty"),
    ({"device": "tpu"}, "--carbon-device 'tpu': device 'tpu' is not a device"),
    ({"dtype": "fp64"}, "--carbon-dtype 'fp64' is not supported; expected auto, fp32, bf16, fp16"),
])
def test_bad_options_fail_at_session_start(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_config(plugin_options(**overrides), REPO)


def test_cuda_without_a_gpu_is_refused_at_start():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --carbon-device cuda is valid here")
    with pytest.raises(ValueError, match="CUDA is not available here"):
        make_config(plugin_options(device="cuda"), REPO)


@pytest.mark.parametrize("parse,value,message", [
    (parse_runs, "1000000000", "'1000000000' must be at most 10000"),
    (parse_warmup, "-1", "'-1' must be >= 0"),
    (parse_positive_float, "inf", "'inf' must be a finite number"),
])
def test_counts_and_prices_are_bounded(parse, value, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        parse(value)


@pytest.mark.parametrize("args,message", [
    (["--carbon-device", "tpu"], "--carbon-device 'tpu': device 'tpu' is not a device"),
    (["--carbon-runs", "1000000000"], "'1000000000' must be at most 10000"),
])
def test_the_plugin_turns_them_into_one_usage_error(tmp_path, args, message):
    r = run_pytest("--collect-only", "-q", "tests/unit/core/test_measure.py", *args, cache_dir=tmp_path / "cache")
    assert r.returncode == 4, r.stdout + r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_thresholds_errors_stop_the_session(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=re.escape("holds no *.json file")):
        make_config(plugin_options(thresholds=[str(empty)]), REPO)
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"schema": 1, "thresholds": [
        {"hardware": "cpu", "model": "carbon-tyni", "shape": "smoke", "metric": "tkg_ms_p50", "max": 1}]}))
    with pytest.raises(ValueError, match="did you mean 'carbon-tiny'"):
        make_config(plugin_options(thresholds=[str(typo)]), REPO)


def test_a_figure_gated_only_on_other_hardware_is_reported(gated_run):
    """gated_run has a reference for carbon-tiny/smoke cte_ms_p50 on trn2.3xlarge only: on the cpu
    profile that figure is not gated, and the run says so (extra_info and a terminal line) instead
    of passing silently."""
    r, data, _ = gated_run
    assert ("carbon-harness: NOT GATED carbon-tiny/smoke on cpu: cte_ms_p50 (thresholds only for trn2.3xlarge)"
            in r.stdout)
    cte = next(b for b in data["benchmarks"] if b["name"] == "test_cte[carbon-tiny-smoke]")
    assert cte["extra_info"]["ungated"] == {"cte_ms_p50": ["trn2.3xlarge"]} and cte["extra_info"]["gate"] == (
        "no threshold")


@pytest.mark.parametrize("cpus, workers, threads", [(2, 2, 1), (16, 2, 8), (16, 3, 5), (2, 4, 1), (1, 1, 1)])
def test_xdist_workers_share_the_cpus(cpus, workers, threads):
    assert worker_cpu_threads(cpus, workers) == threads


@pytest.mark.parametrize("cpus, workers", [(0, 2), (2, 0)])
def test_a_cpu_share_of_nothing_is_refused(cpus, workers):
    with pytest.raises(ValueError, match=f"cpus={cpus} and workers={workers}"):
        worker_cpu_threads(cpus, workers)


XDIST = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"}


@pytest.mark.parametrize("config, environ, threads", [
    (HarnessConfig(backend="hf", device="cpu"), {}, 1),
    (HarnessConfig(backend="hf", device="cpu"), XDIST, 1),
    (HarnessConfig(backend="hf", device="cpu", cpu_threads=3), {}, 3),
    (HarnessConfig(backend="hf", device="cpu", cpu_threads=3), {"OMP_NUM_THREADS": "2"}, 3),
    (HarnessConfig(backend="hf", device="cpu"), {"OMP_NUM_THREADS": "2"}, None),
    (HarnessConfig(backend="neuron", neuron_cpu=True), {}, 1),
    (HarnessConfig(backend="neuron"), {}, None),
    (HarnessConfig(backend="openai", endpoint="http://127.0.0.1:1"), {}, None),
    (HarnessConfig(backend="openai", endpoint="http://127.0.0.1:1"), XDIST, 8),
    (HarnessConfig(backend="openai", endpoint="http://127.0.0.1:1"), {"PYTEST_XDIST_WORKER_COUNT": "2"}, None),
], ids=["hf-cpu", "hf-cpu-xdist", "given", "given-beats-omp", "user-omp", "nxdi-cpu-mode", "nxdi-device",
        "served", "served-xdist-share", "xdist-controller"])
def test_torch_runs_the_model_on_one_cpu_thread_unless_told(config, environ, threads):
    """One thread where the model runs on this CPU (a forward split over cores waits for whichever thread
    lost its core: the CTE went bimodal, 10x, beside a busy neighbour); a worker's CPU share elsewhere."""
    assert torch_thread_cap(config, environ, cpus=16) == threads


def test_the_thread_cap_is_applied_to_torch_and_to_what_a_worker_starts():
    import torch

    before = torch.get_num_threads()
    environ = dict(XDIST)
    try:
        assert limit_torch_threads(HarnessConfig(backend="hf", device="cpu", cpu_threads=2), environ) == 2
        assert torch.get_num_threads() == 2 and environ["OMP_NUM_THREADS"] == "2"
        untouched = {"OMP_NUM_THREADS": "3"}
        assert limit_torch_threads(HarnessConfig(backend="hf", device="cpu"), untouched) is None
        assert untouched == {"OMP_NUM_THREADS": "3"}
    finally:
        torch.set_num_threads(before)


# -- --carbon-model-root: a named model that is not there is an error, not synthetic weights ---------------------------

def test_a_model_root_without_the_model_names_what_it_looked_for_and_what_it_holds(tmp_path):
    (tmp_path / "carbon-3B").mkdir()  # not the published name
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError) as err:
        make_config(plugin_options(model_root=str(tmp_path), models=["carbon-3b"]), REPO)
    assert str(err.value) == (f"--carbon-model 'carbon-3b': --carbon-model-root {tmp_path} has no directory named "
                              "Carbon-3B or carbon-3b (it holds: carbon-3B, notes.txt); without --carbon-model-root "
                              "carbon-3b is a synthetic checkpoint")


def test_a_model_root_draft_that_is_missing_is_an_error_too(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"--carbon-draft 'carbon-500m': --carbon-model-root {tmp_path} has "
                                                   "no directory named Carbon-500M or carbon-500m (it holds: nothing)")):
        make_config(plugin_options(model_root=str(tmp_path), drafts=["carbon-500m"]), REPO)


def test_a_model_root_checkpoint_is_found_and_checked_at_start(tmp_path, carbon_cache_dir):
    import shutil

    from harness.carbon.checkpoint import cached_checkpoint

    tiny = cached_checkpoint("carbon-tiny", carbon_cache_dir, progress=None)
    shutil.copytree(tiny, tmp_path / "carbon-tiny")
    cfg = make_config(plugin_options(model_root=str(tmp_path), models=["carbon-tiny", "carbon-tiny-draft"]), REPO)
    assert [(m.label, m.path) for m in cfg.models] == [("carbon-tiny", tmp_path / "carbon-tiny"),
                                                       ("carbon-tiny-draft", None)]  # embedded: synthetic when absent
    shutil.copytree(tiny, tmp_path / "Carbon-500M")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'Carbon-500M'} holds a checkpoint of carbon-tiny "
                                                   "architecture, not carbon-500m's")):
        make_config(plugin_options(model_root=str(tmp_path), models=["carbon-500m"]), REPO)
    (tmp_path / "Carbon-8B").mkdir()  # there, but no checkpoint in it
    with pytest.raises(ValueError, match=re.escape(f"checkpoint file {tmp_path / 'Carbon-8B' / 'config.json'}")):
        make_config(plugin_options(model_root=str(tmp_path), models=["carbon-8b"]), REPO)
