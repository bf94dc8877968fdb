"""The carbon-harness pytest plugin: options and hooks only.

Fixtures live in ``harness.plugin.fixtures``, run-level state in ``harness.session``; option values are
parsed by ``parse_*`` functions so a bad value stops the session at start with one message.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import pytest

from harness.core.errors import BackendError
from harness.core.options import parse_positive_float, parse_positive_int, parse_runs, parse_warmup
from harness.core.troubleshooting import explain_pointer
from harness.plugin.keys import SESSION_KEY, UNGATED_KEY
from harness.session.config import make_config
from harness.session.engines import Session
from harness.session.manifest import run_manifest

REMOTE_TOKENIZER_ENV = "CARBON_REMOTE_TOKENIZER"
NXDI_SOURCE_ENV = "CARBON_NXDI_SOURCE"
CACHE_DIR_ENV = "CARBON_HARNESS_CACHE"


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    from harness.plugin.benchmark_json import JsonOptionTakeover

    pluginmanager.register(JsonOptionTakeover(parser), "carbon-harness-benchmark-json")
    group = parser.getgroup("carbon-harness", "Carbon model benchmark and conformance harness")
    group.addoption("--carbon-backend", default="hf", help="hf (transformers, default), neuron (NxDI on Trainium2) "
                    "or openai (an OpenAI-compatible server: --carbon-endpoint / --carbon-serve)")
    group.addoption("--carbon-model", action="append", dest="carbon_models", metavar="NAME|PATH",
                    help="repeatable: carbon-tiny (default), carbon-500m, carbon-3b, carbon-8b, or a checkpoint "
                         "directory; names resolve under --carbon-model-root, else to synthetic weights")
    group.addoption("--carbon-model-root", metavar="DIR",
                    help="a directory of real checkpoints named Carbon-500M, Carbon-3B, Carbon-8B")
    group.addoption("--carbon-shape", action="append", dest="carbon_shapes", metavar="NAME",
                    help="repeatable: smoke, report-bs1 (the defaults), a100-style-bs16, dna-suite-bs1")
    group.addoption("--carbon-device", default="auto", help="hf backend: auto, cpu, cuda or cuda:N")
    group.addoption("--carbon-dtype", default="auto", help="hf: the torch dtype, auto (bf16 on GPU, fp32 on CPU), bf16, fp32; "
                    "neuron: NeuronConfig's torch_dtype, auto (bf16 on a device, fp32 in NxDI's CPU mode), bf16, "
                    "fp32; openai: the server's dtype, which picks the output contract's criterion (auto: that of a "
                    "server --carbon-serve starts, else unknown)")
    group.addoption("--carbon-cache-dir", metavar="DIR", default=os.environ.get(CACHE_DIR_ENV, "~/.cache/carbon-harness"),
                    help=f"built checkpoints and compiled artifacts, reused across sessions (env: {CACHE_DIR_ENV})")
    group.addoption("--carbon-thresholds", action="append", metavar="FILE",
                    help="repeatable thresholds file or directory (default: fixtures/thresholds/)")
    group.addoption("--carbon-hardware", metavar="PROFILE",
                    help="hardware profile from fixtures/hardware (default: detected: trn2.*, h100-sxm, h200 or cpu)")
    from harness.plugin.gate_summary import REQUIRE_GATES_HELP

    group.addoption("--carbon-require-gates", action="store_true", default=False, help=REQUIRE_GATES_HELP)
    group.addoption("--carbon-runs", type=parse_runs, default=5, help="timed rounds per benchmark")
    group.addoption("--carbon-warmup", type=parse_warmup, default=1, help="untimed warm-up rounds per benchmark")
    group.addoption("--carbon-variant", action="append", dest="carbon_variants", metavar="NAME",
                    help="neuron backend, repeatable: fused-qkv, qkv-kernel, kv-cache-fp8, mlp-kernel, no-flash-attention "
                         "(the reference optimisation pass)")
    group.addoption("--carbon-cores-per-worker", type=parse_positive_int, metavar="N",
                    help="with pytest-xdist on a multi-chip host: each worker gets its own N NeuronCores "
                         "(NEURON_RT_VISIBLE_CORES)")
    group.addoption("--carbon-cpu-threads", type=parse_positive_int, metavar="N",
                    help="torch's intra-op threads where the model runs on this CPU (hf on cpu, NxDI's CPU mode); "
                         "default 1: on a shared CPU a multi-threaded forward waits for whichever thread lost its core")
    group.addoption("--carbon-neuron-cpu", action="store_true", default=False,
                    help="neuron backend: run NxDI's own CPU mode (on_cpu=True, to_cpu(); tp 1, fp32) instead of a "
                         "Trainium2 device; only the Neuron-only binary packages are stubbed")
    group.addoption("--carbon-nxdi-source", metavar="DIR", default=os.environ.get(NXDI_SOURCE_ENV),
                    help=f"an NxDI source checkout (or a folder with neuronx-distributed-inference/ and "
                         f"neuronx-distributed/ side by side) for the NxDI CPU tier, instead of the installed "
                         f"package (env: {NXDI_SOURCE_ENV})")
    group.addoption("--carbon-hf-compile", action="store_true", default=False,
                    help="hf backend: a static KV cache and a torch.compile'd decode step (CUDA graphs on a GPU), "
                         "compiled at load (compile_s); the eager engine stays the reference")
    group.addoption("--carbon-work-counts", choices=("on", "off"), default="on",
                    help="on (default): after each CTE / TKG benchmark's timed rounds, an untimed pass counts one "
                         "step's exact work (Python calls by function, aten ops, bytes, instructions where the host "
                         "has a PMU) into its extra_info['work']; off: no counting pass")
    group.addoption("--carbon-draft", action="append", dest="carbon_drafts", metavar="NAME|PATH|self",
                    help="repeatable: a speculative draft for every --carbon-model (same names and paths as "
                         "--carbon-model, or self: the target drafts for itself); default: carbon-tiny-draft and self")
    group.addoption("--carbon-speculation-length", type=parse_positive_int, default=4, metavar="K",
                    help="draft tokens per speculative verification step (default 4)")
    group.addoption("--carbon-remote-tokenizer", metavar="CHECKPOINT", default=os.environ.get(REMOTE_TOKENIZER_ENV),
                    help=f"a real Carbon checkpoint whose published tokenizer (trust_remote_code) is compared with the "
                         f"builtin one (env: {REMOTE_TOKENIZER_ENV}); needs network or a warm HF cache for Qwen3")
    group.addoption("--carbon-endpoint", metavar="URL",
                    help="an OpenAI-compatible server (vLLM, vLLM-neuron, SGLang) to benchmark, e.g. "
                         "http://127.0.0.1:8000; its API key comes from $CARBON_API_KEY")
    group.addoption("--carbon-served-model", metavar="NAME", help="the model name the server serves (default: its only one)")
    group.addoption("--carbon-contract-out", metavar="DIR",
                    help="the output contract's test (-m contract) writes this side's greedy tokens and scored "
                         "log-probabilities here, contract-MODEL-SHAPE.json (release-check reads them)")
    group.addoption("--carbon-contract-reference", metavar="DIR",
                    help="the reference's contracts (the fp32 transformers run, as --carbon-contract-out wrote them) "
                         "whose greedy tokens this side scores too")
    group.addoption("--carbon-serve", metavar="SERVER",
                    help="vllm: start a vLLM server on the first --carbon-model for the session (needs vllm installed)")
    group.addoption("--carbon-workload", action="append", dest="carbon_workloads", metavar="NAME",
                    help="serving benchmarks, repeatable: dna-suite, batch-suite, a10-smoke (the CPU defaults), "
                         "a10-500m (2048 in / 6000 out at 32), a10-3b (2048 / 8192 at 12)")
    group.addoption("--carbon-max-concurrency", metavar="N[,N...]",
                    help="serving benchmarks: concurrency, or a sweep over it (default: the workload's own)")
    group.addoption("--carbon-request-rate", metavar="R[,R...]",
                    help="serving benchmarks: requests/s (Poisson; inf: all at once, the default), or a sweep")
    group.addoption("--carbon-burstiness", type=parse_positive_float, default=1.0,
                    help="serving benchmarks: gamma shape of the arrivals (1: Poisson; lower: burstier)")
    group.addoption("--carbon-goodput", metavar="SLOS",
                    help="serving benchmarks: SLOs in vLLM's --goodput syntax, e.g. 'ttft:200 tpot:50' (ms)")
    group.addoption("--carbon-serve-timeout", type=parse_positive_int, default=600, metavar="S",
                    help="seconds to wait for --carbon-serve's server to answer")
    from harness.plugin import history  # --carbon-history: the run judged against its series' history

    pluginmanager.register(history, "carbon-harness-history")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    """A plugin option's path that pytest took for a test path (``--carbon-thresholds /tmp/t.json``)
    and that moved the rootdir stops the session here, before any conftest is imported, with one
    line naming the ``--opt=PATH`` form (``harness.plugin.rootdir`` says why pytest cannot be helped)."""
    from harness.plugin.rootdir import misread_path_error

    message = misread_path_error(early_config, args)
    if message:
        raise pytest.UsageError(message + explain_pointer(message))


def pytest_configure(config: pytest.Config) -> None:
    from harness.plugin import fixtures

    if not config.pluginmanager.is_registered(fixtures):
        config.pluginmanager.register(fixtures, "carbon_harness_fixtures")
    config.addinivalue_line("markers", f"{FIXED_SHAPE_MARK}(name, ...): the compiled shape(s) a test runs at whatever "
                            "--carbon-shape says; with --carbon-shape given and none of them selected, it is deselected")
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
        "cpu_threads": config.getoption("carbon_cpu_threads"),
        "neuron_cpu": config.getoption("carbon_neuron_cpu"), "nxdi_source": config.getoption("carbon_nxdi_source"),
        "drafts": config.getoption("carbon_drafts"),
        "speculation_length": config.getoption("carbon_speculation_length"),
        "endpoint": config.getoption("carbon_endpoint"), "served_model": config.getoption("carbon_served_model"),
        "serve": config.getoption("carbon_serve"), "serve_timeout": config.getoption("carbon_serve_timeout"),
        "hf_compile": config.getoption("carbon_hf_compile"),
        "work_counts": config.getoption("carbon_work_counts"),
    }
    try:
        harness_config = make_config(options, Path(str(config.rootpath)))
        from harness.session.preflight import check_backend_available
        from harness.session.workers import assign_worker_cores, limit_torch_threads

        assign_worker_cores(harness_config, os.environ.get("PYTEST_XDIST_WORKER", "master"))
        limit_torch_threads(harness_config)
        check_backend_available(harness_config, connect=not config.option.collectonly)
    except (ValueError, OSError, BackendError) as exc:
        raise pytest.UsageError(f"carbon-harness: {exc}{explain_pointer(exc)}") from None
    config.stash[SESSION_KEY] = Session(harness_config, progress=terminal_progress(config))


def register_benchmark_hooks(config: pytest.Config) -> None:
    """pytest-benchmark measured under pytest-xdist too, and --benchmark-json written atomically."""
    from harness.plugin.benchmark_hooks import BenchmarkHooks

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
    lines = [
        f"carbon-harness: backend={cfg.backend} device={cfg.device} dtype={cfg.dtype} hardware={cfg.hardware_name}"
        + (" compile=static cache + torch.compile decode" if cfg.hf_compile else ""),
        f"carbon-harness: models={models}",
        f"carbon-harness: shapes={', '.join(s.name for s in cfg.shapes)} runs={cfg.runs} warmup={cfg.warmup} "
        f"thresholds={len(cfg.thresholds)} from {', '.join(cfg.threshold_files) or 'none'} cache={cfg.cache_dir}",
    ] + ([f"carbon-harness: serving endpoint={cfg.endpoint or 'none'} serve={cfg.serve or 'none'}"]
         if cfg.endpoint or cfg.serve else [])
    from harness.session.preflight import nxdi_tier_line

    return [*lines, nxdi_tier_line(cfg)]


RELEASE_SKIP = ("release checks run under -m release (nox -s release-check): each is a whole carbon-harness "
                "release-check, a minute or more")


FIXED_SHAPE_MARK = "fixed_shape"
SHAPE_PARAMS = ("carbon_shape", "scan_shape")  # the generation tests' shape; test_scan's, from --carbon-shape scan-*


def item_shapes(item: pytest.Item) -> set[str]:
    """The shapes a test runs at: its ``fixed_shape`` marks and its ``SHAPE_PARAMS`` parameters
    (unit tests with a ``shape`` parameter of their own are not measurements at a shape)."""
    shapes = {str(name) for mark in item.iter_markers(FIXED_SHAPE_MARK) for name in mark.args}
    params = getattr(getattr(item, "callspec", None), "params", {})
    for key in SHAPE_PARAMS:
        if key in params:
            name = getattr(params[key], "name", params[key])
            if isinstance(name, str):
                shapes.add(name)
    return shapes


def deselected_by_shape(shapes: set[str], selected: set[str] | None) -> bool:
    """With --carbon-shape given (``selected``), a test at shapes of its own none of which was
    selected does not run; by default every shape's tests run."""
    return selected is not None and bool(shapes) and not shapes & selected


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Release checks run whole suites in subprocesses: only when ``-m`` asks for them. Tests at a
    shape that --carbon-shape did not select are deselected (counted in the summary, and never
    compiled for), not skipped."""
    from harness.plugin.recording import marker_selected

    session = config.stash.get(SESSION_KEY, None)
    if session is not None and config.getoption("carbon_shapes"):
        selected = {s.name for s in session.config.shapes}
        dropped = [item for item in items if deselected_by_shape(item_shapes(item), selected)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            gone = set(map(id, dropped))
            items[:] = [item for item in items if id(item) not in gone]
    if marker_selected(config.option.markexpr, "release"):
        return
    for item in items:
        if item.get_closest_marker("release") is not None:
            item.add_marker(pytest.mark.skip(reason=RELEASE_SKIP))


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
        metafunc.parametrize("carbon_shape", generation_shape_params(session.config.shapes), scope="session")
    if "carbon_draft" in metafunc.fixturenames:
        drafts = session.config.drafts
        metafunc.parametrize("carbon_draft", drafts, ids=[f"with-{d.label}" for d in drafts], scope="session")


def generation_shape_params(shapes: list) -> list:
    """``carbon_shape`` parameters: a scoring shape (prefill only, no decode step) given to
    --carbon-shape is skipped by the generation tests, saying where it is measured, instead of
    failing them on a shape they cannot run."""
    from harness.core.spec import SCORING_SHAPES

    return [pytest.param(s, id=s.name, marks=pytest.mark.skip(
        reason=f"shape {s.name} is a scoring shape (prefill only, no decode): tests/perf/test_scoring.py measures it; "
               "generation tests run on smoke, report-bs1, a100-style-bs16 or dna-suite-bs1"))
            if s.name in SCORING_SHAPES else pytest.param(s, id=s.name) for s in shapes]


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        from harness.analysis.results import RESULTS_SCHEMA

        machine_info["carbon_harness"] = {"schema": RESULTS_SCHEMA, **run_manifest(session)}


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Figures that had a reference on other hardware but no threshold here were not gated, and
    tiers that were skipped (with what would enable each): say so. (What the run gated is its last
    line: ``pytest_sessionfinish``.)"""
    from harness.plugin.tiers import skipped_tiers

    for where, missing in config.stash.get(UNGATED_KEY, []):
        metrics = ", ".join(f"{m} (thresholds only for {', '.join(hw)})" for m, hw in missing.items())
        terminalreporter.write_line(f"carbon-harness: NOT GATED {where}: {metrics}", yellow=True)
    reasons = [str(r.longrepr[2]) for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and len(r.longrepr) == 3]
    for line in skipped_tiers(reasons):
        terminalreporter.write_line(f"carbon-harness: {line}")
    from harness.backends.neuron.stubs import stub_calls_line

    stubbed = stub_calls_line()  # the NxDI CPU tier ran: which Neuron-only stubs it called
    if stubbed is not None:
        terminalreporter.write_line(stubbed)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """After pytest's summary, the run's last lines: --carbon-require-gates failing a run that gated
    no figure, then what the run gated (``harness.plugin.gate_summary``; none where it recorded no figure)."""
    result = yield
    from harness.plugin.gate_summary import reports_tally, require_gates_failure, run_tally

    config = session.config
    carbon = config.stash.get(SESSION_KEY, None)
    if carbon is not None and reports_tally(config):
        tally = run_tally(config)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        line = require_gates_failure(config, tally, carbon.config.hardware_name)
        if line is not None:
            if reporter is not None:
                reporter.write_line(line, red=True, bold=True)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None and tally.recorded:
            reporter.write_line(tally.line(), red=bool(tally.failed), yellow=not tally.gated and not tally.failed)
    return result
