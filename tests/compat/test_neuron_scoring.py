"""The neuron scoring build (``harness.backends.neuron.scoring``) against transformers, in NxDI's CPU
mode on the embedded default: the 6-mer logits at every real position, position 0 included, and
every score built on them (variant effects, a scan, bp-level sequence scores) equal to hf's at fp32
tolerance. The scoring build is NxDI's own Llama with two changes, so these run NxDI's real code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.backends.base import Batch
from harness.carbon.dna import prompt_suite
from harness.carbon.fns import kmer_block
from harness.core.errors import BackendCannot
from harness.core.spec import get_shape
from harness.workloads.scoring import scan_window, score_sequences, score_variants

pytestmark = [pytest.mark.compat, pytest.mark.neuron]

SHAPE = get_shape("vep-bs8")
# NxDI's CPU mode and transformers both run fp32 on the same weights: logits differ by rounding only
# (measured: < 5e-7 on carbon-tiny); scores are sums over up to 1,530 bases.
LOGITS_ATOL = 1e-5
SCORE_RTOL = 1e-5


@pytest.fixture(scope="module")
def neuron(nxdi_cpu_engine):
    return nxdi_cpu_engine(SHAPE)


@pytest.fixture(scope="module")
def hf(tiny_hf_engine):
    return tiny_hf_engine(SHAPE)


@pytest.fixture(scope="module")
def ragged(carbon_tokenizer) -> Batch:
    """Three right-padded rows of different lengths (DNA, DNA, text then DNA)."""
    suite = prompt_suite(600)
    return Batch.from_prompts(carbon_tokenizer, [suite[0].prompt, suite[1].prompt[:200], "hi <dna>ACGTACGGTTAA"])


def test_kmer_logits_match_hf_at_every_real_position(neuron, hf, ragged):
    got, want = neuron.kmer_logits(ragged), kmer_block(hf.logits(ragged))
    assert got.shape == (ragged.size, ragged.input_ids.shape[1], 4096)
    for row, n in enumerate(ragged.prompt_lengths.tolist()):
        diff = (got[row, :n] - want[row, :n]).abs().amax(-1)  # per position, 0 (after <dna> or text) included
        assert diff.max().item() < LOGITS_ATOL, f"row {row}: worst position {int(diff.argmax())} differs by {diff.max():.2e}"


def test_variant_scores_match_hf(neuron, hf, carbon_tokenizer, scoring_window, scoring_variants):
    got = score_variants(neuron, carbon_tokenizer, scoring_window, scoring_variants)
    want = score_variants(hf, carbon_tokenizer, scoring_window, scoring_variants)
    assert [s.variant for s in got.scores] == [s.variant for s in want.scores]
    for g, w in zip(got.scores, want.scores):
        assert (g.ref_log_prob, g.alt_log_prob) == pytest.approx((w.ref_log_prob, w.alt_log_prob), rel=SCORE_RTOL)
        assert (g.window_ll_ref, g.window_ll_alt) == pytest.approx((w.window_ll_ref, w.window_ll_alt), rel=SCORE_RTOL)


def test_scan_matches_hf_base_by_base(neuron, hf, carbon_tokenizer, scoring_window):
    got, want = scan_window(neuron, carbon_tokenizer, scoring_window), scan_window(hf, carbon_tokenizer, scoring_window)
    np.testing.assert_allclose(got.log_probs, want.log_probs, rtol=SCORE_RTOL, atol=1e-6)


def test_sequence_scores_match_hf(neuron, hf, carbon_tokenizer):
    seqs = [c.sequence[: 120 + 6 * i] for i, c in enumerate(prompt_suite(180)[:3])]
    for g, w in zip(score_sequences(neuron, carbon_tokenizer, seqs), score_sequences(hf, carbon_tokenizer, seqs)):
        assert g.sequence == w.sequence
        np.testing.assert_allclose(g.base_probs, w.base_probs, rtol=SCORE_RTOL)


def test_the_scoring_engine_generates_nothing(neuron, ragged):
    assert neuron.info.extra["build"] == "scoring"
    with pytest.raises(BackendCannot, match="'vep-bs8' is a scoring shape"):
        neuron.generate(ragged, 2)
    with pytest.raises(BackendCannot, match="scoring reads kmer_logits"):
        neuron.logits(ragged)
    assert torch.equal(neuron.kmer_logits(ragged), neuron.kmer_logits(ragged))  # no state carried between calls
