"""FNS per-base marginals: normalisation, exactness on product distributions, brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from harness.carbon.fns import KMER_START, KMER_TABLE, KMERS, base_marginals, fns_select, kmer_ids_from_bases

pytestmark = pytest.mark.unit
V = 155776


def vocab_logits(block: np.ndarray, leading=()) -> np.ndarray:
    logits = np.full((*leading, V), -1e4)
    logits[..., KMER_START:KMER_START + 4096] = block
    return logits


def test_table_matches_the_vocabulary():
    assert KMER_TABLE.shape == (4096, 6)
    assert KMERS[0] == "AAAAAA" and KMERS[154402 - KMER_START] == "CCCCCC"
    assert "".join("ACGT"[i] for i in KMER_TABLE[154402 - KMER_START]) == "CCCCCC"


def test_marginals_sum_to_one():
    logits = np.random.default_rng(0).normal(size=(2, 3, V)) * 4
    m = base_marginals(logits)
    assert m.shape == (2, 3, 6, 4)
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-9)


def test_exact_on_a_product_distribution():
    rng = np.random.default_rng(1)
    per_pos = rng.dirichlet(np.ones(4), size=6)  # [6, 4] in A, C, G, T order
    probs = np.array([np.prod([per_pos[j, "ACGT".index(b)] for j, b in enumerate(k)]) for k in KMERS])
    m = base_marginals(vocab_logits(np.log(probs)))
    np.testing.assert_allclose(m, per_pos, atol=1e-12)


def test_agrees_with_brute_force_on_random_logits():
    block = np.random.default_rng(2).normal(size=4096) * 3
    p = np.exp(block - block.max())
    p /= p.sum()
    brute = np.zeros((6, 4))
    for i, kmer in enumerate(KMERS):
        for j, base in enumerate(kmer):
            brute[j, "ACGT".index(base)] += p[i]
    np.testing.assert_allclose(base_marginals(vocab_logits(block)), brute, atol=1e-12)


def test_torch_and_numpy_agree():
    logits = np.random.default_rng(3).normal(size=(5, V)).astype(np.float32)
    np.testing.assert_allclose(base_marginals(torch.from_numpy(logits)).numpy(), base_marginals(logits), atol=1e-5)


def test_non_kmer_logits_do_not_matter():
    block = np.random.default_rng(4).normal(size=4096)
    a, b = vocab_logits(block), vocab_logits(block)
    b[:KMER_START] = 50.0  # a huge BPE logit is outside the renormalised block
    np.testing.assert_allclose(base_marginals(a), base_marginals(b))


@pytest.mark.parametrize("kmer", ["AAAAAA", "ACGTAC", "GGGGGG", "TTTTTT", "CATGCA"])
def test_kmer_ids_from_bases_round_trip(kmer, carbon_tokenizer):
    idx = np.array(["ACGT".index(b) for b in kmer])
    assert kmer_ids_from_bases(idx) == carbon_tokenizer.convert_tokens_to_ids([kmer])[0]
    assert int(kmer_ids_from_bases(torch.from_numpy(idx))) == carbon_tokenizer.convert_tokens_to_ids([kmer])[0]


def test_fns_select_can_differ_from_the_argmax_kmer():
    """Mass spread over many k-mers sharing bases beats one slightly larger k-mer."""
    block = np.full(4096, -30.0)
    winner = KMERS.index("AAAAAA")
    block[winner] = np.log(0.2)
    for kmer in ("".join(p) for p in itertools.product("CG", repeat=6)):
        block[KMERS.index(kmer)] = np.log(0.8 / 64)  # each below 0.2, together 0.8
    logits = torch.from_numpy(vocab_logits(block, (1,)))
    assert int(logits.argmax()) == KMER_START + winner
    chosen = KMERS[int(fns_select(logits)) - KMER_START]
    assert set(chosen) <= {"C", "G"}
