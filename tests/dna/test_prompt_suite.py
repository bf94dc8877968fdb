"""The reference DNA prompt suites: deterministic, the right sizes, and each case in its regime."""

from __future__ import annotations

import pytest

from harness.carbon.dna import SUITE_CASES, batch_suite, prompt_suite, sequence_metrics

pytestmark = pytest.mark.dna


@pytest.fixture(scope="module")
def suite():
    return {c.name: c for c in prompt_suite(1080)}


def test_suite_has_the_seven_reference_cases(suite):
    assert tuple(suite) == SUITE_CASES == ("balanced", "cpg_island", "at_rich", "gc_rich", "orf_like", "tata_box",
                                           "triplet_repeat")


@pytest.mark.parametrize("name", SUITE_CASES)
def test_case_tokenizes_like_the_reference(suite, carbon_tokenizer, name):
    case = suite[name]
    ids = carbon_tokenizer.encode(case.prompt)
    assert case.bp == 1080 and len(ids) == 181
    assert carbon_tokenizer.oov_token_id not in ids
    assert sequence_metrics(case.sequence).valid_dna_fraction == 1.0


@pytest.mark.parametrize("name,check", [
    ("balanced", lambda m: 0.4 < m.gc_content < 0.6 and m.entropy_1mer > 1.95),
    ("cpg_island", lambda m: m.motif_counts["CpG"] >= 1080 // 8),
    ("at_rich", lambda m: m.gc_content < 0.3),
    ("gc_rich", lambda m: m.gc_content > 0.7),
    ("orf_like", lambda m: m.motif_counts["ATG"] >= 1),
    ("tata_box", lambda m: m.motif_counts["TATA"] >= 1080 // 120),
    ("triplet_repeat", lambda m: m.motif_counts["CAG"] == 360 and m.unique_6mer_ratio < 0.01),
])
def test_case_is_in_its_regime(suite, name, check):
    assert check(sequence_metrics(suite[name].sequence))


def test_orf_case_reads_as_an_open_reading_frame(suite):
    seq = suite["orf_like"].sequence
    codons = [seq[i:i + 3] for i in range(0, len(seq) - 2, 3)]
    assert codons[0] == "ATG"
    first_stop = next(i for i, c in enumerate(codons) if c in ("TAA", "TAG", "TGA"))
    assert first_stop > 300


def test_suites_are_deterministic_and_seeded():
    assert prompt_suite(1080) == prompt_suite(1080)
    assert prompt_suite(1080, seed=1)[0].sequence != prompt_suite(1080, seed=0)[0].sequence


def test_batch_suite_shape(carbon_tokenizer):
    batch = batch_suite(1020, 16)
    assert len(batch) == 16 and len({c.sequence for c in batch}) == 16
    assert {len(carbon_tokenizer.encode(c.prompt)) for c in batch} == {171}


@pytest.mark.parametrize("kwargs,message", [({"length_bp": 3}, "length_bp=3"), ({"batch_size": 0}, "batch_size=0")])
def test_bad_suite_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        batch_suite(**kwargs)
