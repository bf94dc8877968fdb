"""A small real Llama (transformers, random weights, SDPA attention) run as the contract runs a side: a
prefill of 30 tokens (right-padded with 4 pad slots or not), then decode steps fed 20 given tokens, the
logits of each step saved. Run in a process with a planted hook on its ``PYTHONPATH`` and in one without,
the two say at which positions a near-threshold defect acts (``test_defects``)."""

from __future__ import annotations

import sys

import torch

PROMPT, STEPS, PAD = 30, 20, 4


@torch.inference_mode()
def step_logits(dtype: str, padded: bool) -> torch.Tensor:
    """``[STEPS, V]`` float32: row 0 the prefill's last real position, row j the decode step at position
    ``PROMPT + j - 1`` (its query's key length ``PROMPT + j``, plus ``PAD`` where padded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval()
    ids = torch.randint(1, 256, (1, PROMPT))
    given = torch.randint(1, 256, (STEPS,))
    pad = PAD if padded else 0
    mask = torch.tensor([[1] * PROMPT + [0] * pad])
    out = model(input_ids=torch.cat([ids, torch.zeros(1, pad, dtype=torch.long)], 1), attention_mask=mask,
                use_cache=True)
    rows, past = [out.logits[0, PROMPT - 1].float()], out.past_key_values
    for j in range(STEPS - 1):
        mask = torch.cat([mask, torch.ones(1, 1, dtype=mask.dtype)], 1)
        out = model(input_ids=given[j].view(1, 1), attention_mask=mask, past_key_values=past,
                    position_ids=torch.tensor([[PROMPT + j]]), use_cache=True)
        rows.append(out.logits[0, -1].float())
        past = out.past_key_values
    return torch.stack(rows)


if __name__ == "__main__":
    torch.save(step_logits(sys.argv[1], sys.argv[2] == "padded"), sys.argv[3])
