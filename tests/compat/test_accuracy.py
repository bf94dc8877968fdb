"""Accuracy contracts: bf16 matches the fp32 reference within NxD's logit tolerances, a
perturbed weight is caught, the fp32 engine agrees with plain transformers, and fp32 greedy tokens match the
golden outputs (which transformers' own ``generate`` also reproduces)."""

from __future__ import annotations

import json

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.hf import HFEngine
from harness.carbon.dna import prompt_suite
from harness.core.paths import FIXTURES_DIR
from harness.core.spec import RunShape, SpecError, get_shape
from harness.workloads.accuracy import check_accuracy, compare_logits
from harness.workloads.golden import GOLDEN_TOKENS, NOTE, REGENERATE, compare_golden

pytestmark = pytest.mark.compat

SHAPE = RunShape("accuracy-bs7", batch_size=7, max_context_length=256, seq_len=256 + GOLDEN_TOKENS,
                 max_new_tokens=GOLDEN_TOKENS)
GOLDEN = FIXTURES_DIR / "golden" / "carbon-tiny-seed0.json"


@pytest.fixture
def reference(tiny_hf_engine):
    return tiny_hf_engine(SHAPE)


@pytest.fixture(scope="module")
def suite_batch(carbon_tokenizer):
    return Batch.from_prompts(carbon_tokenizer, [c.prompt for c in prompt_suite(180)])


def test_bf16_matches_fp32_reference(reference, tiny_hf_engine, suite_batch):
    candidate = tiny_hf_engine(SHAPE, "bf16")
    report = check_accuracy(reference, candidate, suite_batch, GOLDEN_TOKENS)
    assert report.passed, report.summary()
    assert report.positions == 7 * GOLDEN_TOKENS
    assert report.top1_agreement > 0.9 and report.max_abs_error > 0  # bf16 really differs, within tolerance


def test_a_perturbed_weight_fails(reference, carbon_tiny_checkpoint, suite_batch):
    candidate = HFEngine(carbon_tiny_checkpoint, SHAPE, "carbon-tiny", device="cpu", dtype="fp32", share_weights=False)
    with torch.no_grad():
        candidate.model.model.layers[1].mlp.down_proj.weight[5, 7] += 1.0
    report = check_accuracy(reference, candidate, suite_batch, GOLDEN_TOKENS)
    assert not report.passed
    assert any("error" in f for f in report.failures) and "FAILED" in report.summary()


@pytest.fixture(scope="module")
def oracle(carbon_tiny_checkpoint):
    """Plain transformers on the same checkpoint: its own forward and ``generate``, no harness engine code
    in the path, so the checks below compare the harness with something it did not compute."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(carbon_tiny_checkpoint), dtype=torch.float32).eval()


def oracle_greedy(oracle, ids: list[int], n: int) -> list[int]:
    """transformers' own greedy ``generate`` (no eos stop: the harness engines always run all ``n`` steps)."""
    prompt = torch.tensor([ids])
    with torch.no_grad():
        out = oracle.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=oracle.generation_config.pad_token_id)
    return out[0, len(ids):].tolist()


def test_engine_matches_plain_transformers(reference, oracle, suite_batch):
    """The fp32 reference engine (right-padded batch of 7, KV-cached decode) gives transformers' own greedy
    tokens, and teacher-forced logits equal to one unpadded transformers forward over prompt + continuation."""
    tokens = reference.generate(suite_batch, 8).tokens
    forced = reference.continuation_logits(suite_batch, tokens).reshape(len(tokens), 8, -1)
    for row, length in enumerate(suite_batch.attention_mask.sum(dim=1).tolist()):
        ids = suite_batch.input_ids[row, :length].tolist()
        assert tokens[row].tolist() == oracle_greedy(oracle, ids, 8), f"row {row}: greedy tokens differ"
        with torch.no_grad():
            full = oracle(torch.tensor([ids + tokens[row].tolist()])).logits[0, length - 1:length + 7]
        err = (forced[row] - full).abs().max().item()
        assert err < 1e-5, f"row {row}: max |logit error| {err:.3g} vs plain transformers"


def test_near_tie_divergence_is_acceptable_and_a_real_one_is_not():
    expected = torch.tensor([[5.0, 4.9995, 0.0, -1.0, -2.0, -3.0]])
    tie = torch.tensor([[4.9995, 5.0, 0.0, -1.0, -2.0, -3.0]])  # argmax flips on a 5e-4 gap
    assert compare_logits(expected, tie, tol_map={}).passed
    wrong = torch.tensor([[4.0, 5.0, 0.0, -1.0, -2.0, -3.0]])
    report = compare_logits(expected, wrong, tol_map={})
    assert not report.passed and "diverged" in report.failures[0] and report.first_divergence == 0


def test_constant_shift_is_ignored():
    expected = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0))
    assert compare_logits(expected, expected + 3.0).passed


def test_golden_outputs(reference, carbon_tokenizer):
    """The harness's HFEngine still gives the committed golden tokens. The golden was written by that same
    engine (`carbon-harness golden`), so this detects change, not correctness: the independent oracle is
    ``test_golden_tokens_are_plain_transformers_greedy``."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["num_tokens"] == GOLDEN_TOKENS and golden["dtype"] == "fp32"
    actual = {}
    for case in prompt_suite(golden["prompt_bp"]):
        actual[case.name] = reference.generate(Batch.from_prompts(carbon_tokenizer, [case.prompt]),
                                               GOLDEN_TOKENS).tokens[0].tolist()
    problems = compare_golden(golden, actual)
    assert not problems, ("greedy tokens differ from the golden outputs: " + "; ".join(problems)
                          + ". If the change is deliberate, regenerate: "
                          + REGENERATE.format(model="carbon-tiny", path=GOLDEN.relative_to(FIXTURES_DIR.parent)))


def test_teacher_forcing_fits_whatever_generate_fits(tiny_hf_engine, carbon_tokenizer):
    """A 30-token prompt + 8 new tokens fits smoke (ctx 32, seq 160) for generate, so it must for the
    accuracy check too: teacher forcing prefills the prompt and decode-steps the continuation,
    rather than running 38 tokens as one prompt."""
    smoke = get_shape("smoke")
    engine = tiny_hf_engine(smoke)
    batch = Batch.from_prompts(carbon_tokenizer, ["<dna>" + "ACGTTG" * 29])
    assert batch.max_prompt_tokens == 30
    report = check_accuracy(engine, engine, batch, 8)
    assert report.passed and report.positions == 8 and report.top1_agreement == 1.0
    # the teacher-forced logits are those of a full forward pass over prompt + continuation
    tokens = engine.generate(batch, 8).tokens
    forced = engine.continuation_logits(batch, tokens)
    wide = tiny_hf_engine(SHAPE)
    full = wide.logits(Batch.from_ids([batch.input_ids[0].tolist() + tokens[0].tolist()]))[0, 29:37]
    assert torch.allclose(forced, full, atol=1e-4)
    with pytest.raises(SpecError, match="exceeds shape 'smoke' seq_len=160"):
        engine.continuation_logits(batch, torch.zeros(1, 131, dtype=torch.long))


def oracle_golden_problems(golden: dict, oracle, tokenizer) -> list[str]:
    """Every golden case whose tokens are not plain transformers' greedy continuation of that case's prompt.

    The golden file records no prompt ids, so the prompts are encoded by the harness tokenizer (itself held
    to the published ``tokenizers`` ids by the property tests); the generation is transformers' alone."""
    problems = []
    for case in prompt_suite(golden["prompt_bp"]):
        want = golden["cases"][case.name]["tokens"]
        got = oracle_greedy(oracle, tokenizer.encode(case.prompt), golden["num_tokens"])
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            problems.append(f"{case.name}: token {first} is {got[first]} from transformers, golden {want[first]}")
    return problems


def test_golden_tokens_are_plain_transformers_greedy(oracle, carbon_tokenizer, tmp_path):
    """The golden file was written by the harness's own HFEngine, so ``test_golden_outputs`` only detects
    change; this is its correctness check: transformers' own ``generate`` (greedy, no eos stop, as the
    golden's engine) reproduces every golden token, and a one-token change to a copy of the file is caught."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["num_tokens"] == GOLDEN_TOKENS and golden["dtype"] == "fp32" and golden["device"] == "cpu"
    assert golden["note"] == NOTE  # the file itself says it detects change, not correctness
    assert set(golden["cases"]) == {c.name for c in prompt_suite(golden["prompt_bp"])}
    assert oracle_golden_problems(golden, oracle, carbon_tokenizer) == []
    planted = tmp_path / GOLDEN.name
    planted.write_text(GOLDEN.read_text())
    changed = json.loads(planted.read_text())
    changed["cases"]["cpg_island"]["tokens"][5] += 1
    assert oracle_golden_problems(changed, oracle, carbon_tokenizer) == [
        f"cpg_island: token 5 is {golden['cases']['cpg_island']['tokens'][5]} from transformers, "
        f"golden {golden['cases']['cpg_island']['tokens'][5] + 1}"]
