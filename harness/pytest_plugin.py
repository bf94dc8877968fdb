"""The carbon-harness pytest plugin: options and hooks only.

Fixtures live in ``harness.fixtures``, run-level state in ``harness.session``; option values are
parsed by ``parse_*`` functions so a bad value stops the session at start with one message.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import pytest

from harness.backends.base import BackendError
from harness.options import parse_nonneg_int, parse_positive_int
from harness.session import Session, make_config, run_manifest

REMOTE_TOKENIZER_ENV = "CARBON_REMOTE_TOKENIZER"
CACHE_DIR_ENV = "CARBON_HARNESS_CACHE"
SESSION_KEY = pytest.StashKey[Session]()


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    from harness.benchmark_json import JsonOptionTakeover

    pluginmanager.register(JsonOptionTakeover(parser), "carbon-harness-benchmark-json")
    group = parser.getgroup("carbon-harness", "Carbon model benchmark and conformance harness")
    group.addoption("--carbon-backend", default="hf", help="hf (transformers, default) or neuron (NxDI on Trainium2)")
    group.addoption("--carbon-model", action="append", dest="carbon_models", metavar="NAME|PATH",
                    help="repeatable: carbon-tiny (default), carbon-500m, carbon-3b, carbon-8b, or a checkpoint "
                         "directory; names resolve under --carbon-model-root, else to synthetic weights")
    group.addoption("--carbon-model-root", metavar="DIR",
                    help="a directory of real checkpoints named Carbon-500M, Carbon-3B, Carbon-8B")
    group.addoption("--carbon-shape", action="append", dest="carbon_shapes", metavar="NAME",
                    help="repeatable: smoke, report-bs1 (the defaults), a100-style-bs16, dna-suite-bs1")
    group.addoption("--carbon-device", default="auto", help="hf backend: auto, cpu, cuda or cuda:N")
    group.addoption("--carbon-dtype", default="auto", help="hf backend: auto (bf16 on GPU, fp32 on CPU), bf16, fp32")
    group.addoption("--carbon-cache-dir", metavar="DIR", default=os.environ.get(CACHE_DIR_ENV, "~/.cache/carbon-harness"),
                    help=f"built checkpoints and compiled artifacts, reused across sessions (env: {CACHE_DIR_ENV})")
    group.addoption("--carbon-thresholds", action="append", metavar="FILE",
                    help="repeatable thresholds file or directory (default: fixtures/thresholds/)")
    group.addoption("--carbon-hardware", metavar="PROFILE",
                    help="hardware profile from fixtures/hardware (default: detected: trn2.*, h100-sxm, h200 or cpu)")
    group.addoption("--carbon-runs", type=parse_positive_int, default=5, help="timed rounds per benchmark")
    group.addoption("--carbon-warmup", type=parse_nonneg_int, default=1, help="untimed warm-up rounds per benchmark")
    group.addoption("--carbon-variant", action="append", dest="carbon_variants", metavar="NAME",
                    help="neuron backend, repeatable: fused-qkv, kv-cache-fp8, topk-kernel, nki-cte-mlp "
                         "(the reference optimisation pass)")
    group.addoption("--carbon-cores-per-worker", type=parse_positive_int, metavar="N",
                    help="with pytest-xdist on a multi-chip host: each worker gets its own N NeuronCores "
                         "(NEURON_RT_VISIBLE_CORES)")
    group.addoption("--carbon-remote-tokenizer", metavar="CHECKPOINT", default=os.environ.get(REMOTE_TOKENIZER_ENV),
                    help=f"a real Carbon checkpoint whose published tokenizer (trust_remote_code) is compared with the "
                         f"builtin one (env: {REMOTE_TOKENIZER_ENV}); needs network or a warm HF cache for Qwen3")


def pytest_configure(config: pytest.Config) -> None:
    from harness import fixtures

    if not config.pluginmanager.is_registered(fixtures):
        config.pluginmanager.register(fixtures, "carbon_harness_fixtures")
    if config.option.help or getattr(config.option, "version", False):
        return
    register_benchmark_hooks(config)
    options = {
        "backend": config.getoption("carbon_backend"), "models": config.getoption("carbon_models"),
        "model_root": config.getoption("carbon_model_root"), "shapes": config.getoption("carbon_shapes"),
        "device": config.getoption("carbon_device"), "dtype": config.getoption("carbon_dtype"),
        "cache_dir": config.getoption("carbon_cache_dir"), "thresholds": config.getoption("carbon_thresholds"),
        "hardware": config.getoption("carbon_hardware"), "runs": config.getoption("carbon_runs"),
        "warmup": config.getoption("carbon_warmup"), "variants": config.getoption("carbon_variants"),
        "cores_per_worker": config.getoption("carbon_cores_per_worker"),
    }
    try:
        harness_config = make_config(options, Path(str(config.rootpath)))
        from harness.session import assign_worker_cores, check_backend_available

        assign_worker_cores(harness_config, os.environ.get("PYTEST_XDIST_WORKER", "master"))
        check_backend_available(harness_config.backend)
    except (ValueError, OSError, BackendError) as exc:
        raise pytest.UsageError(f"carbon-harness: {exc}") from None
    config.stash[SESSION_KEY] = Session(harness_config, progress=terminal_progress(config))


def register_benchmark_hooks(config: pytest.Config) -> None:
    """pytest-benchmark measured under pytest-xdist too, and --benchmark-json written atomically."""
    from harness.benchmark_hooks import BenchmarkHooks

    if config.pluginmanager.hasplugin("benchmark") and not config.pluginmanager.has_plugin(BenchmarkHooks.NAME):
        config.pluginmanager.register(BenchmarkHooks(config), BenchmarkHooks.NAME)


def terminal_progress(config: pytest.Config):
    """Progress of long work (checkpoint builds, compiles, loads) shown live, past pytest's capture."""
    def progress(message: str) -> None:
        capman = config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else nullcontext():
            config.get_terminal_writer().line(f"[carbon-harness] {message}")

    return progress


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return []
    cfg = session.config
    models = ", ".join(f"{m.label} ({m.path or 'synthetic, cache'})" for m in cfg.models)
    return [
        f"carbon-harness: backend={cfg.backend} device={cfg.device} dtype={cfg.dtype} hardware={cfg.hardware_name}",
        f"carbon-harness: models={models}",
        f"carbon-harness: shapes={', '.join(s.name for s in cfg.shapes)} runs={cfg.runs} warmup={cfg.warmup} "
        f"thresholds={len(cfg.thresholds)} from {', '.join(cfg.threshold_files) or 'none'} cache={cfg.cache_dir}",
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that takes ``carbon_model`` / ``carbon_shape`` runs for each configured one;
    session scope makes pytest group tests by model so each engine is used while it is warm."""
    session = metafunc.config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    if "carbon_model" in metafunc.fixturenames:
        models = session.config.models
        metafunc.parametrize("carbon_model", models, ids=[m.label for m in models], scope="session")
    if "carbon_shape" in metafunc.fixturenames:
        shapes = session.config.shapes
        metafunc.parametrize("carbon_shape", shapes, ids=[s.name for s in shapes], scope="session")


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        machine_info["carbon_harness"] = run_manifest(session)
