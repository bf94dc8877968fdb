"""NxD Inference backend for Trainium2 (NxDI 0.9, Neuron SDK 2.29).

Everything that decides something is a pure function here and is tested on any machine:
``neuron_config_kwargs`` (what the reference runs compiled), ``neuron_artifact_key``,
``compiled_dir_problem`` (is a cached artifact complete?), ``parse_sharding_log`` /
``check_sharding`` (NxDI's GQA override against ``harness.plan``), ``visible_cores`` (xdist
workers on a multi-chip host), ``decode_attention_mask`` and ``neuron_unavailable_reason``.

``NeuronEngine`` runs NxDI's real model code in two modes: on a Trainium2 host (compile into the
content-addressed cache, load) and in NxDI's own CPU mode (``on_cpu=True``, ``to_cpu()``, tp 1,
``max_context_length == seq_len``), where only the Neuron-only binary packages are stubbed
(``harness.backends.neuron_stubs``). Both modes share every other code path: prefill / decode
steps, ``HuggingFaceGenerationAdapter.generate``, teacher-forced logits, ``reset()``, the latency
hooks and the GQA log. NxDI is imported lazily, so this module imports on a machine without it.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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
                   "libneuronxla", "torch", "transformers")
# Environment variables that change what neuronx-cc compiles: they enter the artifact key.
# NEURON_LOGICAL_NC_CONFIG overrides the logical_nc_config kwarg (NxDI config.py ``_get_lnc``).
COMPILE_ENV_VARS = ("NEURON_LOGICAL_NC_CONFIG", "NEURON_CC_FLAGS", "XLA_HANDLE_SPECIAL_SCALAR", "UNSAFE_FP8FNCAST")
SHARDING_OVERRIDE = re.compile(
    r"TP degree \((\d+)\) and KV heads \((\d+)\) are not divisible\. Overriding attention sharding strategy to "
    r"GQA\.CONVERT_TO_MHA")
KEY_FILE = "carbon_artifact_key.json"
COMPILED_MODEL_FILE = "model.pt"
NEURON_CONFIG_FILE = "neuron_config.json"

@dataclass(frozen=True)
class Variant:
    """One change against the reference compile, named for what it changes."""

    changes: str
    kwargs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)


# The reference optimisation pass (DESIGN.md): none beat plain bf16 at bs16, all stay measurable.
# What the baseline already compiles is in ``baseline_kernels``: a variant that would only repeat
# it (``top_k_kernel_enabled`` is True by default on trn2) is not a variant.
VARIANTS: dict[str, Variant] = {
    "fused-qkv": Variant("Q, K and V projections fused into one matmul (weights only, no kernel)",
                         {"fused_qkv": True}),
    "qkv-kernel": Variant("the NKI QKV kernel, on fused Q/K/V weights", {"fused_qkv": True, "qkv_kernel_enabled": True}),
    # kv_cache_quant alone only adds a compiler flag: the cache dtype comes from kv_quant_config
    # (config.py, kv_cache_manager.py), and inference_demo.py sets the two fp8 cast variables.
    "kv-cache-fp8": Variant("KV cache stored as float8_e4m3fn (direct cast)",
                            {"kv_cache_quant": True, "kv_quant_config": {"direct_cast": True}},
                            {"XLA_HANDLE_SPECIAL_SCALAR": "1", "UNSAFE_FP8FNCAST": "1"}),
    "mlp-kernel": Variant("the NKI MLP kernel, in context encoding and token generation", {"mlp_kernel_enabled": True}),
    "no-flash-attention": Variant("the CTE flash-attention kernel turned off (the baseline selects it at LNC 2 for "
                                  "buckets that are multiples of 256)", {"attn_kernel_enabled": False}),
}
# What NxDI's CPU mode cannot run (measured): NKI kernels are device code; torch has no CPU
# scatter for float8_e4m3fn, so an fp8 cache builds but cannot be written.
NOT_ON_CPU = {"qkv-kernel": "an NKI kernel (device code)", "mlp-kernel": "an NKI kernel (device code)",
              "kv-cache-fp8": "torch's CPU scatter does not support float8_e4m3fn (the cache builds; writing it fails)"}
RETIRED_VARIANTS = {
    "topk-kernel": "top_k_kernel_enabled already defaults to True on trn2 and greedy sampling takes the argmax, "
                   "so it recompiled the baseline",
    "nki-cte-mlp": "it only added the MLP kernel (in CTE and TKG): use mlp-kernel; the CTE flash-attention kernel "
                   "is already in the baseline (see no-flash-attention)",
}


def check_variants(variants: Iterable[str]) -> tuple[str, ...]:
    """The variant names, or an error naming the first unknown one and the known ones."""
    names = tuple(variants)
    for name in names:
        if name in RETIRED_VARIANTS:
            raise BackendError(f"variant {name!r} was removed: {RETIRED_VARIANTS[name]}; known variants: "
                               f"{', '.join(VARIANTS)}")
        if name not in VARIANTS:
            raise BackendError(f"unknown variant {name!r}; known variants: {', '.join(VARIANTS)}")
    return names


def flash_attention_strategy(q_len: int, logical_nc_config: int, attn_kernel_enabled: bool | None = None) -> str:
    """NxDI 0.9 ``NeuronAttentionBase.get_flash_attention_strategy`` for a CTE bucket of ``q_len``
    with an attention mask and no context parallelism: which flash kernel the compile selects."""
    if attn_kernel_enabled is False:
        return "none"
    if logical_nc_config > 1:
        divisor = 512 if q_len >= 1024 else 256
        return "sharded-kernel" if q_len % divisor == 0 else "none"
    if q_len >= 4096 or (attn_kernel_enabled and q_len >= 512):
        return "unsharded-kernel"
    return "none"


def baseline_kernels(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The NKI kernels a compile with these NeuronConfig kwargs uses on trn2, made explicit so a
    figure says what it measured (the reference runs did not set them, NxDI's defaults chose)."""
    lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", kwargs.get("logical_nc_config", 2)))
    sampling = kwargs.get("on_device_sampling_config") or {}
    return {
        "cte_flash_attention": flash_attention_strategy(kwargs["max_context_length"], lnc,
                                                        kwargs.get("attn_kernel_enabled")),
        "qkv_kernel": bool(kwargs.get("qkv_kernel_enabled", False)),
        "mlp_kernel": bool(kwargs.get("mlp_kernel_enabled", False)),
        "top_k_kernel": bool(sampling.get("top_k_kernel_enabled", True)),  # NxDI default on trn2
        "kv_cache_dtype": "float8_e4m3fn" if kwargs.get("kv_quant_config") is not None else kwargs["torch_dtype"],
        "logical_nc_config": lnc,
    }


def neuron_config_kwargs(model: str | ModelSpec, shape: str | RunShape, variants: Iterable[str] = (),
                         output_logits: bool = False, on_cpu: bool = False) -> dict[str, Any]:
    """Keyword arguments for NxDI's ``NeuronConfig``: exactly what the reference runs compiled
    (tp 4, bf16, LNC 2, one bucket per sub-model, greedy on-device sampling, right padding), plus
    sharded weights saved with the artifact and the named optimisation ``variants``.
    ``on_device_sampling_config`` is a dict, which ``NeuronConfig`` turns into an
    ``OnDeviceSamplingConfig`` itself. The pad id is not a NeuronConfig argument (NeuronConfig logs
    it as unexpected and drops it): it goes to the inference config, see ``inference_config_kwargs``.

    ``output_logits`` builds the accuracy artifact: it all-gathers fp32 logits every step and copies
    them to the host, so speed is never measured on it. ``on_cpu`` makes the changes NxDI's CPU mode
    requires (``application_base.to_cpu``): tp 1, one CTE bucket of ``seq_len``
    (``max_context_length == seq_len``) and fp32, so its logits compare with the transformers fp32
    reference at fp32 tolerance; everything else stays the reference's."""
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
        "padding_side": "right",
        "fused_qkv": False,
        "save_sharded_checkpoint": True,
    }
    for name in check_variants(variants):
        for key, value in VARIANTS[name].kwargs.items():
            if isinstance(value, dict):
                kwargs[key] = {**kwargs.get(key, {}), **value}
            else:
                kwargs[key] = value
    if output_logits:
        kwargs["output_logits"] = True
    if on_cpu:
        # NKI kernels are device code: the CTE flash-attention kernel the baseline selects at LNC 2
        # (see baseline_kernels) is replaced by NxDI's own PyTorch attention on the CPU.
        kwargs.update({"on_cpu": True, "tp_degree": 1, "max_context_length": shape.seq_len,
                       "context_encoding_buckets": [shape.seq_len], "torch_dtype": "float32",
                       "attn_kernel_enabled": False})
    return kwargs


def inference_config_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``LlamaInferenceConfig`` beyond the checkpoint's config.json: the pad
    id of the Carbon tokenizer (config.json has none), which NxDI's adapter and padding use."""
    return {"pad_token_id": PAD_TOKEN_ID}


def variant_env(variants: Iterable[str]) -> dict[str, str]:
    """Environment variables the variants need while compiling and running."""
    env: dict[str, str] = {}
    for name in check_variants(variants):
        env.update(VARIANTS[name].env)
    return env


def compile_env_key(variants: Iterable[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The compile-relevant environment, as it will be during the compile: part of the artifact key."""
    env = {k: environ[k] for k in COMPILE_ENV_VARS if k in environ}
    env.update(variant_env(variants))
    return env


@contextmanager
def environment(values: Mapping[str, str]):
    """Set environment variables for a block and restore them after (NxDI reads them at call time)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def compile_work_dir(artifact_tmp: Path) -> Path:
    """A trace/compile work directory of this build's own. NxDI traces into
    ``BASE_COMPILE_WORK_DIR`` (default ``/tmp/nxd_model/``) and deletes it first, so two builds
    sharing the default would delete each other's work."""
    return artifact_tmp.parent / f".{artifact_tmp.name}.work"


def neuron_versions() -> dict[str, str]:
    return installed_versions(NEURON_PACKAGES)


def package_digest(package_dir: str | Path) -> str:
    """sha256 over a package's Python sources (relative path and bytes, in sorted order): two builds
    published under one version (NxDI c63afe0 and ef2731e are both "0.9.0") differ here."""
    root = Path(package_dir)
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def nxdi_build() -> dict[str, str]:
    """Which NxDI and neuronx-distributed builds this process imports: version, location and a
    digest of their sources, for the run manifest and the artifact key."""
    out: dict[str, str] = {}
    for module, label in (("neuronx_distributed_inference", "nxdi"), ("neuronx_distributed", "nxd")):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            continue
        location = Path(next(iter(spec.submodule_search_locations)))
        out[f"{label}_path"] = str(location)
        version = re.search(r'__version__\s*=\s*"([^"]+)"', (location / "_version.py").read_text()) \
            if (location / "_version.py").is_file() else None
        if version:
            out[f"{label}_version"] = version.group(1)
        out[f"{label}_sha256"] = package_digest(location)
    return out


def neuron_artifact_key(checkpoint_fingerprint: str, shape: RunShape, kwargs: Mapping[str, Any],
                        versions: Mapping[str, str], env: Mapping[str, str] | None = None) -> ArtifactKey:
    """Compiled artifacts depend on the checkpoint, the NeuronConfig, the compile environment
    (``NEURON_LOGICAL_NC_CONFIG`` overrides the LNC kwarg) and the compiler stack, NxDI's build
    digest included."""
    return artifact_key(checkpoint_fingerprint, shape, "neuron", dict(versions), neuron_config=dict(kwargs),
                        env=dict(env or {}))


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
    config = key.options.get("neuron_config", {}) if key is not None else {}
    if config.get("save_sharded_checkpoint") and not weights.is_dir():
        return f"{weights} is missing: the artifact was built with save_sharded_checkpoint"
    if weights.is_dir() and key is not None:
        tp = config.get("tp_degree", 1)
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
    greedy tokens per row (the reference runs' "forced_no_eos"). The published eos id 2 is a BPE
    token. With on-device sampling the adapter takes ``outputs.tokens``, which logits processors
    (``min_new_tokens``) never touch, so only an empty ``eos_token_id`` keeps config.json's EOS
    from ending rows, as NxDI's own ``utils/benchmark.py`` does."""
    return {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask, "max_new_tokens": max_new_tokens,
            "do_sample": False, "top_k": 1, "pad_token_id": PAD_TOKEN_ID, "eos_token_id": []}


def decode_attention_mask(positions: torch.Tensor, width: int) -> torch.Tensor:
    """The attention mask of a token-generation step: ones exactly at the KV slots below each row's
    position (NxDI ``attention_base.compute_for_token_gen``: ``mask[..., i]`` only when
    ``i < computed_context_len``). Context encoding writes the whole bucket into the KV cache, pad
    slots included, so a mask that merely appends a one per step attends to stale pad slots."""
    return (torch.arange(width).unsqueeze(0) < positions.reshape(-1, 1)).to(torch.long)


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
        self._seen: set[int] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if id(record) not in self._seen:  # a record reaches both loggers when "Neuron" propagates
            self._seen.add(id(record))
            self.lines.append(record.getMessage())


@contextmanager
def capture_neuron_logs():
    """Collect what NxDI logs: its "Neuron" logger (the GQA override is a warning there) and the
    root logger (``NeuronConfig`` warns about unexpected kwargs with ``logging.warning``)."""
    handler = _LogCapture()
    loggers = (logging.getLogger("Neuron"), logging.getLogger())
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        for logger in loggers:
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


def free_port() -> int:
    """A free TCP port on the loopback: NxDI's CPU mode starts a one-process gloo group on
    MASTER_PORT (default 29500), which two xdist workers would otherwise both bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def smoke_generate(adapter: Any, batch_size: int) -> None:
    """Two greedy tokens from a one-token prompt through the adapter, once at load: an NxDI build
    that cannot generate (0.9.0 at commit c63afe0: an undefined ``tensor_capture_hook`` in
    ``hf_adapter.py``) fails here with its error, before any figure is taken."""
    ids = torch.tensor([[151669, 151672]] * batch_size)  # <dna> AAAAAA
    batch = Batch(ids, torch.ones_like(ids))
    try:
        out = adapter.generate(**adapter_generate_kwargs(batch, 2))
    except Exception as exc:  # any failure of the installed NxDI build, reported as such
        raise BackendError(f"the installed NxDI build cannot generate ({type(exc).__name__}: {exc}); "
                           "check which NxDI build this is (run manifest: nxdi_build)") from exc
    generated_tokens(out, 2, batch_size, 2)


def nxdi_model(checkpoint: Path, kwargs: Mapping[str, Any]) -> Any:
    """NxDI's Llama for a checkpoint, configured as the reference runs (not yet compiled or moved)."""
    from neuronx_distributed_inference.models.config import NeuronConfig
    from neuronx_distributed_inference.models.llama.modeling_llama import LlamaInferenceConfig, NeuronLlamaForCausalLM
    from neuronx_distributed_inference.utils.hf_adapter import load_pretrained_config

    config = LlamaInferenceConfig(NeuronConfig(**kwargs), load_config=load_pretrained_config(str(checkpoint)),
                                  **inference_config_kwargs())
    return NeuronLlamaForCausalLM(str(checkpoint), config)


MIN_PROMPT_TOKENS = 2


def check_prompt_lengths(batch: Batch) -> None:
    """NxDI 0.9 pads position ids with 1 (``model_wrapper.py``) and takes the context-encoding
    output at ``torch.max(position_ids).indices`` (``model_base.py``): for a one-token prompt that is
    the first pad slot, so its first token comes from a pad (measured in the CPU tier: the tokens
    differ from transformers'). A one-token prompt, such as ``<dna>`` alone, is refused."""
    short = [i for i, n in enumerate(batch.prompt_lengths.tolist()) if n < MIN_PROMPT_TOKENS]
    if short:
        raise BackendError(f"rows {short} have a {MIN_PROMPT_TOKENS - 1}-token prompt: NxDI 0.9 reads a pad slot for "
                           f"them (position ids padded with 1); give at least {MIN_PROMPT_TOKENS} tokens")


class NeuronEngine(Engine):
    """NxDI's Llama through its public API: compiled on a Trainium2 host (content-addressed cache),
    or in NxDI's CPU mode (``cpu=True``: ``to_cpu()`` instead of compile/load)."""

    def __init__(self, checkpoint: Path, shape: RunShape, model_name: str, cache_dir: Path | None = None,
                 variants: Iterable[str] = (), hardware: str = "trn2.3xlarge", cpu: bool = False,
                 nxdi_source: Path | None = None) -> None:
        if cpu:
            from harness.backends.neuron_stubs import NeuronImportError, install

            try:
                install(nxdi_source)
            except NeuronImportError as exc:
                raise BackendError(str(exc)) from None
        else:
            reason = neuron_unavailable_reason()
            if reason:
                raise BackendError(f"the neuron backend cannot run here: {reason}")
        from neuronx_distributed_inference.utils.hf_adapter import HuggingFaceGenerationAdapter

        from harness.checkpoint import fingerprint
        from harness.hardware import get_profile
        from harness.plan import make_plan

        self.shape, self.cpu, self.checkpoint = shape, cpu, checkpoint
        self.variants = check_variants(variants)
        unsupported = {v: NOT_ON_CPU[v] for v in self.variants if cpu and v in NOT_ON_CPU}
        if unsupported:
            raise BackendError(f"NxDI's CPU mode cannot run variants {unsupported}: measure them on a Trainium2 device")
        spec = MODELS.get(model_name)  # a checkpoint of unknown architecture is compiled without a plan
        self.kwargs = neuron_config_kwargs(spec or "carbon-tiny", shape, self.variants, on_cpu=cpu)
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
        self.model, compile_s, key, artifact_dir, lines = self._make(self.kwargs)
        load_s = time.perf_counter() - start - (compile_s or 0.0)
        records = load_sharding_log(artifact_dir / SHARDING_FILE) if artifact_dir is not None else None
        self.sharding_log = records if records is not None else parse_sharding_log(lines)
        extra: dict[str, Any] = {"artifact_key": key.digest if key else None,
                                 "artifact_dir": str(artifact_dir) if artifact_dir else None,
                                 "attention_sharding": observed_strategy(self.sharding_log),
                                 "variants": list(self.variants), "kernels": baseline_kernels(self.kwargs),
                                 "nxdi_mode": "cpu" if cpu else "device", "nxdi_build": self.build,
                                 "tp_degree": self.kwargs["tp_degree"],
                                 "cte_bucket": self.kwargs["context_encoding_buckets"][0],
                                 # pre-sharded weights are loaded from the artifact; load includes warm-up
                                 "load_includes": "weight sharding in memory (CPU mode)" if cpu else
                                                  "pre-sharded weights from the artifact, warm-up"}
        if planned is not None:
            extra["attention_sharding_planned"] = planned.strategy
            mismatch = check_sharding(planned, self.sharding_log)
            if mismatch:
                extra["attention_sharding_mismatch"] = mismatch
        self.adapter = HuggingFaceGenerationAdapter(self.model)
        self.cte, self.tkg = SubmodelLatency(), SubmodelLatency()
        self.cte.attach(self.model.context_encoding_model)
        self.tkg.attach(self.model.token_generation_model)
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

    def _make(self, kwargs: dict[str, Any]) -> tuple[Any, float | None, ArtifactKey | None, Path | None, list[str]]:
        """A ready model for these kwargs: CPU mode builds it in memory, a device compiles once into
        the cache and loads. Returns the model, compile seconds (None: nothing compiled), the
        artifact key and directory (None on CPU) and NxDI's log lines."""
        def make_model() -> Any:
            return nxdi_model(self.checkpoint, kwargs)

        env = variant_env(self.variants)
        if self.cpu:
            if not torch.distributed.is_initialized():
                os.environ["MASTER_PORT"] = str(free_port())
            with environment(env), capture_neuron_logs() as lines:
                model = make_model()
                model.to_cpu()
            return model, None, None, None, lines

        from harness.storage import atomic_write_json, build_once

        key = neuron_artifact_key(self.fingerprint, self.shape, kwargs, self.versions, compile_env_key(self.variants))
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
        mask = full.attention_mask
        positions = mask.long().cumsum(-1) - 1
        positions.masked_fill_(mask == 0, 1)
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

    def prefill(self, batch: Batch) -> torch.Tensor:
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
        """Teacher-forced logits ``[B * N, V]`` from the output-logits build: the prefill's last
        position, then decode steps fed the given tokens (NxD's re-feeding loop, without waiting
        for a divergence)."""
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
        raise NotImplementedError("the compiled model returns logits per generated position only: "
                                  "use continuation_logits()")

    def close(self) -> None:
        self.reset()
        del self.adapter, self.model, self._logits_model, self._active
