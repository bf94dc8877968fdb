"""NxD Inference backend for Trainium2 (NxDI 0.9, Neuron SDK 2.29).

Everything that decides something is a pure function here and is tested on any machine:
``neuron_config_kwargs`` (what the reference runs compiled), ``neuron_artifact_key``,
``compiled_dir_problem`` (is a cached artifact complete?), ``parse_sharding_log`` /
``check_sharding`` (NxDI's GQA override against ``harness.plan``), ``visible_cores`` (xdist
workers on a multi-chip host) and ``neuron_unavailable_reason``. ``NeuronEngine`` is the thin,
device-bound part: it imports NxDI lazily, so this module imports on a machine without it.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.backends.base import BackendError, Batch, Engine, EngineInfo, GenerationResult, Selector
from harness.measure import Timer
from harness.plan import CONVERT_TO_MHA, REPLICATE, AttentionSharding
from harness.spec import MODELS, ArtifactKey, ModelSpec, RunShape, artifact_key, get_model, get_shape
from harness.tokenizer import PAD_TOKEN_ID
from harness.versions import installed_versions

NEURON_PACKAGES = ("neuronx-distributed-inference", "neuronx-distributed", "neuronx-cc", "torch-neuronx",
                   "libneuronxla", "torch")
SHARDING_OVERRIDE = re.compile(
    r"TP degree \((\d+)\) and KV heads \((\d+)\) are not divisible\. Overriding attention sharding strategy to "
    r"GQA\.CONVERT_TO_MHA")
KEY_FILE = "carbon_artifact_key.json"
COMPILED_MODEL_FILE = "model.pt"
NEURON_CONFIG_FILE = "neuron_config.json"

# The reference optimisation pass (DESIGN.md): none beat plain bf16 at bs16, all stay measurable.
VARIANTS: dict[str, dict[str, Any]] = {
    "fused-qkv": {"fused_qkv": True, "qkv_kernel_enabled": True},
    "kv-cache-fp8": {"kv_cache_quant": True},
    "topk-kernel": {"on_device_sampling_config": {"top_k_kernel_enabled": True}},
    "nki-cte-mlp": {"attn_kernel_enabled": True, "mlp_kernel_enabled": True},
}


def check_variants(variants: Iterable[str]) -> tuple[str, ...]:
    """The variant names, or an error naming the first unknown one and the known ones."""
    names = tuple(variants)
    for name in names:
        if name not in VARIANTS:
            raise BackendError(f"unknown variant {name!r}; known variants: {', '.join(VARIANTS)}")
    return names


def neuron_config_kwargs(model: str | ModelSpec, shape: str | RunShape, variants: Iterable[str] = (),
                         output_logits: bool = False) -> dict[str, Any]:
    """Keyword arguments for NxDI's ``NeuronConfig``: exactly what the reference runs compiled
    (tp 4, bf16, LNC 2, one bucket per sub-model, greedy on-device sampling, right padding with
    151643), plus the named optimisation ``variants``. ``on_device_sampling_config`` is a dict,
    which ``NeuronConfig`` turns into an ``OnDeviceSamplingConfig`` itself."""
    if isinstance(model, str):
        get_model(model)  # unknown names fail here, listing the known ones
    shape = get_shape(shape) if isinstance(shape, str) else shape
    kwargs: dict[str, Any] = {
        "tp_degree": shape.tp_degree,
        "batch_size": shape.batch_size,
        "ctx_batch_size": shape.batch_size,
        "max_context_length": shape.max_context_length,
        "seq_len": shape.seq_len,
        "max_length": shape.seq_len,
        "max_new_tokens": shape.max_new_tokens,
        "torch_dtype": "bfloat16",
        "logical_nc_config": 2,
        "enable_bucketing": True,
        "context_encoding_buckets": [shape.max_context_length],
        "token_generation_buckets": [shape.seq_len],
        "on_device_sampling_config": {"top_k": 1, "top_p": 1.0, "temperature": 1.0, "do_sample": False},
        "pad_token_id": PAD_TOKEN_ID,
        "padding_side": "right",
        "fused_qkv": False,
    }
    for name in check_variants(variants):
        for key, value in VARIANTS[name].items():
            if isinstance(value, dict):
                kwargs[key] = {**kwargs.get(key, {}), **value}
            else:
                kwargs[key] = value
    if output_logits:
        kwargs["output_logits"] = True  # logits next to the on-device tokens, for accuracy checks
    return kwargs


def neuron_versions() -> dict[str, str]:
    return installed_versions(NEURON_PACKAGES)


def neuron_artifact_key(checkpoint_fingerprint: str, shape: RunShape, kwargs: Mapping[str, Any],
                        versions: Mapping[str, str]) -> ArtifactKey:
    """Compiled artifacts depend on the checkpoint, the NeuronConfig and the compiler stack."""
    return artifact_key(checkpoint_fingerprint, shape, "neuron", dict(versions), neuron_config=dict(kwargs))


def compiled_dir_problem(path: Path, key: ArtifactKey | None = None) -> str | None:
    """Why a cached compiled directory cannot be loaded (None if it looks complete)."""
    if not path.is_dir():
        return f"{path} does not exist"
    config = path / NEURON_CONFIG_FILE
    try:
        json.loads(config.read_text())
    except FileNotFoundError:
        return f"{config} is missing"
    except json.JSONDecodeError as exc:
        return f"{config} is not valid JSON ({exc})"
    traced = path / COMPILED_MODEL_FILE
    if not traced.is_file() or traced.stat().st_size == 0:
        return f"{traced} is missing or empty (an interrupted compile?)"
    weights = path / "weights"
    if weights.is_dir() and key is not None:
        tp = key.options.get("neuron_config", {}).get("tp_degree", 1)
        missing = [r for r in range(tp) if not (weights / f"tp{r}_sharded_checkpoint.safetensors").is_file()]
        if missing:
            return f"{weights} lacks the sharded checkpoints of ranks {missing}"
    if key is not None:
        recorded = path / KEY_FILE
        try:
            if json.loads(recorded.read_text()) != json.loads(key.canonical()):
                return f"{recorded} names a different artifact key"
        except (FileNotFoundError, json.JSONDecodeError):
            return f"{recorded} is missing or unreadable"
    return None


@dataclass(frozen=True)
class ObservedSharding:
    tp_degree: int
    kv_heads: int
    strategy: str


def parse_sharding_log(lines: Iterable[str]) -> list[ObservedSharding]:
    """NxDI's "Overriding attention sharding strategy to GQA.CONVERT_TO_MHA" warnings."""
    out = []
    for line in lines:
        m = SHARDING_OVERRIDE.search(line)
        if m:
            out.append(ObservedSharding(int(m.group(1)), int(m.group(2)), CONVERT_TO_MHA))
    return out


def observed_strategy(records: list[ObservedSharding]) -> str:
    """What the compile did: CONVERT_TO_MHA if NxDI logged the override, else its default."""
    return CONVERT_TO_MHA if records else REPLICATE


def check_sharding(planned: AttentionSharding, records: list[ObservedSharding]) -> str | None:
    """A message when the compile log disagrees with the plan (None when they agree)."""
    observed = observed_strategy(records)
    if observed != planned.strategy:
        return (f"NxDI sharded attention as {observed} but the plan predicted {planned.strategy} "
                f"(tp={planned.tp_degree}, kv heads={planned.source_kv_heads})")
    for r in records:
        if (r.tp_degree, r.kv_heads) != (planned.tp_degree, planned.source_kv_heads):
            return (f"NxDI logged the override for tp={r.tp_degree}, kv heads={r.kv_heads}; "
                    f"the plan is for tp={planned.tp_degree}, kv heads={planned.source_kv_heads}")
    return None


def parse_worker_index(worker_id: str) -> int:
    """pytest-xdist worker ids are ``gw0``, ``gw1``, ...; ``master`` (no xdist) is worker 0."""
    if worker_id == "master":
        return 0
    m = re.fullmatch(r"gw(\d+)", worker_id)
    if not m:
        raise ValueError(f"worker id {worker_id!r} is not an xdist worker id (gw0, gw1, ...) or 'master'")
    return int(m.group(1))


def visible_cores(worker_id: str, cores_per_worker: int, total_cores: int) -> str:
    """NEURON_RT_VISIBLE_CORES for one xdist worker: a disjoint range per worker, e.g. ``4-7``."""
    if cores_per_worker < 1:
        raise ValueError(f"--carbon-cores-per-worker={cores_per_worker} must be at least 1")
    index = parse_worker_index(worker_id)
    start = index * cores_per_worker
    end = start + cores_per_worker - 1
    if end >= total_cores:
        workers = total_cores // cores_per_worker
        raise ValueError(f"worker {worker_id} needs cores {start}-{end} but the host has {total_cores} logical cores: "
                         f"with --carbon-cores-per-worker {cores_per_worker} run at most {workers} workers (-n {workers})")
    return str(start) if start == end else f"{start}-{end}"


def neuron_unavailable_reason() -> str | None:
    """Why NxDI cannot run here (None when it can): the first missing piece, said plainly."""
    for module, package in (("torch_neuronx", "torch-neuronx"),
                            ("neuronx_distributed_inference", "neuronx-distributed-inference")):
        if importlib.util.find_spec(module) is None:
            return (f"{module} is not importable: install the Neuron stack on a Trn2 host "
                    f"(pip install -e '.[neuron]' --extra-index-url https://pip.repos.neuron.amazonaws.com; "
                    f"needs {package})")
    if not glob.glob("/dev/neuron[0-9]*"):
        return "no /dev/neuron* device: run on a Trainium2 instance with the Neuron driver loaded"
    return None


def pad_rows(batch: Batch, batch_size: int) -> Batch:
    """A compiled NxDI model has a static batch size: fill a smaller batch up to it by repeating
    its last row (those rows' outputs are dropped again)."""
    if batch.size > batch_size:
        raise BackendError(f"batch of {batch.size} prompts exceeds the compiled batch_size={batch_size}")
    if batch.size == batch_size:
        return batch
    extra = batch_size - batch.size
    ids = torch.cat([batch.input_ids, batch.input_ids[-1:].expand(extra, -1)])
    mask = torch.cat([batch.attention_mask, batch.attention_mask[-1:].expand(extra, -1)])
    return Batch(ids, mask, batch.prompts)


def adapter_generate_kwargs(batch: Batch, max_new_tokens: int) -> dict[str, Any]:
    """Arguments for ``HuggingFaceGenerationAdapter.generate`` that give exactly ``max_new_tokens``
    greedy tokens per row: the published eos id 2 is a BPE token, so EOS is disabled by requiring
    as many new tokens as allowed (the reference runs' "forced_no_eos")."""
    return {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask, "max_new_tokens": max_new_tokens,
            "min_new_tokens": max_new_tokens, "do_sample": False, "top_k": 1, "pad_token_id": PAD_TOKEN_ID}


def generated_tokens(output_ids: torch.Tensor, prompt_width: int, rows: int, max_new_tokens: int) -> torch.Tensor:
    """The new tokens of the real rows from the adapter's output (prompt + continuation)."""
    new = output_ids[:rows, prompt_width:]
    if new.shape[1] != max_new_tokens:
        raise BackendError(f"NxDI generated {new.shape[1]} tokens per row, expected exactly {max_new_tokens} "
                           "(EOS should be disabled)")
    return new


SHARDING_FILE = "carbon_sharding_log.json"


def save_sharding_log(path: Path, records: list[ObservedSharding]) -> None:
    """Keep what the compile logged with the artifact: a cache hit compiles nothing, and the
    GQA decision must still be known."""
    path.write_text(json.dumps([{"tp_degree": r.tp_degree, "kv_heads": r.kv_heads, "strategy": r.strategy}
                                for r in records]))


def load_sharding_log(path: Path) -> list[ObservedSharding] | None:
    try:
        return [ObservedSharding(**r) for r in json.loads(path.read_text())]
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def capture_neuron_logs():
    """Collect NxDI's "Neuron" logger output (the GQA override is a warning there)."""
    handler = _LogCapture()
    logger = logging.getLogger("Neuron")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


class SubmodelLatency:
    """Per-sub-model latency, collected with forward hooks as NxDI's ``utils/benchmark.py`` does
    (its LatencyCollector uses time.time(); perf_counter here)."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._start = 0.0

    def pre_hook(self, *_: Any) -> None:
        self._start = time.perf_counter()

    def hook(self, *_: Any) -> None:
        self.ms.append((time.perf_counter() - self._start) * 1000.0)

    def attach(self, module: Any) -> None:
        module.register_forward_pre_hook(self.pre_hook)
        module.register_forward_hook(self.hook)


class NeuronEngine(Engine):  # pragma: no cover - needs Trainium2 hardware
    """Compile once into the content-addressed cache, load, and run through NxDI."""

    def __init__(self, checkpoint: Path, shape: RunShape, model_name: str, cache_dir: Path | None = None,
                 variants: Iterable[str] = (), hardware: str = "trn2.3xlarge") -> None:
        reason = neuron_unavailable_reason()
        if reason:
            raise BackendError(f"the neuron backend cannot run here: {reason}")
        from neuronx_distributed_inference.models.config import NeuronConfig
        from neuronx_distributed_inference.models.llama.modeling_llama import (
            LlamaInferenceConfig,
            NeuronLlamaForCausalLM,
        )
        from neuronx_distributed_inference.utils.hf_adapter import (
            HuggingFaceGenerationAdapter,
            load_pretrained_config,
        )

        from harness.checkpoint import fingerprint
        from harness.hardware import get_profile
        from harness.plan import make_plan
        from harness.storage import atomic_write_json, build_once

        self.shape = shape
        spec = MODELS.get(model_name)  # a checkpoint of unknown architecture is compiled without a plan
        self.kwargs = neuron_config_kwargs(spec or "carbon-tiny", shape, variants, output_logits=True)
        planned = None
        if spec is not None:
            plan = make_plan(spec, shape, get_profile(hardware))
            if plan.fits is False:
                raise BackendError(plan.unfit_message())  # before any compile
            planned = plan.sharding
        key = neuron_artifact_key(fingerprint(checkpoint), shape, self.kwargs, neuron_versions())
        cache = Path(cache_dir or "~/.cache/carbon-harness").expanduser() / "neuron" / key.digest

        def make_model() -> Any:
            config = LlamaInferenceConfig(NeuronConfig(**self.kwargs),
                                          load_config=load_pretrained_config(str(checkpoint)))
            return NeuronLlamaForCausalLM(str(checkpoint), config)

        compile_s = None

        def build(tmp: Path) -> None:
            nonlocal compile_s
            start = time.perf_counter()
            with capture_neuron_logs() as lines:
                make_model().compile(str(tmp) + "/")
            compile_s = time.perf_counter() - start
            save_sharding_log(tmp / SHARDING_FILE, parse_sharding_log(lines))
            atomic_write_json(tmp / KEY_FILE, json.loads(key.canonical()))

        def validate(path: Path) -> None:
            problem = compiled_dir_problem(path, key)
            if problem:
                raise BackendError(problem)

        build_once(cache, build, validate)
        start = time.perf_counter()
        with capture_neuron_logs() as lines:
            self.model = make_model()
            self.model.load(str(cache) + "/")
        load_s = time.perf_counter() - start
        records = load_sharding_log(cache / SHARDING_FILE)
        self.sharding_log = records if records is not None else parse_sharding_log(lines)
        extra: dict[str, Any] = {"artifact_key": key.digest, "artifact_dir": str(cache),
                                 "attention_sharding": observed_strategy(self.sharding_log), "variants": list(variants)}
        if planned is not None:
            extra["attention_sharding_planned"] = planned.strategy
            mismatch = check_sharding(planned, self.sharding_log)
            if mismatch:
                extra["attention_sharding_mismatch"] = mismatch
        self.adapter = HuggingFaceGenerationAdapter(self.model)
        self.cte, self.tkg = SubmodelLatency(), SubmodelLatency()
        self.cte.attach(self.model.context_encoding_model)
        self.tkg.attach(self.model.token_generation_model)
        self.info = EngineInfo("neuron", model_name, str(checkpoint), shape.name, "neuron", "bf16", load_s, compile_s,
                               extra=extra)
        self._rows = 0
        self._positions: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None
        self._next: torch.Tensor | None = None
        self._steps = 0
        self._width = 0

    def _sampling_params(self) -> torch.Tensor:
        from neuronx_distributed_inference.modules.generation.sampling import prepare_sampling_params

        return prepare_sampling_params(self.shape.batch_size)

    def reset(self) -> None:
        self.model.reset()
        self._mask, self._next, self._steps = None, None, 0

    @property
    def steps_left(self) -> int:
        return 0 if self._mask is None else self.shape.seq_len - (self._width + self._steps)

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> Any:
        """One call of the model as HuggingFaceGenerationAdapter makes it."""
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                          seq_ids=torch.arange(self.shape.batch_size), sampling_params=self._sampling_params())

    def _prefill(self, batch: Batch) -> Any:
        self.check_batch(batch)
        self.reset()
        self._rows = batch.size
        full = pad_rows(batch, self.shape.batch_size)
        mask = full.attention_mask
        positions = mask.long().cumsum(-1) - 1
        positions.masked_fill_(mask == 0, 1)
        out = self._forward(full.input_ids, mask, positions)
        self._mask, self._width = mask, full.input_ids.shape[1]
        self._positions = positions.amax(1, keepdim=True)
        return out

    def _decode(self, tokens: torch.Tensor) -> Any:
        if self._mask is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        bsz = self.shape.batch_size
        self._mask = torch.cat([self._mask, torch.ones(bsz, 1, dtype=self._mask.dtype)], dim=1)
        self._positions = self._positions + 1
        out = self._forward(tokens.reshape(bsz, 1), self._mask, self._positions)
        self._steps += 1
        return out

    def prefill(self, batch: Batch) -> torch.Tensor:
        self._next = self._prefill(batch).tokens.reshape(self.shape.batch_size, -1)[:, -1]
        return self._next[: self._rows]

    def decode_step(self) -> torch.Tensor:
        if self._next is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        self._next = self._decode(self._next).tokens.reshape(self.shape.batch_size, -1)[:, -1]
        return self._next[: self._rows]

    def generate(self, batch: Batch, max_new_tokens: int, select: Selector | None = None) -> GenerationResult:
        """Through NxDI's HuggingFaceGenerationAdapter, as the reference runs; CTE/TKG latency from
        forward hooks on the two sub-models."""
        if select is not None:
            raise NotImplementedError("on-device greedy sampling returns tokens, not per-step logits to select from")
        self.check_batch(batch, max_new_tokens)
        full = pad_rows(batch, self.shape.batch_size)
        self.reset()
        self.cte.ms.clear()
        self.tkg.ms.clear()
        with Timer() as total:
            out = self.adapter.generate(**adapter_generate_kwargs(full, max_new_tokens))
        tokens = generated_tokens(out, full.input_ids.shape[1], batch.size, max_new_tokens)
        return GenerationResult(tokens, self.cte.ms[-1], list(self.tkg.ms), total.ms)

    def continuation_logits(self, batch: Batch, continuation: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[B * N, V]`` from the output-logits artifact: the prefill's last
        position, then decode steps fed the given tokens (NxD's re-feeding loop, without waiting
        for a divergence)."""
        steps = [self._prefill(batch).logits[:, -1].float()]
        for i in range(continuation.shape[1] - 1):
            forced = torch.cat([continuation[:, i], continuation[-1:, i].expand(self.shape.batch_size - batch.size)])
            steps.append(self._decode(forced).logits[:, -1].float())
        logits = torch.stack(steps, dim=1)[: batch.size]  # [B, N, V]
        return logits.reshape(-1, logits.shape[-1])

    def logits(self, batch: Batch) -> torch.Tensor:
        raise NotImplementedError("the compiled model returns logits per generated position only: "
                                  "use continuation_logits()")

    def close(self) -> None:
        self.reset()
        del self.adapter, self.model
