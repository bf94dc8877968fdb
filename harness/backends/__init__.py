"""Backends: one Engine class per runtime, created through ``make_engine``.

Only ``backends/neuron/`` may import NxDI / torch_neuronx, and only lazily, so every backend
module imports on any machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import BackendError
from harness.core.options import BACKENDS
from harness.core.spec import RunShape

if TYPE_CHECKING:  # the package imports no torch: a submodule (neuron.sources) is read by torch-free commands
    from harness.backends.base import Engine


def make_engine(backend: str, checkpoint: Path, shape: RunShape, model_name: str, device: str = "auto",
                dtype: str = "auto", cache_dir: Path | None = None, variants: tuple[str, ...] = (),
                hardware: str = "trn2.3xlarge", neuron_cpu: bool = False, nxdi_source: Path | None = None,
                endpoint: Any = None, hf_compile: bool = False) -> Engine:
    if backend == "hf":
        from harness.backends.hf import HFEngine

        if variants:
            raise BackendError(f"variants {list(variants)} are NxDI compile options: use them with --carbon-backend neuron")
        if hf_compile:
            from harness.backends.hf_compiled import CompiledHFEngine

            return CompiledHFEngine(checkpoint, shape, model_name, device=device, dtype=dtype)
        return HFEngine(checkpoint, shape, model_name, device=device, dtype=dtype)
    if hf_compile:
        raise BackendError(f"--carbon-hf-compile compiles the transformers backend, not {backend!r}: use it with "
                           "--carbon-backend hf")
    if backend == "neuron":
        from harness.backends.neuron.engine import NeuronEngine

        return NeuronEngine(checkpoint, shape, model_name, cache_dir=cache_dir, variants=variants, hardware=hardware,
                            cpu=neuron_cpu, nxdi_source=nxdi_source, dtype=dtype)
    if backend == "openai":
        from harness.backends.openai import OpenAIEngine

        if endpoint is None:
            raise BackendError("the openai backend needs an endpoint: --carbon-endpoint URL or --carbon-serve vllm")
        return OpenAIEngine(endpoint, shape, model_name, checkpoint=str(checkpoint),
                            dtype="server" if dtype == "auto" else dtype)
    raise BackendError(f"unknown backend {backend!r}; known backends: {', '.join(BACKENDS)}")
