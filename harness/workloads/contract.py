"""The output contract one side of a release check writes, whatever its stack: for each DNA prompt of
the suite, its greedy tokens and, teacher-forced, the log-probability and top-2 of every position.

Two sequences are scored per prompt: the side's own (prompt + its greedy tokens: where two sides
diverge, both were conditioned on the same prefix, so each side's top-2 margin at the first divergent
position says how close to a tie it was), and, given a reference (the fp32 transformers run of the
same checkpoint), the reference's (prompt + the reference's greedy tokens), which every side scores
alike, so any two sides and the reference compare position by position
(``harness.analysis.contract``). Scoring starts at the prompt's third token (``SCORED_FROM``): the
prompt's own teacher-forced log-probabilities are part of the contract, as vLLM's prompt logprobs give them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.backends.base import Batch, Engine
from harness.carbon.dna import prompt_suite
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.spec import RunShape

CONTRACT_SCHEMA = 1
PROMPTS = 3  # the suite's first cases (balanced, AT-rich, GC-rich): three compositions, seconds per side
NEW_TOKENS = 16
TOP_K = 2
# scoring along a sequence starts after its first two tokens: NxDI 0.9 refuses a 1-token prompt (it reads
# a pad slot for it), and every stack can score from a 2-token prefix
SCORED_FROM = 2


def contract_prompts(shape: RunShape) -> list[tuple[str, str]]:
    """(case name, prompt) of the contract, each ``shape.prompt_bp`` long so it fits the shape."""
    bp = shape.prompt_bp or shape.max_context_length * 6 - 6
    return [(case.name, case.prompt) for case in prompt_suite(bp)[:PROMPTS]]


def contract_file(model: str, shape: str) -> str:
    """The file one (model, shape)'s contract is written to, in --carbon-contract-out DIR."""
    return f"contract-{model}-{shape}.json"


def new_tokens(shape: RunShape) -> int:
    return min(NEW_TOKENS, shape.max_new_tokens)


def collect(engine: Engine, tokenizer: CarbonTokenizer, shape: RunShape, fingerprint: str,
            reference: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The side's contract. ``reference``: the reference's own contract (its greedy tokens are scored
    here too); the prompts must be the reference's, or the comparison would be of different inputs."""
    n = new_tokens(shape)
    ref_prompts = {p["name"]: p for p in (reference or {}).get("prompts", [])}
    prompts = []
    for name, text in contract_prompts(shape):
        ids = tokenizer(text)["input_ids"]
        if reference is not None:
            ref = ref_prompts.get(name)
            if ref is None or ref["prompt_ids"] != ids:
                raise ValueError(f"the reference contract's prompt {name!r} is not this side's: the two ran different "
                                 "prompt suites or tokenizers")
        engine.reset()
        greedy = engine.generate(Batch.from_ids([ids]), n).tokens[0].tolist()
        engine.reset()
        own = engine.scored(ids, greedy, TOP_K)
        engine.reset()
        scored_greedy = ref_prompts[name]["greedy"] if reference is not None else greedy
        along = engine.scored(ids[:SCORED_FROM], [*ids[SCORED_FROM:], *scored_greedy], TOP_K)
        engine.reset()
        prompts.append({"name": name, "prompt_ids": list(ids), "greedy": greedy,
                        "own": [r.to_list() for r in own], "scored_greedy": list(scored_greedy),
                        "scored": [r.to_list() for r in along]})
    info = engine.info
    return {"schema": CONTRACT_SCHEMA, "backend": info.backend, "dtype": info.dtype, "model": info.model,
            "shape": shape.name, "checkpoint_fingerprint": fingerprint, "new_tokens": n, "top_k": TOP_K,
            "reference": reference is None, "pad_token_id": tokenizer.pad_token_id, "prompts": prompts}

