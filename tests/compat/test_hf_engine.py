"""The transformers engine's contracts: right padding is invisible, EOS never stops a run,
shapes are enforced, and prefill/decode agree with a plain full forward pass."""

from __future__ import annotations

import inspect
import logging

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.hf import HFEngine, cache_argument
from harness.carbon.dna import prompt_suite
from harness.carbon.fns import kmer_block
from harness.core.spec import SHAPES, RunShape, SpecError

pytestmark = pytest.mark.compat

SHAPE = RunShape("test-bs4", batch_size=4, max_context_length=64, seq_len=96, max_new_tokens=16)


@pytest.fixture
def engine(tiny_hf_engine):
    return tiny_hf_engine(SHAPE)


@pytest.fixture(scope="module")
def prompts():
    cases = prompt_suite(300)
    return [cases[0].prompt[: 5 + 60], cases[1].prompt[: 5 + 150], "The TATA box <dna>" + cases[5].sequence[:90],
            cases[6].prompt[: 5 + 12]]


def test_right_padded_rows_generate_what_each_prompt_generates_alone(engine, carbon_tokenizer, prompts):
    batch = Batch.from_prompts(carbon_tokenizer, prompts)
    assert len(set(batch.prompt_lengths.tolist())) == 4  # really unequal
    together = engine.generate(batch, 12).tokens
    for row, prompt in enumerate(prompts):
        alone = engine.generate(Batch.from_prompts(carbon_tokenizer, [prompt]), 12).tokens[0]
        assert together[row].tolist() == alone.tolist(), f"row {row} differs from its prompt alone"
    assert len({tuple(r) for r in together.tolist()}) == 4  # the synthetic model is not degenerate


def test_exactly_max_new_tokens_with_timings(engine, carbon_tokenizer, prompts):
    result = engine.generate(Batch.from_prompts(carbon_tokenizer, prompts[:2]), SHAPE.max_new_tokens)
    assert result.tokens.shape == (2, SHAPE.max_new_tokens)
    assert len(result.tkg_ms) == SHAPE.max_new_tokens - 1
    assert result.cte_ms > 0 and all(t > 0 for t in result.tkg_ms) and result.e2e_ms >= result.cte_ms


def test_eos_does_not_stop_generation(engine, carbon_tokenizer, carbon_tiny_checkpoint):
    """The published config says eos 2 (a BPE '#'); a fixed-length benchmark must run past it."""
    import json

    assert json.loads((carbon_tiny_checkpoint / "config.json").read_text())["eos_token_id"] == 2
    batch = Batch.from_ids([[2, 2, 2, 151643]])  # even a prompt made of eos/pad ids
    assert engine.generate(batch, 10).tokens.shape == (1, 10)


def test_prefill_and_decode_agree_with_full_forward(engine, carbon_tokenizer, prompts):
    batch = Batch.from_prompts(carbon_tokenizer, prompts[:1])
    tokens = engine.generate(batch, 4).tokens[0].tolist()
    ids = batch.input_ids[0].tolist()
    for t in tokens:
        logits = engine.logits(Batch.from_ids([ids]))
        assert int(logits[0, -1].argmax()) == t
        ids.append(t)


def test_logits_shape_and_dtype(engine, carbon_tokenizer, prompts):
    logits = engine.logits(Batch.from_prompts(carbon_tokenizer, prompts[:2]))
    assert logits.dtype == torch.float32 and logits.shape[0] == 2 and logits.shape[2] == 155776


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_6mer_head_is_the_full_heads_6mer_columns(tiny_hf_engine, carbon_tokenizer, prompts, dtype):
    """kmer_logits skips the rest of the lm head: the same matmul on the same rows (the same bits on this CPU
    path; a GPU may tile a narrower matmul differently)."""
    engine = tiny_hf_engine(SHAPE, dtype)
    batch = Batch.from_prompts(carbon_tokenizer, prompts)
    got, want = engine.kmer_logits(batch), kmer_block(engine.logits(batch))
    real = batch.attention_mask.bool()
    assert got.shape == want.shape and got.dtype == torch.float32
    assert torch.equal(got[real], want[real])


def test_prompt_longer_than_the_context_is_refused(engine, carbon_tokenizer):
    batch = Batch.from_prompts(carbon_tokenizer, ["<dna>" + "ACGTAC" * 70])
    with pytest.raises(SpecError, match="prompt of 71 tokens exceeds shape 'test-bs4' max_context_length=64"):
        engine.generate(batch, 4)


def test_generation_past_seq_len_is_refused(engine, carbon_tokenizer):
    batch = Batch.from_prompts(carbon_tokenizer, ["<dna>" + "ACGTAC" * 60])
    with pytest.raises(SpecError, match="exceeds shape 'test-bs4' seq_len=96"):
        engine.generate(batch, 40)


def test_decode_before_prefill_is_an_error(engine):
    engine.reset()
    with pytest.raises(RuntimeError, match="before prefill"):
        engine.decode_step()


def test_reference_shape_holds_the_reference_prompts(carbon_tokenizer):
    suite = Batch.from_prompts(carbon_tokenizer, [c.prompt for c in prompt_suite(1080)])
    SHAPES["dna-suite-bs1"].validate_request(suite.max_prompt_tokens, 180, 1)
    assert suite.max_prompt_tokens == 181


def test_engines_of_several_shapes_share_one_copy_of_the_weights(tiny_hf_engine, carbon_tiny_checkpoint):
    a = tiny_hf_engine(SHAPE)
    b = tiny_hf_engine(SHAPES["smoke"])
    assert a.model is b.model and b.info.extra["shared_weights"]
    private = HFEngine(carbon_tiny_checkpoint, SHAPE, "carbon-tiny", device="cpu", dtype="fp32", share_weights=False)
    assert private.model is not a.model and not private.info.extra["shared_weights"]
    assert tiny_hf_engine(SHAPE, "bf16").model is not a.model  # another dtype is another copy


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.filterwarnings("error:.*deprecated:FutureWarning", "error:.*deprecated:DeprecationWarning")
def test_the_engine_passes_the_kv_cache_by_the_name_the_installed_transformers_takes(engine, carbon_tokenizer,
                                                                                     prompts):
    """transformers 5.x renamed the decoder's ``past_key_values`` to ``cache`` (the old name warns at every
    call and goes in 5.40); 4.57 (the Trn2 stack's) has only the old one. Every cache path of the engine
    (prefill, decode, multi-token extend, rewind, teacher forcing) runs here with transformers' deprecation
    warnings turned into errors and its logger watched: none comes from the harness, on either."""
    assert cache_argument(engine.model.model) == (
        "cache" if "cache" in inspect.signature(engine.model.model.forward).parameters else "past_key_values")
    watched = Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(watched)
    try:
        batch = Batch.from_prompts(carbon_tokenizer, prompts[:2])
        result = engine.generate(batch, 4)
        engine.extend_logits(result.tokens[:, :2])
        engine.rewind(1)
        engine.continuation_logits(batch, result.tokens[:, :3])
    finally:
        logger.removeHandler(watched)
    assert not [m for m in watched.messages if "deprecat" in m.lower()], watched.messages


def test_a_batch_of_mixed_lengths_scores_each_row_as_its_prompt_alone(engine, carbon_tokenizer, prompts):
    """``score_batched`` (the output contract's batched rows): each row of a batch of mixed lengths, right-padded
    and decoded together, scores its own continuation as the same prompt's single run does, up to fp32 rounding
    of other kernel shapes; and a row given another row's continuation length is refused."""
    ids = [list(carbon_tokenizer(p)["input_ids"]) for p in prompts[:2]]
    assert len(ids[0]) != len(ids[1])
    greedy = [engine.generate(Batch.from_ids([i]), 5).tokens[0].tolist() for i in ids]
    engine.reset()
    batched = engine.score_batched(ids, greedy, carbon_tokenizer.pad_token_id, 20)
    for i, g, rows in zip(ids, greedy, batched):
        alone, _ = engine.score(i, g, 20)
        assert [r.token for r in rows] == g == [r.token for r in alone]
        assert max(abs(a.logprob - b.logprob) for a, b in zip(rows, alone)) < 1e-4
        assert [t for t, _ in rows[0].top[:5]] == [t for t, _ in alone[0].top[:5]]
    with pytest.raises(ValueError, match="one continuation per prompt, all of one length"):
        engine.score_batched(ids, [greedy[0], greedy[1][:3]], carbon_tokenizer.pad_token_id, 20)


def test_a_batch_larger_than_the_shape_is_refused_before_scoring(tiny_hf_engine, carbon_tokenizer, prompts):
    engine = tiny_hf_engine(SHAPES["smoke"])
    ids = [list(carbon_tokenizer(p)["input_ids"])[:20] for p in prompts[:2]]
    with pytest.raises(SpecError, match="batch of 2 prompts exceeds shape 'smoke' batch_size=1"):
        engine.score_batched(ids, [[5, 6], [7, 8]], carbon_tokenizer.pad_token_id, 5)


def test_the_long_prompt_mixes_text_and_dna_and_fills_the_context_to_within_one_6mer(carbon_tokenizer):
    from harness.workloads.contract import LONG_TEXT, long_prompt_ids

    shape = SHAPES["contract-long"]
    ids = long_prompt_ids(carbon_tokenizer, shape)
    text = carbon_tokenizer.decode(ids)
    assert text.startswith(LONG_TEXT.strip()[:20]) and "<dna>" in text
    assert shape.max_context_length - 1 <= len(ids) <= shape.max_context_length
    with pytest.raises(ValueError, match="holds no 6-mer after the long prompt's"):
        long_prompt_ids(carbon_tokenizer, RunShape("tiny", 1, 8, 16, 4))
