"""bp-level scoring of DNA sequences through FNS marginals on the embedded default."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.carbon.dna import prompt_suite
from harness.carbon.fns import KMER_START, KMERS
from harness.core.spec import RunShape
from harness.workloads.scoring import score_sequence, score_sequences

pytestmark = pytest.mark.dna


@pytest.fixture
def engine(tiny_hf_engine):
    return tiny_hf_engine(RunShape("score", 8, 256, 256, 1))


def test_scores_are_probabilities(engine, carbon_tokenizer):
    s = score_sequence(engine, carbon_tokenizer, prompt_suite(120)[0].sequence)
    assert s.base_probs.shape == (120,)
    assert ((s.base_probs > 0) & (s.base_probs <= 1)).all()
    assert math.isfinite(s.mean_log_likelihood) and s.mean_log_likelihood < 0


def test_batched_scores_equal_single_scores(engine, carbon_tokenizer):
    seqs = [c.sequence[: 60 + 6 * i] for i, c in enumerate(prompt_suite(120))]
    batched = score_sequences(engine, carbon_tokenizer, seqs)
    for seq, b in zip(seqs, batched):
        np.testing.assert_allclose(b.base_probs, score_sequence(engine, carbon_tokenizer, seq).base_probs, rtol=1e-4)


def test_a_trailing_partial_kmers_real_bases_are_scored_and_its_padding_is_not(engine, carbon_tokenizer):
    """The published FNS token mask's rule: a trailing block of r bases (padded with A by the tokenizer)
    is scored on its r real bases, from the marginals predicted for it by the 6-mers before it; checked
    by brute force over the 4,096 6-mer strings on transformers' own logits."""
    s = score_sequence(engine, carbon_tokenizer, "acgtacGGTTAAcg")
    assert s.sequence == "ACGTACGGTTAACG" and s.base_probs.shape == (14,)
    whole = score_sequence(engine, carbon_tokenizer, "ACGTACGGTTAA")
    np.testing.assert_allclose(s.base_probs[:12], whole.base_probs, rtol=1e-5)  # causal: the tail changes nothing
    logits = engine.model(input_ids=torch.tensor([carbon_tokenizer.encode("<dna>ACGTACGGTTAA")])).logits[0, -1]
    probs = torch.softmax(logits[KMER_START:KMER_START + 4096].double(), -1).tolist()
    expected = [sum(p for kmer, p in zip(KMERS, probs) if kmer[j] == base) for j, base in enumerate("CG")]
    np.testing.assert_allclose(s.base_probs[12:], expected, rtol=1e-5)
    longer = score_sequence(engine, carbon_tokenizer, "ACGTACGGTTAACGT")  # a third real base, one pad fewer
    np.testing.assert_allclose(longer.base_probs[:14], s.base_probs, rtol=1e-5)


def test_non_acgt_is_rejected(engine, carbon_tokenizer):
    with pytest.raises(ValueError, match=r"non-ACGT characters \['N'\]"):
        score_sequence(engine, carbon_tokenizer, "ACGTNA")
