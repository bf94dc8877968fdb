"""vLLM's offline engine (the CPU backend a served candidate runs, eager as the check's server starts it) run
as a served side decodes: two prompts of token ids in one batch (30 and 50 tokens), each decoded greedily for
``STEPS`` tokens with its top log-probabilities at every step. Run in a process with a planted hook on its
``PYTHONPATH`` and in one without, the two say at which step of which prompt a served plant acts
(``test_defects``: the first changed step and the position of its query)."""

from __future__ import annotations

import json
import sys

LENGTHS, STEPS, TOP = (30, 50), 20, 5


def step_logprobs(checkpoint: str, dtype: str) -> list[list[list[float]]]:
    """Per prompt, per generated token j: its log-probability, then the top ``TOP`` ones (sorted by id). Token
    j comes from the query at position ``length + j - 1`` (j = 0: the prefill's last position)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=checkpoint, skip_tokenizer_init=True, dtype={"fp32": "float32", "bf16": "bfloat16"}[dtype],
              enforce_eager=True, max_model_len=256, seed=0, enable_prefix_caching=False)
    prompts = [TokensPrompt(prompt_token_ids=[(7 * i + 11) % 4000 + 5 for i in range(n)]) for n in LENGTHS]
    params = SamplingParams(max_tokens=STEPS, temperature=0.0, logprobs=TOP, ignore_eos=True, detokenize=False)
    out = []
    for result in llm.generate(prompts, params, use_tqdm=False):
        gen = result.outputs[0]
        out.append([[step[token].logprob, *(step[k].logprob for k in sorted(step))]
                    for token, step in zip(gen.token_ids, gen.logprobs)])
    return out


if __name__ == "__main__":
    with open(sys.argv[3], "w") as f:
        json.dump(step_logprobs(sys.argv[1], sys.argv[2]), f)
