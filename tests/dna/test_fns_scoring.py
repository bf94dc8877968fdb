"""bp-level scoring of DNA sequences through FNS marginals on the embedded default."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.carbon.dna import prompt_suite
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


def test_trailing_partial_kmer_is_not_scored(engine, carbon_tokenizer):
    s = score_sequence(engine, carbon_tokenizer, "acgtacGGTTAAcg")
    assert s.sequence == "ACGTACGGTTAA" and s.base_probs.shape == (12,)


def test_non_acgt_is_rejected(engine, carbon_tokenizer):
    with pytest.raises(ValueError, match=r"non-ACGT characters \['N'\]"):
        score_sequence(engine, carbon_tokenizer, "ACGTNA")
