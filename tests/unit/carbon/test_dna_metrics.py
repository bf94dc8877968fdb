"""sequence_metrics on hand-computed inputs."""

import math

import pytest

from harness.carbon.dna import sequence_metrics

pytestmark = pytest.mark.unit


def test_pure_dna():
    m = sequence_metrics("ACGTACGTAAAA")
    assert (m.bp, m.length, m.valid_dna_fraction) == (12, 12, 1.0)
    assert m.gc_content == pytest.approx(4 / 12)
    assert m.longest_homopolymer == 4
    assert m.unique_6mer_ratio == 1.0  # ACGTAC, GTAAAA


def test_tags_and_junk_are_separated():
    m = sequence_metrics("<dna>ACGT<oov>NN</dna> x")
    assert m.tag_count == 3
    assert (m.bp, m.length) == (4, 7)  # ACGT + N N x
    assert m.valid_dna_fraction == pytest.approx(4 / 7)


def test_entropies():
    assert sequence_metrics("ACGT" * 25).entropy_1mer == pytest.approx(2.0)
    assert sequence_metrics("AAAA").entropy_1mer == 0.0
    m = sequence_metrics("ACGT" * 100)
    assert m.entropy_2mer == pytest.approx(2.0, rel=1e-4)  # only AC, CG, GT, TA (399 of them)
    assert sequence_metrics("ACGTAC").entropy_2mer == pytest.approx(-sum(p * math.log2(p) for p in (0.4, 0.2, 0.2, 0.2)))


def test_motifs_count_overlaps():
    m = sequence_metrics("CAGCAGCAG TATAAATATAAA")
    assert m.motif_counts["CAG"] == 3 and m.motif_counts["TATA"] == 2


def test_empty_text():
    m = sequence_metrics("")
    assert (m.bp, m.valid_dna_fraction, m.gc_content, m.unique_6mer_ratio) == (0, 0.0, 0.0, 0.0)


def test_lowercase_counts_as_dna():
    assert sequence_metrics("acgt").valid_dna_fraction == 1.0
