"""NxDI 0.9 speculative decoding, the pure part: the ``NeuronConfig`` kwargs of a target with a draft
as ``inference_demo.py`` builds them (``speculation_length``, ``enable_fused_speculation``, the
draft's own config with speculation switched off). NxDI's CPU mode rejects speculation, so running
it is Trainium-only; ``tests/unit/nxdi_speculation_probe.py`` builds NxDI's real configs from these."""

from __future__ import annotations

from typing import Any

from harness.spec import ModelSpec, RunShape, get_model, get_shape
from harness.speculative import DEFAULT_SPECULATION_LENGTH, SpeculativeError, check_speculation_length


def nxdi_speculation_length(k: int) -> int:
    """NxDI's ``speculation_length`` for k draft tokens per step: the number of tokens the target
    verifies in one pass, ``last + k drafts`` = k + 1. The fused model runs the draft
    ``speculation_length`` times and feeds the target ``candidate_input_ids[:, :-1]``
    (model_base.py ``NeuronFusedSpecModel``); the unfused adapter pads the target's input to
    ``speculation_length`` and drafts ``num_assistant_tokens`` (utils/hf_adapter.py), which must be
    the same number."""
    return check_speculation_length(k) + 1


def neuron_speculation_kwargs(target: str | ModelSpec, draft: str | ModelSpec, shape: str | RunShape,
                              speculation_length: int = DEFAULT_SPECULATION_LENGTH, fused: bool = True,
                              draft_tp_degree: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(target_kwargs, draft_kwargs)`` for NxDI's ``NeuronConfig`` with ``speculation_length``
    draft tokens per step (the harness's k; NxDI counts k + 1, see ``nxdi_speculation_length``),
    as ``inference_demo.py`` ``run_inference`` builds them: the target gets ``speculation_length``
    and ``enable_fused_speculation`` (draft and target traced into one fused model); the draft is
    the target's config with ``speculation_length = 0`` and ``enable_fused_speculation = False``
    (and its own tp degree if given). Fused, the draft's ``InferenceConfig`` goes into
    ``FusedSpecNeuronConfig(worker_cls, draft_config=..., draft_model_path=...)``; unfused, the draft
    is its own ``NeuronLlamaForCausalLM`` passed to ``generate(assistant_model=...)``. Both keep
    the reference runs' kwargs (``harness.backends.neuron.neuron_config_kwargs``), whose greedy
    ``on_device_sampling_config`` fused speculation requires."""
    from harness.backends.neuron import neuron_config_kwargs

    spec_len = nxdi_speculation_length(speculation_length)
    shape = get_shape(shape) if isinstance(shape, str) else shape
    target_spec = get_model(target) if isinstance(target, str) else target
    draft_spec = get_model(draft) if isinstance(draft, str) else draft
    if target_spec.vocab_size != draft_spec.vocab_size:
        raise SpeculativeError(f"draft {draft_spec.name} and target {target_spec.name} do not share a vocabulary")
    if draft_tp_degree is not None and (not isinstance(draft_tp_degree, int) or draft_tp_degree < 1):
        raise SpeculativeError(f"draft_tp_degree={draft_tp_degree!r} must be a positive integer")
    target_kwargs = neuron_config_kwargs(target_spec, shape)
    target_kwargs.update({"speculation_length": spec_len, "enable_fused_speculation": fused})
    draft_kwargs = neuron_config_kwargs(draft_spec, shape)
    draft_kwargs.update({"speculation_length": 0, "enable_fused_speculation": False})
    if draft_tp_degree is not None:
        draft_kwargs["tp_degree"] = draft_tp_degree
    return target_kwargs, draft_kwargs


def derive_draft_neuron_config(target_neuron_config: Any, draft_tp_degree: int | None = None) -> Any:
    """The draft's ``NeuronConfig`` derived from the target's, step for step as NxDI 0.9's
    ``inference_demo.py`` does (a deep copy with speculation off). It differs from
    ``NeuronConfig(**draft_kwargs)`` only in values ``NeuronConfig`` derives from the speculation
    flags (``kv_cache_tiling``, on for a fused target at seq_len % 128 == 0), which the copy keeps."""
    import copy

    draft = copy.deepcopy(target_neuron_config)
    draft.speculation_length = 0
    draft.enable_fused_speculation = False
    if draft_tp_degree is not None:
        draft.tp_degree = draft_tp_degree
    return draft


def neuron_speculation_unavailable_reason(hardware_kind: str) -> str | None:
    """Why NxDI speculation cannot run here (None on a Neuron host)."""
    if hardware_kind != "neuron":
        return ("NxDI speculation runs on Trainium only: its CPU mode raises 'Speculation is not yet supported "
                "for CPU inference' (application_base.py); run with --carbon-backend neuron on a Trn2 host")
    return None
