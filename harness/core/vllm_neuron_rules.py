"""The 2.32+ vLLM Neuron plugin's start rules, as the harness knows them: what its own code refuses, in its own
words, so that a server the plugin would stop is stopped in seconds, before a compile, where the plugin itself
cannot be asked (no plugin installed: the CPU rehearsal; ``harness.core.vllm_neuron_preflight`` asks the
installed plugin's own functions wherever it can).

Each rule is a pure function that returns the plugin's message (quoted from the public fork
jinhuang12/vllm-neuron, at the file and commit named beside it) or None where the plugin goes on:

- prefill size (``vllm_neuron/utils/bucket_utils.py`` at 10c6804db2035ce7de5a19474a00b78223d9ebb4,
  ``resolve_segmented_prefill_config``, ``validate_num_batched_tokens_buckets``, ``validate_num_seqs_buckets``,
  ``validate_kv_segment_size_buckets``, ``get_max_num_batched_tokens``; run from the model runner's init);
- EFA (``vllm_neuron/vllm/worker/neuron_worker.py`` at 44a17b6ff476626879662307db4b698df8a6da47,
  ``_init_neuron_distributed_environment_and_runtime``: ``_set_efa_affinity`` unless
  ``NEURON_SKIP_EFA_AFFINITY`` is set to other than "0"; ``vllm_neuron/utils/hardware_config.py`` at
  0bae3e9c50d0c54f58498e371c08d272124cdbca, ``get_efa_interface`` / ``get_efa_interface_from_bdf``);
- admission of log-probabilities (``vllm_neuron/vllm/admission.py`` at 42ad3f12a81ae87c69ef473d30d6a738cecc2e37,
  ``policy_from_config`` and ``SamplingAdmission.refusals``): refused per request (HTTP 400), so the harness
  judges the requests it will send that server;
- the core variable (``neuron_worker.py`` at 44a17b6ff476, ``NeuronWorker._get_visible_devices``; the variable
  itself: ``harness.core.neuron_visibility``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

FORK = "jinhuang12/vllm-neuron"
BUCKET_UTILS = "vllm_neuron/utils/bucket_utils.py@10c6804db2035ce7de5a19474a00b78223d9ebb4"
NEURON_WORKER = "vllm_neuron/vllm/worker/neuron_worker.py@44a17b6ff476626879662307db4b698df8a6da47"
HARDWARE_CONFIG = "vllm_neuron/utils/hardware_config.py@0bae3e9c50d0c54f58498e371c08d272124cdbca"
ADMISSION = "vllm_neuron/vllm/admission.py@42ad3f12a81ae87c69ef473d30d6a738cecc2e37"

# bucket_utils.py: sizes the segmented attention NKI kernel supports, and the longest single-shot prefill
SUPPORTED_KV_SEGMENT_SIZES = frozenset({512, 1024, 2048, 4096, 8192})
MAX_MODEL_LEN_SINGLE_SHOT = 16 * 1024
SKIP_EFA = "NEURON_SKIP_EFA_AFFINITY"
RT_VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"
# hardware_config.py: trn2's Neuron device -> EFA PCI address (ND 0..15), and the logical-core grouping default
TRN2_EFA_BDF = ("0000:c9:00.0", "0000:b4:00.0", "0000:b3:00.0", "0000:ca:00.0", "0000:6c:00.0", "0000:57:00.0",
                "0000:56:00.0", "0000:6d:00.0", "0000:98:00.0", "0000:83:00.0", "0000:82:00.0", "0000:99:00.0",
                "0000:f5:00.0", "0000:e0:00.0", "0000:df:00.0", "0000:f6:00.0")
DEFAULT_LNC = 2


@dataclass(frozen=True)
class EngineSettings:
    """What the plugin's start rules read from a server's ``vllm serve`` arguments."""

    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    neuron_config: Mapping = field(default_factory=dict)
    async_scheduling: bool = True  # vLLM 0.24+'s default, which the plugin keeps (admission.py)
    max_logprobs: int = 20  # vLLM's default --max-logprobs


def _flag(args: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _int_flag(args: Sequence[str], name: str, default: int | None = None) -> int:
    value = _flag(args, name)
    if value is None:
        if default is None:
            raise ValueError(f"{name}: not in the server's arguments; the plugin's start rules need it")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} {value!r}: not an integer") from None


def engine_settings(args: Sequence[str]) -> EngineSettings:
    """The settings in a server's arguments (those ``ServeCommand.args`` / ``argv`` hold). Raises ValueError,
    naming the flag, where one the rules need is missing or malformed."""
    raw = _flag(args, "--additional-config")
    try:
        additional = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"--additional-config {raw!r}: not JSON ({exc.msg})") from None
    neuron = additional.get("neuron_config", {}) if isinstance(additional, dict) else {}
    asynchronous = True
    for arg in args:  # the last one given wins, as argparse's store_true / store_false pair
        if arg in ("--async-scheduling", "--no-async-scheduling"):
            asynchronous = arg == "--async-scheduling"
    max_model_len = _int_flag(args, "--max-model-len")
    return EngineSettings(max_model_len, _int_flag(args, "--max-num-batched-tokens"),
                          _int_flag(args, "--max-num-seqs", 256), neuron if isinstance(neuron, dict) else {},
                          asynchronous, _int_flag(args, "--max-logprobs", 20))


# ── prefill size (bucket_utils.py) ───────────────────────────────────────────


def effective_batched_tokens(settings: EngineSettings) -> int:
    """``get_max_num_batched_tokens``: the configured value clamped to ``max_model_len``."""
    return min(settings.max_num_batched_tokens, settings.max_model_len)


def segmented_prefill_refusal(max_num_batched_tokens: int, max_model_len: int) -> str | None:
    """``resolve_segmented_prefill_config``: single-shot prefill (tokens >= max_model_len) up to 16k; below
    max_model_len, only a supported chunk size."""
    if max_num_batched_tokens >= max_model_len:
        if max_model_len > MAX_MODEL_LEN_SINGLE_SHOT:
            return (f"Single-shot prefill (max_num_batched_tokens={max_num_batched_tokens} >= max_model_len="
                    f"{max_model_len}) is only supported when max_model_len <= {MAX_MODEL_LEN_SINGLE_SHOT}. Set "
                    f"max_num_batched_tokens to one of {sorted(SUPPORTED_KV_SEGMENT_SIZES)} to enable chunked "
                    f"prefill.")
        return None
    if max_num_batched_tokens in SUPPORTED_KV_SEGMENT_SIZES:
        return None
    msg = (f"max_num_batched_tokens={max_num_batched_tokens} is not a supported chunked prefill size on Neuron. "
           f"Supported values: {sorted(SUPPORTED_KV_SEGMENT_SIZES)}.")
    if max_model_len <= MAX_MODEL_LEN_SINGLE_SHOT:
        msg += (f" Alternatively, set max_num_batched_tokens={max_model_len} (equal to max_model_len) to disable "
                f"chunked prefill.")
    return msg


def buckets_refusal(buckets, maximum: int, param_name: str, limit_name: str) -> str | None:
    """``validate_num_batched_tokens_buckets`` / ``validate_num_seqs_buckets``: a non-empty list of positive
    integers, strictly ascending, the last equal to the maximum."""
    if not buckets:
        return f"{param_name} cannot be empty"
    if not isinstance(buckets, list):
        return f"{param_name} must be a list, got {type(buckets).__name__}"
    for i, bucket in enumerate(buckets):
        if not isinstance(bucket, int):
            return f"{param_name}[{i}] must be an integer, got {bucket}"
        if bucket <= 0:
            return f"{param_name}[{i}] must be positive, got {bucket}"
    if any(b <= a for a, b in zip(buckets, buckets[1:])):
        return f"{param_name} must be in strictly ascending order, got {buckets}"
    if buckets[-1] != maximum:
        return f"Last bucket in {param_name} must equal {limit_name} ({maximum}), got {buckets[-1]}"
    return None


def segment_buckets_refusal(buckets, num_batched_tokens_buckets) -> str | None:
    """``validate_kv_segment_size_buckets`` (a model without independent query buckets)."""
    name = "kv_segment_size_buckets"
    if not isinstance(buckets, list) or len(buckets) == 0:
        return f"{name} must be a non-empty list"
    for i, s in enumerate(buckets):
        if not isinstance(s, int):
            return f"{name}[{i}] must be an integer, got {s}"
    if any(b <= a for a, b in zip(buckets, buckets[1:])):
        return f"{name} must be in strictly ascending order, got {buckets}"
    for i, s in enumerate(buckets):
        if s not in SUPPORTED_KV_SEGMENT_SIZES:
            return (f"{name}[{i}] = {s} is not a supported segment size. The segmented attention kernel only "
                    f"supports: {set(sorted(SUPPORTED_KV_SEGMENT_SIZES))}. Please use one of these values.")
    if len(buckets) != 1:
        return f"Only one segment size is currently supported, got {len(buckets)}: {buckets}."
    if num_batched_tokens_buckets is not None and num_batched_tokens_buckets != buckets:
        return (f"When {name} is set, num_batched_tokens_buckets must match because the segmented kernel currently "
                f"requires the prefill bucket length to equal the segment size. Got num_batched_tokens_buckets="
                f"{num_batched_tokens_buckets}, {name}={buckets}")
    return None


def prefill_refusal(settings: EngineSettings) -> str | None:
    """The model runner's bucket resolution on these settings: the segmented-prefill decision (or the
    user's segment buckets), then the prefill and decode buckets against their maxima."""
    tokens = effective_batched_tokens(settings)
    config = settings.neuron_config
    if "kv_segment_size_buckets" in config:
        refusal = segment_buckets_refusal(config["kv_segment_size_buckets"], config.get("num_batched_tokens_buckets"))
    else:
        refusal = segmented_prefill_refusal(tokens, settings.max_model_len)
    if refusal is None and "num_batched_tokens_buckets" in config:
        refusal = buckets_refusal(config["num_batched_tokens_buckets"], tokens, "num_batched_tokens_buckets",
                                  "max_num_batched_tokens")
    if refusal is None and "num_seqs_buckets" in config:
        refusal = buckets_refusal(config["num_seqs_buckets"], settings.max_num_seqs, "num_seqs_buckets",
                                  "max_num_seqs")
    return refusal


# ── EFA (neuron_worker.py, hardware_config.py) ───────────────────────────────


def skips_efa(environ: Mapping[str, str]) -> bool:
    """The worker skips ``_set_efa_affinity`` when NEURON_SKIP_EFA_AFFINITY is set to anything but "0"."""
    return environ.get(SKIP_EFA, "0") != "0"


def efa_bdf(visible_device: int, lnc: int = DEFAULT_LNC) -> str:
    """``get_efa_interface``'s PCI address on trn2 for a worker's logical core: Neuron device
    ``lnc_core * lnc // 8`` (the host's /dev/neuronN numbering, as a host without renumbering has it)."""
    return TRN2_EFA_BDF[visible_device * lnc // 8]


def efa_refusal(environ: Mapping[str, str], bdf: str, interfaces: Sequence[str] | None) -> str | None:
    """``get_efa_interface_from_bdf``, run unless the worker skips EFA affinity: ``interfaces`` is the
    contents of ``/sys/bus/pci/devices/<bdf>/infiniband`` (None: the directory does not exist)."""
    if skips_efa(environ):
        return None
    path = f"/sys/bus/pci/devices/{bdf}/infiniband"
    if interfaces is None:
        return (f"No EFA device found at {path} for BDF {bdf}. This is expected on instances without EFA (e.g. trn3 "
                f"3xlarge). EFA affinity is a CPU performance optimization, not a correctness requirement; set "
                f"NEURON_SKIP_EFA_AFFINITY=1 to skip it on instances without EFA. If you are using an instance that "
                f"supports EFA, we recommend installing EFA to improve performance.")
    if not interfaces:
        return (f"No infiniband interfaces found in {path} for BDF {bdf}. The EFA device may not be properly "
                f"initialized.")
    return None


# ── admission of log-probabilities (admission.py) ────────────────────────────


@dataclass(frozen=True)
class Asked:
    """What the harness's requests to one server ask: top-k completion logprobs, prompt logprobs, and
    scored token ids (None: not asked)."""

    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: bool = False


def harness_requests(settings: EngineSettings) -> Asked:
    """The log-probabilities a server started with ``settings`` must answer for the harness: none on a timed
    server (``--max-logprobs`` 0), its top-k of each completion position on any other (the output contract's
    decode path, and the one-token prefix requests that score each prompt position where the server refuses
    prompt logprobs; ``prompt_logprobs_admitted`` says which way the contract will go)."""
    return Asked() if settings.max_logprobs <= 0 else Asked(logprobs=settings.max_logprobs)


def prompt_logprobs_admitted(settings: EngineSettings) -> bool:
    """Whether the server answers prompt logprobs (else the contract scores each prompt position by prefix
    requests)."""
    return admission_refusal(settings, Asked(prompt_logprobs=1)) is None


def samples_on_device(neuron_config: Mapping) -> bool:
    """``policy_from_config``: absent means the default on-device sampler, an explicit null none."""
    return neuron_config.get("on_device_sampling_config", {}) is not None


def admission_refusal(settings: EngineSettings, asked: Asked) -> str | None:
    """``SamplingAdmission.refusals`` under the policy ``policy_from_config`` derives: with the sampler on
    the device, completion logprobs only under synchronous scheduling, prompt logprobs never."""
    if not samples_on_device(settings.neuron_config):
        return None
    logprobs = not settings.async_scheduling
    missing = []
    if not logprobs and asked.logprobs is not None:
        missing.append(f"logprobs={asked.logprobs}")
    if not logprobs and asked.logprob_token_ids:
        missing.append("logprob_token_ids")
    if asked.prompt_logprobs is not None:
        missing.append(f"prompt_logprobs={asked.prompt_logprobs}")
    if not missing:
        return None
    return (f"This server samples on device (on_device_sampling_config is set) and its sampler returns token ids "
            f"only, so it cannot return {', '.join(missing)}. Leave logprobs and prompt_logprobs unset, or restart "
            f"the server with on_device_sampling_config: null to sample on the host.")


# ── the core variable (neuron_worker.py) ─────────────────────────────────────


def core_variable_refusal(environ: Mapping[str, str]) -> str | None:
    """``NeuronWorker._get_visible_devices``: a worker stops when NEURON_RT_VISIBLE_CORES is set at all."""
    if RT_VISIBLE_CORES in environ:
        return ("NEURON_RT_VISIBLE_CORES cannot be used with multi-processing execution on vLLM. "
                "Set NEURON_VISIBLE_DEVICES to control device visibility.")
    return None
