"""The engines of a session: built once per (model, shape) on first use, reused by every test,
closed at the end; on a Neuron device, unloaded least recently used first when the next one would
not fit in HBM beside them."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from harness.backends import make_engine
from harness.backends.base import Engine
from harness.carbon.checkpoint import cached_checkpoint, stderr_progress
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.hardware import HardwareProfile, complete_profile, get_profile
from harness.core.load import snapshot as load_snapshot
from harness.core.spec import MODELS, SCORING_SHAPES, RunShape
from harness.session.config import HarnessConfig, ModelRef, served_dtype
from harness.session.servers import Servers


def engines_to_unload(resident: list[tuple[Any, float | None]], new_bytes: float | None,
                      budget: float | None) -> list[Any]:
    """Which resident engines (least recently used first, with their planned bytes per rank) to
    close so that the next one fits the per-rank HBM ``budget``. Unknown sizes are not guessed:
    with one, everything resident is closed. No budget (not a device): nothing is closed."""
    if budget is None:
        return []
    if new_bytes is None or any(b is None for _, b in resident):
        return [k for k, _ in resident]
    total = new_bytes + sum(b for _, b in resident if b is not None)
    out = []
    for k, b in resident:
        if total <= budget:
            break
        out.append(k)
        total -= b or 0.0
    return out


class EnginePool:
    """Engines built once per key on first use and closed together: the session's, and those the
    test suites build beside it (the NxDI CPU tier's, the fp32 transformers references). Most
    recently used last, so the least recently used can be unloaded first."""

    def __init__(self) -> None:
        self._engines: dict[Hashable, Engine] = {}

    def get(self, key: Hashable, build: Callable[[], Engine], touch: bool = True) -> Engine:
        """The engine of ``key``, built on first use; ``touch``: count this use for recency."""
        if key in self._engines:
            if touch:
                self._engines[key] = self._engines.pop(key)
        else:
            self._engines[key] = build()
        return self._engines[key]

    def items(self) -> list[tuple[Hashable, Engine]]:
        """Least recently used first."""
        return list(self._engines.items())

    def unload(self, key: Hashable) -> None:
        self._engines.pop(key).close()

    def close(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()


class Session:
    """The engines of a session, built once per (model, shape) and closed at the end. On a Neuron
    device, engines that would not fit in HBM beside the next one are closed first (several 8B
    shapes do not fit together); pytest groups tests by model and shape, so that is rare."""

    def __init__(self, config: HarnessConfig, progress: Callable[[str], None] = stderr_progress) -> None:
        self.config = config
        self.progress = progress
        self._engines = EnginePool()
        self._checkpoints: dict[str, Path] = {}
        self._tokenizers: dict[str, CarbonTokenizer] = {}
        self._hardware: HardwareProfile | None = None
        self.load_log: list[dict[str, Any]] = []
        self.servers = Servers(config, self.checkpoint, progress)
        self.load_start = load_snapshot()  # how busy the box is while this session measures (run manifest)

    @property
    def hardware(self) -> HardwareProfile:
        """The hardware profile; a CPU's bandwidth is measured here, once per session."""
        if self._hardware is None:
            self._hardware = complete_profile(get_profile(self.config.hardware_name))
        return self._hardware

    def checkpoint(self, ref: ModelRef) -> Path:
        if ref.label not in self._checkpoints:
            self._checkpoints[ref.label] = ref.path or cached_checkpoint(ref.label, self.config.cache_dir,
                                                                         progress=self.progress)
        return self._checkpoints[ref.label]

    def tokenizer(self, ref: ModelRef) -> CarbonTokenizer:
        if ref.label not in self._tokenizers:
            self._tokenizers[ref.label] = CarbonTokenizer.from_checkpoint(self.checkpoint(ref))
        return self._tokenizers[ref.label]

    def _planned_bytes(self, label: str, shape: RunShape) -> float | None:
        """HBM bytes per rank of a neuron engine (weights + KV cache; doubled once the output-logits
        build of the same shape is loaded beside it), None when its architecture is unknown."""
        from harness.core.plan import make_plan

        spec = MODELS.get(label)
        if spec is None:
            return None
        plan = make_plan(spec, shape, self.hardware)
        return plan.weight_bytes_per_rank + plan.kv_bytes_per_rank

    def _make_room(self, ref: ModelRef, shape: RunShape) -> None:
        if self.config.backend != "neuron" or self.config.neuron_cpu:
            return
        budget = self.hardware.per_core(self.hardware.memory_bytes)
        resident = []
        for (label, shape_name), engine in self._engines.items():
            planned = self._planned_bytes(label, engine.shape)
            copies = 2 if getattr(engine, "_logits_model", None) is not None else 1
            resident.append(((label, shape_name), None if planned is None else planned * copies))
        for key in engines_to_unload(resident, self._planned_bytes(ref.label, shape), budget):
            self.progress(f"unloading {key[0]}/{key[1]}: it and {ref.label}/{shape.name} do not fit in HBM together")
            self._engines.unload(key)

    def _make_engine(self, path: Path, shape: RunShape, label: str) -> Engine:
        cfg = self.config
        # a server this session starts runs the dtype it was started with (fp32 unless --carbon-dtype says)
        dtype = served_dtype(cfg.dtype) if cfg.backend == "openai" and cfg.serve == "vllm" else cfg.dtype
        return make_engine(cfg.backend, path, shape, label, device=cfg.device, dtype=dtype, cache_dir=cfg.cache_dir,
                           variants=cfg.variants, hardware=cfg.hardware_name, neuron_cpu=cfg.neuron_cpu,
                           nxdi_source=cfg.nxdi_source, endpoint=self._endpoint_for(path, shape),
                           hf_compile=cfg.hf_compile)

    def _endpoint_for(self, checkpoint: Path, shape: RunShape) -> Any:
        """The openai backend's server: on a scoring shape the scoring server (``Servers.scoring_endpoint``),
        else the session's endpoint; None on the other backends."""
        if self.config.backend != "openai":
            return None
        return self.scoring_endpoint(checkpoint) if shape.name in SCORING_SHAPES else self.endpoint()

    def engine(self, ref: ModelRef, shape: RunShape) -> Engine:
        return self._engines.get((ref.label, shape.name), lambda: self._load(ref, shape))

    def _load(self, ref: ModelRef, shape: RunShape) -> Engine:
        self._make_room(ref, shape)
        path = self.checkpoint(ref)
        self.progress(f"loading {ref.label} ({self.config.backend}, shape {shape.name}) from {path}")
        start = time.perf_counter()
        engine = self._make_engine(path, shape, ref.label)
        self.load_log.append({"model": ref.label, "shape": shape.name, "load_s": engine.info.load_s,
                              "compile_s": engine.info.compile_s, "compile": engine.info.extra.get("compile"),
                              "dtype": engine.info.dtype, "config": engine.info.extra.get("engine_config"),
                              "total_s": time.perf_counter() - start})
        self.progress(f"loaded {ref.label}/{shape.name} in {engine.info.load_s:.2f} s"
                      + (" (weights reused from an earlier shape)" if engine.info.extra.get("shared_weights") else ""))
        return engine

    def draft_engine(self, draft: ModelRef, target: ModelRef, shape: RunShape) -> Engine:
        """The speculative draft's engine for a target: its own engine (own KV cache) even when the
        draft is the target itself (``self``; on hf the two share one copy of the weights)."""
        ref = target if draft.label == "self" else draft

        def load() -> Engine:
            path = self.checkpoint(ref)
            self.progress(f"loading draft {ref.label} for {target.label} ({self.config.backend}, shape {shape.name})")
            engine = self._make_engine(path, shape, ref.label)
            self.load_log.append({"model": ref.label, "shape": shape.name, "role": "draft", "target": target.label,
                                  "load_s": engine.info.load_s, "compile_s": engine.info.compile_s})
            return engine

        return self._engines.get((f"draft:{draft.label}:{target.label}", shape.name), load, touch=False)

    def endpoint(self) -> Any:
        """The serving endpoint (``Servers.endpoint``)."""
        return self.servers.endpoint()

    def speculative_endpoint(self, draft: ModelRef) -> Any:
        """A vLLM server with ``draft`` as its speculative draft (``Servers.speculative_endpoint``)."""
        return self.servers.speculative_endpoint(draft)

    def stop_speculative_server(self) -> None:
        self.servers.stop_speculative_server()

    def scoring_endpoint(self, checkpoint: Path) -> Any:
        """Where the openai backend scores ``checkpoint`` (``Servers.scoring_endpoint``)."""
        return self.servers.scoring_endpoint(checkpoint)

    @property
    def server(self) -> Any:
        """The server this session started (a VLLMServer), or None."""
        return self.servers.server

    def close(self) -> None:
        self._engines.close()
        self.servers.close()
