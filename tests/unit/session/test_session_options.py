"""Bad session options stop pytest at start with one line (a usage error), never per test."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from harness.core.options import parse_positive_float, parse_runs, parse_warmup
from harness.session.config import make_config
from harness.session.workers import limit_worker_threads, worker_cpu_threads
from tests.unit.conftest import REPO, run_pytest

pytestmark = pytest.mark.unit


def options(**overrides):
    return {"backend": "hf", "models": None, "model_root": None, "shapes": None, "device": "auto", "dtype": "auto",
            "cache_dir": "~/.cache/carbon-harness", "thresholds": None, "hardware": "cpu", "runs": 5, "warmup": 1,
            "variants": None, "cores_per_worker": None, **overrides}


@pytest.mark.parametrize("overrides,message", [
    ({"thresholds": [""]}, "--carbon-thresholds '' is empty"),
    ({"cache_dir": ""}, "--carbon-cache-dir '' is empty"),
    ({"device": ""}, "--carbon-device '' is empty"),
    ({"device": "tpu"}, "--carbon-device 'tpu': device 'tpu' is not a device"),
    ({"dtype": "fp64"}, "--carbon-dtype 'fp64' is not supported; expected auto, fp32, bf16, fp16"),
])
def test_bad_options_fail_at_session_start(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_config(options(**overrides), REPO)


def test_cuda_without_a_gpu_is_refused_at_start():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --carbon-device cuda is valid here")
    with pytest.raises(ValueError, match="CUDA is not available here"):
        make_config(options(device="cuda"), REPO)


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
        make_config(options(thresholds=[str(empty)]), REPO)
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"schema": 1, "thresholds": [
        {"hardware": "cpu", "model": "carbon-tyni", "shape": "smoke", "metric": "tkg_ms_p50", "max": 1}]}))
    with pytest.raises(ValueError, match="did you mean 'carbon-tiny'"):
        make_config(options(thresholds=[str(typo)]), REPO)


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


@pytest.mark.parametrize("environ", [{}, {"PYTEST_XDIST_WORKER_COUNT": "2"},
                                     {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2",
                                      "OMP_NUM_THREADS": "3"}],
                         ids=["not-xdist", "controller", "user-set-omp"])
def test_threads_are_left_alone_outside_a_worker_or_when_the_user_set_them(environ):
    before = dict(environ)
    assert limit_worker_threads(environ) is None
    assert environ == before
