"""Factorized Nucleotide Supervision: per-base views of Carbon's 6-mer distributions.

A distribution over the 4,096 6-mers factorizes into 6 per-position distributions over
{A, C, G, T}: P(base b at position j) = sum of P(kmer) over the k-mers whose j-th base is b. One
fixed [4096, 24] one-hot table turns that into a single matrix product (numpy or torch alike).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from harness.core.vocab import BASES, QWEN3_VOCAB_SIZE, K

KMER_START = QWEN3_VOCAB_SIZE + 3
OUTPUT_BASES = "ACGT"  # the last axis of every marginal, as the issue and model card order it
KMERS = ["".join(p) for p in itertools.product(BASES, repeat=K)]  # vocabulary order (ATCG)
# KMER_TABLE[i, j] = index in OUTPUT_BASES of the j-th base of the i-th 6-mer.
KMER_TABLE = np.array([[OUTPUT_BASES.index(b) for b in kmer] for kmer in KMERS], dtype=np.int64)
_ONE_HOT = np.zeros((len(KMERS), K * 4), dtype=np.float32)
_ONE_HOT[np.arange(len(KMERS))[:, None], np.arange(K) * 4 + KMER_TABLE] = 1.0
_KMER_OF = {tuple(row): i for i, row in enumerate(KMER_TABLE.tolist())}
_PLACE = 4 ** np.arange(K - 1, -1, -1)
_ACGT_TO_ATCG = np.array([BASES.index(b) for b in OUTPUT_BASES])  # A->0, C->2, G->3, T->1


def kmer_block(logits: Any) -> Any:
    """The 4,096 6-mer columns ``[..., 4096]`` of vocabulary logits ``[..., 155776]``: all FNS needs,
    and all a scoring build returns (``harness.backends.neuron.scoring``)."""
    return logits[..., KMER_START:KMER_START + len(KMERS)]


def kmer_marginals(block: Any) -> Any:
    """6-mer logits ``[..., 4096]`` (vocabulary order) -> per-position base probabilities
    ``[..., 6, 4]`` (A, C, G, T), from a softmax over the 6-mer block. Torch in, torch out."""
    if block.shape[-1] != len(KMERS):
        raise ValueError(f"6-mer logits must have {len(KMERS)} columns, got {block.shape[-1]}")
    if isinstance(block, torch.Tensor):
        probs = torch.softmax(block.float(), dim=-1)
        out = probs @ torch.from_numpy(_ONE_HOT).to(probs.device)
    else:
        block = np.asarray(block, dtype=np.float64)
        block = block - block.max(axis=-1, keepdims=True)
        probs = np.exp(block)
        probs /= probs.sum(axis=-1, keepdims=True)
        out = probs @ _ONE_HOT.astype(np.float64)
    return out.reshape(*out.shape[:-1], K, 4)


def base_marginals(logits: Any) -> Any:
    """Vocabulary logits ``[..., 155776]`` -> per-position base probabilities ``[..., 6, 4]``
    (A, C, G, T), from a softmax renormalised over the 6-mer block. Torch in, torch out."""
    return kmer_marginals(kmer_block(logits))


def kmer_ids_from_bases(base_index: Any) -> Any:
    """Per-position base indices ``[..., 6]`` (A, C, G, T order) -> 6-mer token ids ``[...]``."""
    if isinstance(base_index, torch.Tensor):
        atcg = torch.from_numpy(_ACGT_TO_ATCG).to(base_index.device)[base_index]
        return (atcg * torch.from_numpy(_PLACE).to(base_index.device)).sum(-1) + KMER_START
    atcg = _ACGT_TO_ATCG[np.asarray(base_index)]
    return (atcg * _PLACE).sum(-1) + KMER_START


def fns_select(logits: torch.Tensor) -> torch.Tensor:
    """bp-level greedy decoding: each 6-mer assembled from the per-position argmax base."""
    return kmer_ids_from_bases(base_marginals(logits).argmax(dim=-1))
