"""Compile and load time of the neuron backend, and of the transformers backend under
--carbon-hf-compile: recorded, and gated where a thresholds file bounds them. The trn2 files do not:
the reference runs' figures (fixtures/reference/trn2.3xlarge-sdk2.29.json) were taken without
save_sharded_checkpoint, which the harness sets; re-baseline from a run of your own."""

from __future__ import annotations

import pytest

from harness.backends.base import Batch
from harness.plugin.recording import engine_context

pytestmark = pytest.mark.perf


@pytest.mark.neuron
def test_compile_and_load(benchmark, carbon_neuron_session, carbon_model, carbon_shape, carbon_gate):
    engine = carbon_neuron_session.engine(carbon_model, carbon_shape)
    info = engine.info
    benchmark.group = f"compile-{carbon_shape.name}"
    benchmark.pedantic(lambda: None, rounds=1)  # the figures come from the session's one compile and load
    # pytest-benchmark's own timing here is of a no-op: compare shows it, never gates it
    benchmark.extra_info["informational"] = ["median_s"]
    figures = {"load_s": info.load_s}
    if info.compile_s is not None:  # None: loaded from the artifact cache, nothing was compiled
        figures["compile_s"] = info.compile_s
    assert all(v > 0 for v in figures.values())
    carbon_gate(benchmark, model=info.model, shape=carbon_shape.name, figures=figures,
                context={"artifact_key": info.extra.get("artifact_key"), "cached": info.compile_s is None})


def test_hf_compile_time(request, benchmark, carbon_session, carbon_model, carbon_shape, carbon_gate):
    """--carbon-hf-compile: the seconds the engine's load spent compiling its decode step (and recording
    its CUDA graph on a GPU) at the shape's batch size, a figure beside the load time."""
    if not carbon_session.config.hf_compile:
        pytest.skip("the transformers backend compiles only under --carbon-hf-compile")
    carbon_engine = request.getfixturevalue("carbon_engine")
    info = carbon_engine.info
    benchmark.group = f"compile-{info.shape}"
    benchmark.pedantic(lambda: None, rounds=1)  # the figure comes from the engine's one compile at load
    benchmark.extra_info["informational"] = ["median_s"]
    assert info.compile_s is not None and info.compile_s > 0
    row = Batch.from_ids([[0]] * carbon_engine.shape.batch_size)
    carbon_gate(benchmark, model=info.model, shape=info.shape, figures={"compile_s": info.compile_s},
                context=engine_context(carbon_engine, carbon_session.hardware.name, row, 0))
