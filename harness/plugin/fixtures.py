"""Fixtures the plugin provides.

Engines are built once per (model, shape) per session by ``harness.session.engines.Session`` and reused
by every test; synthetic checkpoints once per cache directory, across sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.gates import NO_THRESHOLD, NOT_GATED_KEY, evaluate, ungated
from harness.backends.base import Engine
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.metrics import METRICS, compiled_label
from harness.core.spec import DEFAULT_MODEL, SCORING_SHAPES, RunShape, get_shape
from harness.plugin.keys import SESSION_KEY, UNGATED_KEY
from harness.plugin.recording import figure_rounds, short_reason, speed_gate_exemption
from harness.session.config import ModelRef
from harness.session.engines import EnginePool, Session


@pytest.fixture(scope="session")
def carbon_session(pytestconfig: pytest.Config) -> Session:
    return pytestconfig.stash[SESSION_KEY]


@pytest.fixture(scope="session")
def carbon_cache_dir(carbon_session: Session) -> Path:
    """Where built checkpoints and compiled artifacts live across sessions."""
    return carbon_session.config.cache_dir


@pytest.fixture(scope="session")
def carbon_tokenizer() -> CarbonTokenizer:
    """The builtin tokenizer (published case policy "upper")."""
    return CarbonTokenizer.builtin()


@pytest.fixture(scope="session")
def carbon_tiny_checkpoint(carbon_session: Session) -> Path:
    """The embedded default checkpoint, built into the cache on first use (progress shown)."""
    return carbon_session.checkpoint(ModelRef(DEFAULT_MODEL, None, False))


@pytest.fixture
def carbon_engine(carbon_session: Session, carbon_model: ModelRef, carbon_shape: RunShape) -> Engine:
    """The session's engine for this test's model and shape (built on first use)."""
    skip_static_batch(carbon_session)
    engine = carbon_session.engine(carbon_model, carbon_shape)
    engine.reset()
    return engine


@pytest.fixture
def carbon_generator(carbon_session: Session, carbon_model: ModelRef, carbon_shape: RunShape) -> Engine:
    """The session's engine for this test's model and shape where only generation and scoring are asked
    of it: on every backend, a server included (its static batch goes as concurrent requests)."""
    if carbon_shape.name in SCORING_SHAPES:
        pytest.skip(f"{carbon_shape.name!r} is a scoring shape: it generates nothing")
    engine = carbon_session.engine(carbon_model, carbon_shape)
    engine.reset()
    return engine


@pytest.fixture
def carbon_engine_for(carbon_session: Session, carbon_model: ModelRef) -> Callable[[str], Engine]:
    """The session's engine for this test's model at a named shape (the suites have their own; a server
    runs only the scoring shapes, which time no static-batch step)."""

    def get(shape: str) -> Engine:
        if shape not in SCORING_SHAPES:
            skip_static_batch(carbon_session)
        engine = carbon_session.engine(carbon_model, get_shape(shape))
        engine.reset()
        return engine

    return get


def skip_static_batch(session: Session) -> None:
    """The static-batch perf tests time a compiled batch's CTE / TKG steps; a server has none."""
    if session.config.backend == "openai":
        pytest.skip("--carbon-backend openai: a server has no separate prefill / decode step to time; "
                    "the serving benchmarks (tests/serving, -m serving) measure TTFT / ITL instead")


def serving_asked_for(config: pytest.Config, session: Session) -> list[str]:
    """The options by which this run asked for serving: ``-m`` selecting serving, --carbon-serve,
    --carbon-endpoint (empty when it did not)."""
    from harness.plugin.recording import marker_selected

    cfg = session.config
    asked = [f"-m {config.option.markexpr!r}"] if marker_selected(config.option.markexpr, "serving") else []
    asked += [f"--carbon-serve {cfg.serve}"] if cfg.serve else []
    return asked + ([f"--carbon-endpoint {cfg.endpoint}"] if cfg.endpoint else [])


def require_serving_client(config: pytest.Config, session: Session) -> None:
    """aiohttp, the serving client's one dependency. Missing, a test that needs it skips, unless the
    run asked for serving: then it errors, since a skip would pass a run that tested none of it."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        from harness.serving.client import INSTALL_HINT

        asked = serving_asked_for(config, session)
        if asked:
            pytest.fail(f"this run asked for serving ({', '.join(asked)}) but aiohttp, the serving client, is not "
                        f"installed: {INSTALL_HINT}", pytrace=False)
        pytest.skip(f"the serving client needs aiohttp: {INSTALL_HINT}")


@pytest.fixture(scope="session")
def carbon_serving_client(carbon_session: Session, pytestconfig: pytest.Config) -> None:
    """For tests that run the serving client without a server of the session's (tests/serving/test_failures.py)."""
    require_serving_client(pytestconfig, carbon_session)


@pytest.fixture(scope="session")
def carbon_endpoint(carbon_session: Session, pytestconfig: pytest.Config) -> Any:
    """The session's OpenAI-compatible server (``harness.serving.client.Endpoint``): the one at
    --carbon-endpoint, or a vLLM server started once on the first model (--carbon-serve vllm) and
    stopped at the end. Skips saying what to pass or install when there is none; fails with the end
    of the server's log when it does not come up."""
    cfg = carbon_session.config
    if not (cfg.endpoint or cfg.serve):
        from harness.serving.server import VLLM_INSTALL_HINT

        pytest.skip(f"serving tests need --carbon-serve vllm (with {VLLM_INSTALL_HINT})")
    if cfg.serve == "vllm":
        from harness.serving.server import VLLM_INSTALL_HINT, vllm_python

        if vllm_python() is None:
            pytest.skip(f"--carbon-serve vllm: vllm is not installed in this Python; needs {VLLM_INSTALL_HINT} "
                        "(or set CARBON_VLLM_PYTHON to a Python that has it)")
    require_serving_client(pytestconfig, carbon_session)
    from harness.serving.client import ServingError
    from harness.serving.server import ServerError

    try:
        return carbon_session.endpoint()
    except (ServerError, ServingError) as exc:
        pytest.fail(f"serving endpoint unavailable: {exc}", pytrace=False)


@pytest.fixture
def carbon_model_tokenizer(carbon_session: Session, carbon_model: ModelRef) -> CarbonTokenizer:
    """The tokenizer of this test's checkpoint (its own tokenizer.json and dna_config.json)."""
    return carbon_session.tokenizer(carbon_model)


@pytest.fixture
def carbon_gate(carbon_session: Session, pytestconfig: pytest.Config) -> Callable[..., None]:
    """Record figures in a benchmark's extra_info and gate them against the session's thresholds.

    Fails the test naming metric, measured value, threshold and baseline when a figure crosses
    its threshold; records ``"gate": "no threshold"`` where none applies, and in ``"not_gated"`` each
    figure it could not gate (the end-of-run tally counts them: ``harness.analysis.gates.tally_gates``).
    A speed is gated only under ``-m perf`` and from at least two rounds (``rounds``: what the figures
    were computed over, when not the benchmark's own timed rounds); otherwise it is recorded as
    ``"not gated: ..."`` (``harness.plugin.recording.speed_gate_exemption``). A compiled engine's figures
    (its context carries ``compile``: --carbon-hf-compile) gate under ``<shape>-compiled``.
    """

    def gate(benchmark: Any, *, model: str, shape: str, figures: Mapping[str, Any],
             context: Mapping[str, Any] | None = None, rounds: int | None = None) -> None:
        hardware = carbon_session.hardware.name
        if (context or {}).get("compile"):
            shape = compiled_label(shape)
        benchmark.extra_info.update({"hardware": hardware, **(context or {}), **figures})
        results = evaluate(carbon_session.config.thresholds, hardware, model, shape, figures)
        # speed only under -m perf and from enough rounds (harness.plugin.recording.speed_gate_exemption)
        n = figure_rounds(benchmark, rounds)
        exempt = {r.metric: why for r in results
                  if (why := speed_gate_exemption(r.metric, n, pytestconfig.option.markexpr)) is not None}
        results = [r for r in results if r.metric not in exempt]
        missing = ungated(carbon_session.config.thresholds, hardware, model, shape, figures)
        if missing:  # a reference exists elsewhere but nothing gates it here: say so, in the JSON and at the end
            benchmark.extra_info["ungated"] = missing
            pytestconfig.stash.setdefault(UNGATED_KEY, []).append((f"{model}/{shape} on {hardware}", missing))
        gated = {r.metric for r in results}
        benchmark.extra_info["gated_as"] = {"hardware": hardware, "model": model, "shape": shape}
        benchmark.extra_info[NOT_GATED_KEY] = {m: NO_THRESHOLD for m, v in figures.items() if m in METRICS
                                               and isinstance(v, (int, float)) and m not in gated}
        benchmark.extra_info[NOT_GATED_KEY].update({m: short_reason(why) for m, why in exempt.items()})
        if not results:
            benchmark.extra_info["gate"] = "; ".join(sorted(set(exempt.values()))) or NO_THRESHOLD
            return
        benchmark.extra_info["gate"] = {r.metric: {"value": r.value, "bound": r.threshold.bound,
                                                   "kind": r.threshold.kind, "baseline": r.threshold.baseline,
                                                   "passed": r.passed} for r in results}
        failed = [r.message() for r in results if not r.passed]
        if failed:
            pytest.fail(f"{model}/{shape} on {hardware}: " + "; ".join(failed), pytrace=False)

    return gate


NXDI_TIER_SKIP = ("the NxDI CPU tier needs NxDI: pass --carbon-nxdi-source DIR (an NxDI source tree: "
                  "carbon-harness nxdi-source 2.29.0 fetches one and prints its directory) in a transformers 4.57 "
                  "environment (nox -s trn2-stack)")


@pytest.fixture(scope="session")
def carbon_neuron_session(carbon_session: Session) -> Session:
    """The session, when it runs the neuron backend on a Trainium2 device; device-only tests
    (compile, load, HBM, device timing) skip otherwise, saying what is missing."""
    if carbon_session.config.backend != "neuron" or carbon_session.config.neuron_cpu:
        from harness.backends.neuron.host import neuron_unavailable_reason

        reason = neuron_unavailable_reason() or "this host could run it"
        mode = " (NxDI's CPU mode has no compile or load)" if carbon_session.config.neuron_cpu else ""
        pytest.skip(f"needs --carbon-backend neuron on a Trainium2 host with --carbon-model-root DIR of real "
                    f"checkpoints{mode} ({reason})")
    return carbon_session


@pytest.fixture(scope="session")
def nxdi_cpu(carbon_session: Session) -> Any:
    """NxDI imported for its own CPU mode (only the Neuron-only packages stubbed): from
    --carbon-nxdi-source or the installed package. Skips when neither is there; a given NxDI that
    cannot be imported fails, with its error."""
    import importlib.util

    from harness.core.errors import BackendError
    from harness.session.preflight import import_nxdi_for_cpu

    source = carbon_session.config.nxdi_source
    if source is None and importlib.util.find_spec("neuronx_distributed_inference") is None:
        pytest.skip(NXDI_TIER_SKIP)
    try:
        return import_nxdi_for_cpu(source)
    except BackendError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def carbon_engine_pool() -> Iterator[EnginePool]:
    """Engines the test suites build beside the session's (NxDI CPU mode, fp32 transformers
    references), each once per key, closed at the end of the session."""
    pool = EnginePool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def nxdi_cpu_engine(nxdi_cpu: Any, carbon_session: Session, carbon_tiny_checkpoint: Path,
                    carbon_engine_pool: EnginePool) -> Callable[..., Engine]:
    """NxDI CPU-mode engines on the embedded default, one per (shape, variants), built on first use."""
    from harness.backends.neuron.engine import NeuronEngine

    def build(shape: RunShape, variants: tuple[str, ...]) -> Engine:
        carbon_session.progress(f"building carbon-tiny in NxDI CPU mode (shape {shape.name}, "
                                f"batch {shape.batch_size}{', ' + ', '.join(variants) if variants else ''})")
        return NeuronEngine(carbon_tiny_checkpoint, shape, DEFAULT_MODEL, variants=variants, hardware="cpu",
                            cpu=True, nxdi_source=carbon_session.config.nxdi_source)

    def get(shape: RunShape, variants: tuple[str, ...] = ()) -> Engine:
        engine = carbon_engine_pool.get(("nxdi-cpu", shape, variants), lambda: build(shape, variants))
        engine.reset()
        return engine

    return get


@pytest.fixture
def carbon_neuron_engine(request: pytest.FixtureRequest, carbon_session: Session, carbon_model: ModelRef,
                         carbon_shape: RunShape) -> Engine:
    """The neuron engine for this test's model and shape: the session's own under --carbon-backend
    neuron (a device, or NxDI's CPU mode with --carbon-neuron-cpu); otherwise the NxDI CPU tier on
    the embedded default. Skips saying what to provide when neither can run."""
    if carbon_session.config.backend == "neuron":
        return carbon_session.engine(carbon_model, carbon_shape)
    if carbon_model.label != DEFAULT_MODEL or carbon_model.real:
        pytest.skip(f"the NxDI CPU tier runs the embedded default {DEFAULT_MODEL} only; {carbon_model.label} needs "
                    "--carbon-backend neuron (on a Trainium2 host, or with --carbon-neuron-cpu)")
    return request.getfixturevalue("nxdi_cpu_engine")(carbon_shape)
