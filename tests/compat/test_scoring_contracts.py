"""Scoring contracts on the embedded default: batched scores equal one-at-a-time scores, alt rows
equal the tokenizer's own encoding, and a too-long context is refused before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

from harness.carbon.variants import mutate, saturation_variants
from harness.core.spec import RunShape, get_shape
from harness.workloads.scoring import (
    ScoringError,
    check_shape_fits_checkpoint,
    scan_window,
    score_sequence,
    score_variants,
    variant_ids,
    window_ids,
)

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def engine(tiny_hf_engine):
    return tiny_hf_engine(get_shape("vep-bs8"))


@pytest.fixture(scope="module")
def batched(engine, carbon_tokenizer, scoring_window, scoring_variants):
    return score_variants(engine, carbon_tokenizer, scoring_window, scoring_variants)


def as_array(scoring):
    return np.array([[s.ref_log_prob, s.alt_log_prob, s.window_ll_ref, s.window_ll_alt] for s in scoring.scores])


def test_batched_scores_equal_one_at_a_time(engine, carbon_tokenizer, scoring_window, scoring_variants, batched):
    single = score_variants(engine, carbon_tokenizer, scoring_window, scoring_variants, batch_size=1)
    assert len(batched.batch_ms) == 2 and len(single.batch_ms) == len(scoring_variants) + 1
    assert [s.variant for s in batched.scores] == scoring_variants
    np.testing.assert_allclose(as_array(batched), as_array(single), rtol=1e-6, atol=1e-5)
    # scores are not all zero: the variants change the likelihoods
    assert np.abs([s.window_score for s in batched.scores]).max() > 1e-4
    assert np.abs([s.site_score for s in batched.scores]).max() > 1e-4


def test_batch_padding_does_not_change_scores(engine, carbon_tokenizer, scoring_window, scoring_variants, batched):
    """3 variants + the reference fill half a batch; the filler rows must not leak into the scores."""
    part = score_variants(engine, carbon_tokenizer, scoring_window, scoring_variants[:3])
    np.testing.assert_allclose(as_array(part), as_array(batched)[:3], rtol=1e-6, atol=1e-5)


def test_window_likelihood_is_the_fns_sequence_score(engine, carbon_tokenizer, scoring_window, scoring_variants,
                                                     batched):
    """The reference row's log-likelihood is harness.workloads.scoring's bp-level score (FNS marginals) of the same sequence."""
    s = batched.scores[0]
    fns = score_sequence(engine, carbon_tokenizer, scoring_window.sequence[: scoring_window.scored_bp])
    assert s.window_ll_ref == pytest.approx(float(np.log(fns.base_probs).sum()), rel=1e-5)
    alt = score_sequence(engine, carbon_tokenizer,
                         mutate(scoring_window, scoring_variants[0])[: scoring_window.scored_bp])
    assert s.window_ll_alt == pytest.approx(float(np.log(alt.base_probs).sum()), rel=1e-5)


def test_alt_rows_are_the_tokenizers_encoding(carbon_tokenizer, scoring_window):
    ref = window_ids(carbon_tokenizer, scoring_window)
    for v in saturation_variants(scoring_window, scoring_window.start, scoring_window.start + 11):
        assert variant_ids(ref, scoring_window, v) == carbon_tokenizer.encode("<dna>" + mutate(scoring_window, v))


def test_scan_fits_the_shape(tiny_hf_engine, carbon_tokenizer, scoring_window):
    engine = tiny_hf_engine(RunShape("scan-tiny", 1, 32, 32, 1))
    result = scan_window(engine, carbon_tokenizer, scoring_window)  # 120 bp: 21 tokens
    assert result.log_probs.shape == (120,) and (result.log_probs < 0).all()
    from harness.carbon.variants import synthetic_window

    with pytest.raises(ScoringError, match=r"shape 'scan-tiny'.*prompt of 35 tokens exceeds .*max_context_length=32"):
        scan_window(engine, carbon_tokenizer, synthetic_window(bp=204))


def test_too_long_context_fails_before_building(carbon_tiny_checkpoint):
    """carbon-tiny has 8,192 positions: the 32k scan is refused naming the shape and the fix."""
    check_shape_fits_checkpoint(carbon_tiny_checkpoint, get_shape("scan-8k"))
    with pytest.raises(ScoringError, match=r"shape 'scan-32k' needs 32768 positions .*max_position_embeddings=8192.*"
                                           r"--rope-scaling yarn"):
        check_shape_fits_checkpoint(carbon_tiny_checkpoint, get_shape("scan-32k"))


def test_a_variant_in_the_trailing_partial_6mer_changes_only_its_own_base(engine, carbon_tokenizer, scoring_window):
    """The trailing partial 6-mer is predicted, never fed: an SNV there leaves every other base's
    likelihood as it was, so its window score is its site score, and the scan scores that base too."""
    from dataclasses import replace

    from harness.carbon.variants import Variant

    window = replace(scoring_window, sequence=scoring_window.sequence[: len(scoring_window.sequence) - 3])
    assert len(window.sequence) % 6 == 3
    pos = window.end  # the partial 6-mer's last real base
    ref = window.sequence[-1]
    alt = next(b for b in "ACGT" if b != ref)
    (score,) = score_variants(engine, carbon_tokenizer, window, [Variant(window.chrom, pos, ref, alt, "tail")]).scores
    assert score.window_score == pytest.approx(score.site_score, rel=1e-6, abs=1e-9)
    scan = scan_window(engine, carbon_tokenizer, window)
    assert scan.log_probs[-1] == pytest.approx(score.ref_log_prob, rel=1e-6)
    assert scan.log_likelihood == pytest.approx(score.window_ll_ref, rel=1e-6)
