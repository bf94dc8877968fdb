"""Fitting a batch to a compiled NxDI model and reading its outputs back: what every call of
``NeuronEngine`` goes through, apart from building the model (``engine``).

A compiled NxDI model has a static batch size and takes NxDI's own conventions for masks, positions
and the generation adapter's arguments; these are pure functions of tensors, testable without NxDI.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.backends.base import Batch
from harness.core.errors import BackendError
from harness.core.vocab import PAD_TOKEN_ID


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


def eos_generate(adapter: Any, batch: Batch, max_new_tokens: int, eos_token_id: int) -> list[int]:
    """The first row's new tokens through the adapter with ``eos_token_id`` as EOS: transformers' own
    stopping criteria on the adapter's tokens, as a team's code would call it (up to the EOS, or all)."""
    kwargs = {**adapter_generate_kwargs(batch, max_new_tokens), "eos_token_id": [eos_token_id]}
    out = adapter.generate(**kwargs)
    return out[0, batch.input_ids.shape[1]:].tolist()


def decode_attention_mask(positions: torch.Tensor, width: int) -> torch.Tensor:
    """The attention mask of a token-generation step: ones exactly at the KV slots below each row's
    position (NxDI ``attention_base.compute_for_token_gen``: ``mask[..., i]`` only when
    ``i < computed_context_len``). Context encoding writes the whole bucket into the KV cache, pad
    slots included, so a mask that merely appends a one per step attends to stale pad slots."""
    return (torch.arange(width).unsqueeze(0) < positions.reshape(-1, 1)).to(torch.long)


def prefill_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a right-padded context encoding as HuggingFaceGenerationAdapter makes them:
    0.. on the prompt, and 1 on pad slots (NxDI 0.9's ``model_wrapper.py`` pads them with 1)."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill_(mask == 0, 1)


def generated_tokens(output_ids: torch.Tensor, prompt_width: int, rows: int, max_new_tokens: int) -> torch.Tensor:
    """The new tokens of the real rows from the adapter's output (prompt + continuation)."""
    new = output_ids[:rows, prompt_width:]
    if new.shape[1] != max_new_tokens:
        raise BackendError(f"NxDI generated {new.shape[1]} tokens per row, expected exactly {max_new_tokens} "
                           "(EOS should be disabled)")
    return new


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
