"""Scoring through a real vLLM server's prompt logprobs (the openai backend on a scoring shape) against
transformers on the served checkpoint: the 6-mer distribution at every position, position 0 included, and
every score built on it (variant effects, a scan, bp-level sequence scores), at fp32 tolerance.

The server is the one the session starts on the checkpoint's DNA-block view (``--carbon-serve vllm``), where
all 4,107 ids come back at every position; a server at ``--carbon-endpoint`` serves a full vocabulary, whose
top-k is refused (``test_vllm_server.py::test_full_vocabulary_top_k_is_refused_not_approximated``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.backends.base import Batch
from harness.backends.openai import OpenAIEngine
from harness.carbon.dna import prompt_suite
from harness.carbon.fns import kmer_block
from harness.core.errors import BackendCannot
from harness.core.spec import get_shape
from harness.workloads.scoring import scan_window, score_sequences, score_variants

pytestmark = [pytest.mark.serving, pytest.mark.compat]

SHAPE = get_shape("vep-bs8")
# vLLM and transformers both run fp32 on the same weights (measured: < 1e-6 on carbon-tiny's 6-mer log-probabilities)
LOGPROB_ATOL = 1e-5
SCORE_RTOL = 1e-5


@pytest.fixture(scope="module")
def served(carbon_session, carbon_endpoint, served_checkpoint):
    """The openai engine on the session's DNA-block view server of the served checkpoint."""
    if carbon_session.config.serve != "vllm":
        pytest.skip("exact served scoring needs the DNA-block view server that --carbon-serve vllm starts; a server "
                    "at --carbon-endpoint serves a full vocabulary (its top-k refusal is tested in test_vllm_server.py)")
    return OpenAIEngine(carbon_session.scoring_endpoint(served_checkpoint), SHAPE, "served",
                        checkpoint=str(served_checkpoint))


@pytest.fixture(scope="module")
def hf(served_hf_engine):
    return served_hf_engine(SHAPE)


@pytest.fixture(scope="module")
def ragged(carbon_tokenizer) -> Batch:
    """Three right-padded DNA rows of different lengths, one ending in a partial 6-mer."""
    suite = prompt_suite(600)
    return Batch.from_prompts(carbon_tokenizer, [suite[0].prompt, suite[1].prompt[:200], "<dna>ACGTACGGTTAAC"])


def test_kmer_logprobs_equal_hf_at_every_position(served, hf, ragged):
    got, want = served.kmer_logits(ragged), kmer_block(hf.logits(ragged))
    assert got.shape == (ragged.size, ragged.input_ids.shape[1], 4096)
    for row, n in enumerate(ragged.prompt_lengths.tolist()):
        # the server returns log-probabilities, transformers logits: equal up to one constant per position
        diff = (torch.log_softmax(got[row, :n].double(), -1) - torch.log_softmax(want[row, :n].double(), -1)).abs()
        worst = diff.amax(-1)
        assert worst.max().item() < LOGPROB_ATOL, (f"row {row}: position {int(worst.argmax())} differs by "
                                                   f"{worst.max():.2e}")
        assert torch.isnan(got[row, n:]).all(), "positions past a row's length were scored by nothing"


def test_variant_scores_equal_hf(served, hf, carbon_tokenizer, scoring_window, scoring_variants):
    got = score_variants(served, carbon_tokenizer, scoring_window, scoring_variants)
    want = score_variants(hf, carbon_tokenizer, scoring_window, scoring_variants)
    assert [s.variant for s in got.scores] == [s.variant for s in want.scores]
    for g, w in zip(got.scores, want.scores):
        assert (g.ref_log_prob, g.alt_log_prob) == pytest.approx((w.ref_log_prob, w.alt_log_prob), rel=SCORE_RTOL)
        assert (g.window_ll_ref, g.window_ll_alt) == pytest.approx((w.window_ll_ref, w.window_ll_alt), rel=SCORE_RTOL)


@pytest.mark.parametrize("trim", [0, 3], ids=["whole-6mers", "trailing-partial-6mer"])
def test_scan_equals_hf_base_by_base(served, hf, carbon_tokenizer, scoring_window, trim):
    window = replace(scoring_window, sequence=scoring_window.sequence[: len(scoring_window.sequence) - trim])
    got, want = scan_window(served, carbon_tokenizer, window), scan_window(hf, carbon_tokenizer, window)
    assert got.log_probs.shape == (len(window.sequence),)  # every base, a trailing partial 6-mer's included
    np.testing.assert_allclose(got.log_probs, want.log_probs, rtol=SCORE_RTOL, atol=1e-6)


def test_sequence_scores_equal_hf(served, hf, carbon_tokenizer):
    seqs = [c.sequence[: 120 + 7 * i] for i, c in enumerate(prompt_suite(180)[:3])]  # 0, 1 and 2 bases past a 6-mer
    for g, w in zip(score_sequences(served, carbon_tokenizer, seqs), score_sequences(hf, carbon_tokenizer, seqs)):
        assert g.sequence == w.sequence
        np.testing.assert_allclose(g.base_probs, w.base_probs, rtol=SCORE_RTOL)


def test_a_text_token_is_refused_naming_it(served, carbon_tokenizer):
    batch = Batch.from_prompts(carbon_tokenizer, ["hi <dna>ACGTAC"])
    text_id = batch.input_ids[0, 0].item()
    with pytest.raises(ValueError, match=f"token {text_id} is not in the vocabulary of .*DNA-block view.* it scores "
                                         r"<dna> \+ 6-mer prompts only"):
        served.kmer_logits(batch)


def test_the_scoring_engine_generates_nothing(served, ragged):
    assert served.info.extra["build"] == "scoring" and "DNA-block view" in served.info.extra["scoring"]
    with pytest.raises(BackendCannot, match="'vep-bs8' is a scoring shape"):
        served.generate(ragged, 2)
    with pytest.raises(BackendCannot, match="scoring reads kmer_logits"):
        served.logits(ragged)
