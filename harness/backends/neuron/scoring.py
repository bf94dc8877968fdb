"""The scoring build of NxDI's Llama: a context encoding that returns the 6-mer head at every position.

Why a build of its own: NxDI 0.9's ``NeuronBaseModel.forward`` (models/model_base.py) gathers the
hidden state of one position (the last real one) before the lm head, unless ``self.sliced_hidden``
is set. Scoring needs the logits of every position, and only their 6-mer block (FNS marginals):

- ``CarbonScoringModel`` sets ``sliced_hidden`` for context-encoding calls only, decided per call
  (NxDI's CPU mode shares one model instance between CTE and TKG; on a device each sub-model is
  traced with its own input width, so the flag is fixed per traced graph);
- its lm head has the 4,096 6-mer rows of the checkpoint's lm head (or of the tied embedding), so a
  batch of 8 x 1,024 positions returns 134 MB of fp32 logits instead of 5.1 GB.

The build needs ``on_device_sampling_config=None`` (the CTE's output is then the logits) and no
sequence parallelism, windowed context encoding, Medusa or EAGLE (each slices or gathers hidden
states on its own): ``check_scoring_kwargs`` refuses them. It is compiled apart from the generation
artifact (its own artifact key, ``SCORING_HEAD`` in it) and only ever called through ``forward``:
NxDI's generation adapter would read ``logits[:, -1]``, a pad slot here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.carbon.fns import KMER_START, KMERS
from harness.core.errors import BackendError

# In the artifact key: what this build changes against NxDI's stock Llama (a new value recompiles).
SCORING_HEAD = "6-mer head at every context-encoding position (rows KMER_START..+4096), v1"
KMER_ROWS = len(KMERS)
# NeuronConfig settings under which the context encoding slices or gathers hidden states itself.
_CONFLICTS = {"on_device_sampling_config": "the context encoding must return logits, not sampled tokens",
              "sequence_parallel_enabled": "sequence parallelism slices the last token before the lm head",
              "windowed_context_encoding_size": "windowed context encoding gathers one position per window",
              "is_medusa": "Medusa heads replace the lm head", "is_eagle_draft": "EAGLE drafts gather their own hidden states",
              "enable_eagle_speculation": "EAGLE speculation gathers its own hidden states"}


def check_scoring_kwargs(kwargs: Mapping[str, Any]) -> None:
    """The NeuronConfig kwargs must leave every position's hidden state to the lm head."""
    bad = {k: why for k, why in _CONFLICTS.items() if kwargs.get(k)}
    if bad:
        raise BackendError(f"the scoring build cannot be made with {sorted(bad)}: "
                           + "; ".join(f"{k}: {why}" for k, why in sorted(bad.items())))


def kmer_rows(weight: Any) -> Any:
    """The 6-mer rows of an lm-head (or tied embedding) weight ``[vocab, hidden]``."""
    if weight.shape[0] < KMER_START + KMER_ROWS:
        raise BackendError(f"lm head has {weight.shape[0]} rows: the 6-mer block needs rows {KMER_START}.."
                           f"{KMER_START + KMER_ROWS - 1} (is this a Carbon checkpoint?)")
    return weight[KMER_START:KMER_START + KMER_ROWS].clone()


def scoring_model_class() -> type:
    """``NeuronLlamaForCausalLM`` with the scoring model (NxDI imported here, on first use)."""
    from neuronx_distributed_inference.models.llama.modeling_llama import NeuronLlamaForCausalLM, NeuronLlamaModel
    from torch import nn

    class CarbonScoringModel(NeuronLlamaModel):
        def init_model(self, config: Any) -> None:
            super().init_model(config)
            if isinstance(self.lm_head, nn.Linear):  # NxDI without model parallelism
                self.lm_head = nn.Linear(config.hidden_size, KMER_ROWS, bias=False)
                return
            from neuronx_distributed.parallel_layers.layers import ColumnParallelLinear
            from neuronx_distributed_inference.models.model_base import get_tp_group

            self.lm_head = ColumnParallelLinear(config.hidden_size, KMER_ROWS, gather_output=not self.on_device_sampling,
                                                dtype=config.neuron_config.torch_dtype, bias=False, pad=True,
                                                tensor_model_parallel_group=get_tp_group(config))

        def forward(self, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
            self.sliced_hidden = self._is_context_encoding(input_ids)
            return super().forward(input_ids, *args, **kwargs)

    class CarbonScoringForCausalLM(NeuronLlamaForCausalLM):
        _model_cls = CarbonScoringModel

        @staticmethod
        def convert_hf_to_neuron_state_dict(state_dict: dict, config: Any) -> dict:
            state_dict = NeuronLlamaForCausalLM.convert_hf_to_neuron_state_dict(state_dict, config)
            if "lm_head.weight" in state_dict:
                state_dict["lm_head.weight"] = kmer_rows(state_dict["lm_head.weight"])
            return state_dict

        @staticmethod
        def update_state_dict_for_tied_weights(state_dict: dict) -> None:
            state_dict["lm_head.weight"] = kmer_rows(state_dict["embed_tokens.weight"])

    return CarbonScoringForCausalLM
