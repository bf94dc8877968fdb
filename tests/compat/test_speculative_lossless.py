"""Speculative decoding is lossless: greedy output with any draft is token-identical to the target
alone, at batch 1 and batched (rows of different lengths), with the harness's draft-then-verify loop
and with transformers' assisted decoding (batch 1, all it supports). On the embedded default both
ends of acceptance are exercised: the target drafting for itself (exactly 1.0) and
carbon-tiny-draft's unrelated weights (~0)."""

from __future__ import annotations

import pytest

from harness.backends.base import Batch
from harness.core.errors import BackendError
from harness.core.spec import RunShape
from harness.core.speculation import SELF_DRAFT
from harness.workloads.speculative import assisted_generate, loop_unavailable_reason, speculative_generate
from tests.helpers import lossless_prompts

pytestmark = pytest.mark.compat

NEW_TOKENS = 12
SHAPE = RunShape("speculative-compat", batch_size=4, max_context_length=64, seq_len=64 + NEW_TOKENS,
                 max_new_tokens=NEW_TOKENS)


@pytest.fixture
def pair(carbon_session, carbon_model, carbon_draft):
    cfg = carbon_session.config
    reason = loop_unavailable_reason(cfg.backend, cfg.neuron_cpu, cfg.hf_compile)
    if reason:
        pytest.skip(reason)
    target = carbon_session.engine(carbon_model, SHAPE)
    draft = carbon_session.draft_engine(carbon_draft, carbon_model, SHAPE)
    return target, draft


@pytest.fixture
def prompts() -> list[str]:
    """Four prompts of different token lengths (right padding), DNA and text."""
    return lossless_prompts()


@pytest.fixture(scope="session")
def target_alone(carbon_session):
    """The target's own greedy tokens per (model, prompts), generated once per session."""
    memo = {}

    def get(model, tokenizer, prompts):
        key = (model.label, tuple(prompts))
        if key not in memo:
            memo[key] = carbon_session.engine(model, SHAPE).generate(Batch.from_prompts(tokenizer, prompts),
                                                                     NEW_TOKENS).tokens
        return memo[key]

    return get


def test_lossless_at_batch_1(pair, carbon_model, carbon_model_tokenizer, prompts, target_alone):
    target, draft = pair
    for prompt, k in zip(prompts, (1, 2, 3, 4)):
        result = speculative_generate(target, draft, Batch.from_prompts(carbon_model_tokenizer, [prompt]), NEW_TOKENS, k)
        expected = target_alone(carbon_model, carbon_model_tokenizer, [prompt])
        assert result.tokens.equal(expected), f"k={k}, prompt {prompt[:20]!r}: speculative output differs"
        assert sum(result.advanced) == NEW_TOKENS - 1  # every token after the prefill's comes from a step


@pytest.mark.parametrize("k", [1, 4])
def test_lossless_batched(pair, carbon_model, carbon_model_tokenizer, prompts, target_alone, k):
    target, draft = pair
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts)
    assert len(set(batch.prompt_lengths.tolist())) == len(prompts)  # every row padded differently
    result = speculative_generate(target, draft, batch, NEW_TOKENS, k)
    assert result.tokens.equal(target_alone(carbon_model, carbon_model_tokenizer, prompts))
    for i, prompt in enumerate(prompts):  # the batch is what each row gives alone
        assert result.tokens[i].equal(target_alone(carbon_model, carbon_model_tokenizer, [prompt])[0])


def test_acceptance_ends_on_the_embedded_default(pair, carbon_model, carbon_draft, carbon_model_tokenizer, prompts):
    """Self-drafting accepts every draft token; carbon-tiny-draft (unrelated random weights) almost none."""
    if carbon_model.label != "carbon-tiny" or carbon_draft.label not in (SELF_DRAFT, "carbon-tiny-draft"):
        pytest.skip("the acceptance ends are known for carbon-tiny with self or carbon-tiny-draft only")
    target, draft = pair
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts)
    result = speculative_generate(target, draft, batch, NEW_TOKENS, 4)
    if carbon_draft.label == SELF_DRAFT:
        assert result.acceptance_rate == 1.0
        assert result.advanced == [5, 5, 1]  # k + 1 tokens per step; the last step has one token left
    else:
        assert result.acceptance_rate < 0.05
        assert result.tokens_per_step < 1.2


def test_assisted_decoding_is_lossless(pair, carbon_model, carbon_model_tokenizer, prompts, target_alone):
    """transformers' ``generate(assistant_model=...)``, EOS off, constant draft length."""
    target, draft = pair
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts[:1])
    expected = target_alone(carbon_model, carbon_model_tokenizer, prompts[:1])
    assert assisted_generate(target, draft, batch, NEW_TOKENS, 4).tokens.equal(expected)
    assert assisted_generate(target, None, batch, NEW_TOKENS, 4).tokens.equal(expected)


def test_bad_pairings_are_refused(pair, carbon_model_tokenizer, prompts):
    target, draft = pair
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts)
    with pytest.raises(BackendError, match="assisted decoding runs batch 1 only, got a batch of 4"):
        assisted_generate(target, draft, batch, NEW_TOKENS)
    with pytest.raises(BackendError, match="the draft must be its own engine"):
        speculative_generate(target, target, batch, NEW_TOKENS)
    with pytest.raises(ValueError, match="exceeds shape 'speculative-compat' seq_len"):
        speculative_generate(target, draft, batch, NEW_TOKENS + 64)
