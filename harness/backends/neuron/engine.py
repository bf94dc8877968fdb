"""``NeuronEngine``: NxDI's Llama through its public API, on a Trainium2 device or in NxDI's CPU mode.

Both modes share every code path but compile / load: prefill and decode steps,
``HuggingFaceGenerationAdapter.generate``, teacher-forced logits, ``reset()``, the per-sub-model
latency hooks and the GQA log. A build that cannot generate fails at load (``smoke_generate``).
On a scoring shape (``SCORING_SHAPES``) the engine holds the scoring build alone
(``harness.backends.neuron.scoring``: the 6-mer head at every position), and generates nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from harness.backends.base import Batch, Engine, EngineInfo, GenerationResult, Selector
from harness.backends.neuron.artifacts import (
    KEY_FILE,
    SHARDING_FILE,
    capture_neuron_logs,
    check_sharding,
    compile_env_key,
    compile_work_dir,
    compiled_dir_problem,
    environment,
    load_sharding_log,
    neuron_artifact_key,
    neuron_versions,
    nxdi_build,
    parse_sharding_log,
    save_sharding_log,
    touch_last_used,
)
from harness.backends.neuron.batching import (
    adapter_generate_kwargs,
    check_prompt_lengths,
    decode_attention_mask,
    eos_generate,
    generated_tokens,
    pad_rows,
    prefill_positions,
    smoke_generate,
)
from harness.backends.neuron.config import (
    NOT_ON_CPU,
    check_compile_variants,
    inference_config_kwargs,
    neuron_config_kwargs,
    scoring_neuron_config_kwargs,
    variant_env,
)
from harness.backends.neuron.describe import build_record
from harness.backends.neuron.host import neuron_unavailable_reason
from harness.backends.neuron.scoring import SCORING_HEAD, check_scoring_kwargs, scoring_model_class
from harness.core.errors import BackendCannot, BackendError
from harness.core.measure import Timer
from harness.core.ports import free_port
from harness.core.spec import MODELS, SCORING_SHAPES, ArtifactKey, RunShape


class SubmodelLatency:
    """Per-sub-model latency, collected with forward hooks as NxDI's ``utils/benchmark.py`` does
    (its LatencyCollector uses time.time(); perf_counter here)."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._start = 0.0
        self._handles: list[Any] = []

    def pre_hook(self, *_: Any) -> None:
        self._start = time.perf_counter()

    def hook(self, *_: Any) -> None:
        self.ms.append((time.perf_counter() - self._start) * 1000.0)

    def attach(self, module: Any) -> None:
        self._handles = [module.register_forward_pre_hook(self.pre_hook), module.register_forward_hook(self.hook)]

    def detach(self) -> None:
        """Remove the hooks (to measure what they cost: ``tests/perf/test_hook_overhead.py``)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


def checkpoint_config(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's config.json (NxDI reads it again to build the model; a bad one fails there)."""
    try:
        config = json.loads((Path(checkpoint) / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BackendError(f"cannot read {Path(checkpoint) / 'config.json'}: {exc}") from None
    return config if isinstance(config, dict) else {}


def nxdi_model(checkpoint: Path, kwargs: Mapping[str, Any], model_cls: type | None = None) -> Any:
    """NxDI's Llama (or ``model_cls``, a subclass of it) for a checkpoint, configured as the reference
    runs (not yet compiled or moved)."""
    from neuronx_distributed_inference.models.config import NeuronConfig
    from neuronx_distributed_inference.models.llama.modeling_llama import LlamaInferenceConfig, NeuronLlamaForCausalLM
    from neuronx_distributed_inference.utils.hf_adapter import load_pretrained_config

    config = LlamaInferenceConfig(NeuronConfig(**kwargs), load_config=load_pretrained_config(str(checkpoint)),
                                  **inference_config_kwargs())
    return (model_cls or NeuronLlamaForCausalLM)(str(checkpoint), config)


def check_cpu_mode_logits_build(model: Any) -> None:
    """NxDI's CPU mode copies the KV cache back after each call (``_copy_past_key_values``), skipping
    any captured tensors by ``_get_captured_tensors_offset()``. NxDI 0.8.0 and the first 2.29
    publication (c63afe0) call it there without defining it on ``NeuronBaseForCausalLM``, so every
    model without on-device sampling (the scoring build) fails on its first call: said here, at load."""
    if not hasattr(model, "_get_captured_tensors_offset"):
        raise BackendError("this NxDI build cannot run a model without on-device sampling in CPU mode: its "
                           "_copy_past_key_values calls _get_captured_tensors_offset, which NeuronBaseForCausalLM does "
                           "not define (as in NxDI 0.8.0 and the first 2.29 publication); the scoring build needs "
                           "a later NxDI, or a Trainium2 device")


class NeuronEngine(Engine):
    """NxDI's Llama through its public API: compiled on a Trainium2 host (content-addressed cache),
    or in NxDI's CPU mode (``cpu=True``: ``to_cpu()`` instead of compile/load)."""

    scores_padded_batches = True  # its continuation_logits prefills and decodes a padded batch as it is

    def __init__(self, checkpoint: Path, shape: RunShape, model_name: str, cache_dir: Path | None = None,
                 variants: Iterable[str] = (), hardware: str = "trn2.3xlarge", cpu: bool = False,
                 nxdi_source: Path | None = None, dtype: str = "auto") -> None:
        if cpu:
            from harness.backends.neuron.sources import NeuronImportError
            from harness.backends.neuron.stubs import install

            try:
                install(nxdi_source)
            except NeuronImportError as exc:
                raise BackendError(str(exc)) from None
        else:
            reason = neuron_unavailable_reason()
            if reason:
                raise BackendError(f"the neuron backend cannot run here: {reason}")
        from neuronx_distributed_inference.utils.hf_adapter import HuggingFaceGenerationAdapter

        from harness.carbon.checkpoint import fingerprint
        from harness.core.hardware import get_profile
        from harness.core.plan import make_plan

        self.shape, self.cpu, self.checkpoint = shape, cpu, checkpoint
        self.variants = check_compile_variants(variants)
        unsupported = {v: NOT_ON_CPU[v] for v in self.variants if cpu and v in NOT_ON_CPU}
        if unsupported:
            raise BackendError(f"NxDI's CPU mode cannot run variants {unsupported}: measure them on a Trainium2 device")
        spec = MODELS.get(model_name)  # a checkpoint of unknown architecture is compiled without a plan
        if spec is not None:  # at the checkpoint's own positions (a YaRN-extended checkpoint holds more)
            spec = spec.at_checkpoint_positions(checkpoint_config(checkpoint))
        self.scoring_only = shape.name in SCORING_SHAPES
        if self.scoring_only:
            self.kwargs = scoring_neuron_config_kwargs(spec or "carbon-tiny", shape, self.variants, on_cpu=cpu,
                                                       dtype=None if dtype == "auto" else dtype)
            check_scoring_kwargs(self.kwargs)
        else:
            self.kwargs = neuron_config_kwargs(spec or "carbon-tiny", shape, self.variants, on_cpu=cpu,
                                               dtype=None if dtype == "auto" else dtype)
        planned = None
        if spec is not None:
            tp = self.kwargs["tp_degree"]
            plan = make_plan(spec, shape if tp == shape.tp_degree else replace(shape, tp_degree=tp),
                             get_profile(hardware))
            if not plan.context_fits:
                raise BackendError(plan.context_message())  # before any compile
            if plan.fits is False and not cpu:
                raise BackendError(plan.unfit_message())
            planned = plan.sharding
        self.build = nxdi_build()
        self.versions = {**neuron_versions(), **{k: v for k, v in self.build.items() if k.endswith("_sha256")}}
        self.fingerprint = fingerprint(checkpoint)
        self.cache_root = Path(cache_dir or "~/.cache/carbon-harness").expanduser() / "neuron"
        start = time.perf_counter()
        if self.scoring_only:
            made = self._make(self.kwargs, scoring_model_class(), {"scoring_head": SCORING_HEAD})
        else:
            made = self._make(self.kwargs)
        self.model, compile_s, key, artifact_dir, lines = made
        if self.scoring_only and cpu:
            check_cpu_mode_logits_build(self.model)
        load_s = time.perf_counter() - start - (compile_s or 0.0)
        records = load_sharding_log(artifact_dir / SHARDING_FILE) if artifact_dir is not None else None
        self.sharding_log = records if records is not None else parse_sharding_log(lines)
        extra = build_record(self.kwargs, self.variants, self.build, key, artifact_dir, self.sharding_log, cpu,
                             self.scoring_only, compile_s)
        # NxDI's own serialization of what it built (NeuronConfig, OnDeviceSamplingConfig, the model's
        # config), defaults included: a release check lists every field that differs between two sides
        extra["engine_config"] = json.loads(self.model.config.to_json_string())
        if planned is not None:
            extra["attention_sharding_planned"] = planned.strategy
            mismatch = check_sharding(planned, self.sharding_log)
            if mismatch:
                extra["attention_sharding_mismatch"] = mismatch
        self.cte, self.tkg = SubmodelLatency(), SubmodelLatency()
        self.cte.attach(self.model.context_encoding_model)
        self.tkg.attach(self.model.token_generation_model)
        self.adapter: Any = None
        if not self.scoring_only:
            self.adapter = HuggingFaceGenerationAdapter(self.model)
            smoke_generate(self.adapter, shape.batch_size)
        dtype = "fp32" if self.kwargs["torch_dtype"] == "float32" else "bf16"
        self.info = EngineInfo("neuron", model_name, str(checkpoint), shape.name, "cpu" if cpu else "neuron", dtype,
                               load_s, compile_s, extra=extra)
        self._logits_model: Any = None
        self._active: Any = self.model
        self._rows = 0
        self._positions: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None
        self._next: torch.Tensor | None = None
        self._steps = 0
        self._width = 0

    def _make(self, kwargs: dict[str, Any], model_cls: type | None = None, key_options: Mapping[str, str] | None = None
              ) -> tuple[Any, float | None, ArtifactKey | None, Path | None, list[str]]:
        """A ready model for these kwargs (and ``model_cls``, NxDI's Llama by default): CPU mode builds
        it in memory, a device compiles once into the cache and loads. ``key_options`` name what the
        class changes, so its artifact is keyed apart. Returns the model, compile seconds (None:
        nothing compiled), the artifact key and directory (None on CPU) and NxDI's log lines."""
        def make_model() -> Any:
            return nxdi_model(self.checkpoint, kwargs, model_cls)

        env = variant_env(self.variants)
        if self.cpu:
            if not torch.distributed.is_initialized():
                os.environ["MASTER_PORT"] = str(free_port())
            with environment(env), capture_neuron_logs() as lines:
                model = make_model()
                model.to_cpu()
            return model, None, None, None, lines

        from harness.core.storage import atomic_write_json, build_once

        key = neuron_artifact_key(self.fingerprint, self.shape, kwargs, self.versions, compile_env_key(self.variants),
                                  key_options)
        cache = self.cache_root / key.digest
        compile_s = None

        def build(tmp: Path) -> None:
            nonlocal compile_s
            start = time.perf_counter()
            work = compile_work_dir(tmp)
            with environment({**env, "BASE_COMPILE_WORK_DIR": str(work) + "/"}), capture_neuron_logs() as lines:
                make_model().compile(str(tmp) + "/")
            compile_s = time.perf_counter() - start
            save_sharding_log(tmp / SHARDING_FILE, parse_sharding_log(lines))
            atomic_write_json(tmp / KEY_FILE, json.loads(key.canonical()))

        def validate(path: Path) -> None:
            problem = compiled_dir_problem(path, key)
            if problem:
                raise BackendError(problem)

        build_once(cache, build, validate)
        touch_last_used(cache)
        with environment(env), capture_neuron_logs() as lines:
            model = make_model()
            model.load(str(cache) + "/")
        return model, compile_s, key, cache, lines

    def logits_model(self) -> Any:
        """The output-logits build, made on first use: accuracy needs logits, speed must not pay
        for gathering them (a separate artifact on a device)."""
        if self._logits_model is None:
            self._logits_model = self._make({**self.kwargs, "output_logits": True})[0]
        return self._logits_model

    def _sampling_params(self) -> torch.Tensor:
        from neuronx_distributed_inference.modules.generation.sampling import prepare_sampling_params

        return prepare_sampling_params(self.shape.batch_size)

    def check_batch(self, batch: Batch, max_new_tokens: int = 0) -> None:
        super().check_batch(batch, max_new_tokens)
        check_prompt_lengths(batch)

    def reset(self) -> None:
        self.model.reset()
        if self._logits_model is not None:
            self._logits_model.reset()
        self._active = self.model
        self._mask, self._next, self._steps = None, None, 0

    @property
    def steps_left(self) -> int:
        return 0 if self._mask is None else self.shape.seq_len - (self._width + self._steps)

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> Any:
        """One call of the model as HuggingFaceGenerationAdapter makes it."""
        return self._active(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                            seq_ids=torch.arange(self.shape.batch_size), sampling_params=self._sampling_params())

    def _prefill(self, batch: Batch, model: Any = None) -> Any:
        self.check_batch(batch)
        self.reset()
        self._active = model if model is not None else self.model
        self._rows = batch.size
        full = pad_rows(batch, self.shape.batch_size)
        mask, positions = full.attention_mask, prefill_positions(full.attention_mask)
        out = self._forward(full.input_ids, mask, positions)
        self._mask, self._width = mask, full.input_ids.shape[1]
        self._positions = positions.amax(1, keepdim=True)
        return out

    def _decode(self, tokens: torch.Tensor) -> Any:
        if self._mask is None or self._positions is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        bsz = self.shape.batch_size
        self._positions = self._positions + 1
        self._mask = decode_attention_mask(self._positions, self._width + self._steps)
        out = self._forward(tokens.reshape(bsz, 1), self._mask, self._positions)
        self._steps += 1
        return out

    def _generation_only(self, what: str) -> None:
        if self.scoring_only:
            raise BackendCannot(f"{what}: shape {self.shape.name!r} is a scoring shape, whose engine holds only the "
                                "scoring build (logits of the 6-mer head, no decoding)")

    def prefill(self, batch: Batch) -> torch.Tensor:
        self._generation_only("prefill")
        self._next = self._prefill(batch).tokens.reshape(self.shape.batch_size, -1)[:, -1].long()
        return self._next[: self._rows]

    def decode_step(self) -> torch.Tensor:
        if self._next is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        self._next = self._decode(self._next).tokens.reshape(self.shape.batch_size, -1)[:, -1].long()
        return self._next[: self._rows]

    def generate(self, batch: Batch, max_new_tokens: int, select: Selector | None = None) -> GenerationResult:
        """Through NxDI's HuggingFaceGenerationAdapter, as the reference runs; CTE/TKG latency from
        forward hooks on the two sub-models."""
        self._generation_only("generate")
        if select is not None:
            raise BackendCannot("on-device greedy sampling returns tokens, not per-step logits to select from")
        self.check_batch(batch, max_new_tokens)
        full = pad_rows(batch, self.shape.batch_size)
        self.reset()
        self.cte.ms.clear()
        self.tkg.ms.clear()
        with Timer(self.synchronize) as total:
            out = self.adapter.generate(**adapter_generate_kwargs(full, max_new_tokens))
        tokens = generated_tokens(out, full.input_ids.shape[1], batch.size, max_new_tokens)
        return GenerationResult(tokens, self.cte.ms[-1], list(self.tkg.ms), total.ms)

    def generate_until_eos(self, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int) -> list[int]:
        """Through NxDI's HuggingFaceGenerationAdapter with ``eos_token_id`` as EOS (``eos_generate``)."""
        self._generation_only("generate_until_eos")
        batch = Batch.from_ids([list(prompt)])
        self.check_batch(batch, max_new_tokens)
        self.reset()
        return eos_generate(self.adapter, pad_rows(batch, self.shape.batch_size), max_new_tokens, eos_token_id)

    def continuation_logits(self, batch: Batch, continuation: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[B * N, V]`` from the output-logits build: the prefill's last
        position, then decode steps fed the given tokens (NxD's re-feeding loop, without waiting
        for a divergence)."""
        self._generation_only("continuation_logits")
        self.check_batch(batch, continuation.shape[1])
        model = self.logits_model()
        steps = [self._prefill(batch, model).logits[:, -1].float()]
        for i in range(continuation.shape[1] - 1):
            forced = torch.cat([continuation[:, i], continuation[-1:, i].expand(self.shape.batch_size - batch.size)])
            steps.append(self._decode(forced).logits[:, -1].float())
        logits = torch.stack(steps, dim=1)[: batch.size]  # [B, N, V]
        self.reset()
        return logits.reshape(-1, logits.shape[-1])

    def logits(self, batch: Batch) -> torch.Tensor:
        raise BackendCannot("the neuron builds return the full vocabulary at generated positions only: scoring "
                            "reads kmer_logits() (the scoring build's 6-mer head), accuracy continuation_logits()")

    def kmer_logits(self, batch: Batch) -> torch.Tensor:
        """The scoring build's 6-mer logits ``[B, T, 4096]`` at every position: one context encoding
        of the rows padded to the compiled batch (CTE time in ``self.cte``)."""
        if not self.scoring_only:
            raise BackendCannot(f"shape {self.shape.name!r} holds the generation build: 6-mer logits at every "
                                f"position need a scoring shape ({', '.join(sorted(SCORING_SHAPES))})")
        self.check_batch(batch)
        self.reset()
        full = pad_rows(batch, self.shape.batch_size)
        with torch.inference_mode():
            out = self._forward(full.input_ids, full.attention_mask, prefill_positions(full.attention_mask))
        self.reset()
        return out.logits[: batch.size, : full.input_ids.shape[1]].float()

    def close(self) -> None:
        self.reset()
        del self.adapter, self.model, self._logits_model, self._active
