"""Scoring workloads: variant-effect prediction, saturation sweeps and long-context scans.

A scoring job is prefill only: one context-encoding pass per sequence with logits at every
position, no decode. Per-base log-likelihoods come from the FNS marginals (``harness.carbon.fns``): the
logits at ``<dna>`` + 6-mers[:i] give the six per-position base distributions of 6-mer i.

For a single-nucleotide variant at window offset o:

* ``site_score`` = log P(alt) - log P(ref) at o. The distribution of o's base is predicted from
  the 6-mers before o's, which ref and alt share, so it is read from the reference pass.
* ``window_score`` = sum over the window of log P(alt sequence) - log P(ref sequence): the alt
  sequence gets its own pass, since the changed 6-mer shifts every later prediction.

Variants are scored in right-padded batches of the compiled shape's batch size, so every engine
call has one shape (the compiled one on neuron); filler rows repeat the reference and are dropped.
The alt rows are built by swapping one 6-mer id in the reference's ids, never re-tokenized.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.backends.base import Batch, Engine
from harness.carbon.fns import OUTPUT_BASES, kmer_ids_from_bases, kmer_marginals
from harness.carbon.tokenizer import CarbonTokenizer
from harness.carbon.variants import Variant, Window, check_bases, check_variants, mutate
from harness.core.cost import usd_per_million
from harness.core.measure import Summary, Timer, throughput
from harness.core.spec import RunShape, SpecError
from harness.core.vocab import DNA_BEGIN, K

_BASE_INDEX = {b: i for i, b in enumerate(OUTPUT_BASES)}


class ScoringError(ValueError):
    """A scoring request the engine's shape or the model cannot hold; the message says which."""


@dataclass(frozen=True)
class VariantScore:
    variant: Variant
    ref_log_prob: float  # log P(ref base) at the variant, from the shared context
    alt_log_prob: float  # log P(alt base) at the variant, from the same context
    window_ll_ref: float  # sum of per-base log-likelihoods of the reference window
    window_ll_alt: float  # the same for the window with the alt allele

    @property
    def site_score(self) -> float:
        return self.alt_log_prob - self.ref_log_prob

    @property
    def window_score(self) -> float:
        return self.window_ll_alt - self.window_ll_ref

    def to_dict(self) -> dict[str, Any]:
        v = self.variant
        return {"id": v.id, "chrom": v.chrom, "pos": v.pos, "ref": v.ref, "alt": v.alt,
                "site_score": self.site_score, "window_score": self.window_score,
                "ref_log_prob": self.ref_log_prob, "alt_log_prob": self.alt_log_prob}


@dataclass
class RowScores:
    """Per-base log marginals ``[bp, 4]`` of each scored row, and the time of each engine call."""

    log_marginals: list[np.ndarray]
    batch_ms: list[float] = field(default_factory=list)


@dataclass
class VariantScoring:
    """The scores of one run, with the per-call CTE times and the geometry figures need."""

    scores: list[VariantScore]
    batch_ms: list[float]
    batch_size: int
    window_bp: int
    rows: int  # sequences scored (the reference and one per variant)

    @property
    def scored_bp(self) -> int:
        return self.rows * self.window_bp


# ---------------------------------------------------------------------------------------------
# Pure parts: ids, marginals, scores
# ---------------------------------------------------------------------------------------------

def window_ids(tokenizer: CarbonTokenizer, window: Window) -> list[int]:
    """``<dna>`` + the window's whole 6-mers: a trailing partial 6-mer is scored from the logits at the
    last of them, which predict it, so it is never fed (nor its A padding)."""
    return tokenizer.encode(DNA_BEGIN + window.sequence[: window.whole_kmers * K])


def base_indices(sequence: str) -> np.ndarray:
    return np.fromiter((_BASE_INDEX[b] for b in sequence), dtype=np.int64, count=len(sequence))


def variant_ids(ref_ids: Sequence[int], window: Window, variant: Variant) -> list[int]:
    """The reference ids with the 6-mer holding the variant swapped for its alt 6-mer."""
    offset = window.offset(variant.pos)
    kmer = offset // K
    if kmer >= window.whole_kmers:  # in the trailing partial 6-mer: predicted, not fed, so no id changes
        return list(ref_ids)
    bases = base_indices(window.sequence[kmer * K: kmer * K + K])
    bases[offset % K] = _BASE_INDEX[variant.alt]
    ids = list(ref_ids)
    ids[1 + kmer] = int(kmer_ids_from_bases(bases))
    return ids


def log_marginals(kmer_logits: torch.Tensor, kmers: int) -> np.ndarray:
    """6-mer logits ``[T, 4096]`` of one row -> log P(base) ``[kmers * 6, 4]`` for its first ``kmers``
    6-mers (position i predicts 6-mer i, since position 0 is ``<dna>``)."""
    marg = kmer_marginals(kmer_logits[:kmers])  # [kmers, 6, 4]
    return torch.log(marg.clamp_min(1e-30)).reshape(kmers * K, 4).double().numpy()


def sequence_log_likelihood(log_marg: np.ndarray, sequence: str) -> float:
    idx = base_indices(sequence)
    return float(log_marg[np.arange(len(idx)), idx].sum())


def batches(n: int, size: int) -> list[range]:
    if size < 1:
        raise ScoringError(f"batch size {size} must be at least 1")
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


# ---------------------------------------------------------------------------------------------
# Engine-bound parts
# ---------------------------------------------------------------------------------------------

def check_rows_fit(engine: Engine, tokens: int, batch_size: int) -> None:
    """Before anything runs: the rows must fit the engine's shape, and the shape the model's
    positions (a longer context runs on RoPE positions the model was never trained for)."""
    shape = engine.shape
    try:
        shape.validate_request(tokens, 0, batch_size)
    except SpecError as exc:
        raise ScoringError(f"cannot score on shape {shape.name!r}: {exc}") from None
    limit = checkpoint_max_positions(engine.info.checkpoint)
    if limit is not None and tokens > limit:
        raise ScoringError(f"{tokens} tokens exceed the checkpoint's max_position_embeddings={limit} "
                           f"({engine.info.checkpoint}); extend it with YaRN (carbon-harness checkpoint "
                           "--rope-scaling yarn:FACTOR) or score a shorter window")


def check_shape_fits_checkpoint(checkpoint: str | Path, shape: RunShape) -> None:
    """Before an engine is built (compiled, on neuron) for ``shape``: its positions must fit the
    checkpoint's max_position_embeddings (rope scaling included)."""
    limit = checkpoint_max_positions(checkpoint)
    if limit is not None and shape.seq_len > limit:
        raise ScoringError(f"shape {shape.name!r} needs {shape.seq_len} positions but the checkpoint {checkpoint} has "
                           f"max_position_embeddings={limit}; extend it with YaRN (carbon-harness checkpoint "
                           "--rope-scaling yarn:FACTOR) or use a shorter shape")


def checkpoint_max_positions(checkpoint: str | Path) -> int | None:
    config = Path(checkpoint) / "config.json"
    try:
        value = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, int) else None


def score_rows(engine: Engine, rows: Sequence[Sequence[int]], kmers: int, batch_size: int) -> RowScores:
    """Log marginals of every row, ``batch_size`` rows per engine call. Each call is padded to
    ``batch_size`` rows with copies of the first (one compiled shape); only the real rows are kept.
    Rows must all have one length (windows of one length: SNVs keep the length), of at least ``kmers``
    ids: the logits at position i predict 6-mer i."""
    width = len(rows[0])
    if kmers > width or any(len(r) != width for r in rows):
        raise ScoringError(f"rows of {sorted({len(r) for r in rows})} ids cannot predict {kmers} 6-mers")
    check_rows_fit(engine, width, batch_size)
    out = RowScores([])
    for chunk in batches(len(rows), batch_size):
        real = [list(rows[i]) for i in chunk]
        padded = real + [real[0]] * (batch_size - len(real))
        batch = Batch.from_ids(padded)
        with Timer(engine.synchronize) as t:
            logits = engine.kmer_logits(batch)
        out.batch_ms.append(t.ms)
        out.log_marginals += [log_marginals(logits[i], kmers) for i in range(len(real))]
    return out


def score_variants(engine: Engine, tokenizer: CarbonTokenizer, window: Window, variants: Sequence[Variant],
                   batch_size: int | None = None) -> VariantScoring:
    """Site and window scores of every variant: the reference row first, then one row per
    variant, in batches of ``batch_size`` (default: the engine's compiled batch size; 1 gives the
    one-at-a-time path, which must agree)."""
    checked = check_variants(window, variants)
    size = engine.shape.batch_size if batch_size is None else batch_size
    ref_ids = window_ids(tokenizer, window)
    rows = [ref_ids] + [variant_ids(ref_ids, window, v) for v in checked]
    scored = score_rows(engine, rows, window.predicted_kmers, size)
    ref_marg = scored.log_marginals[0]
    ref_ll = sequence_log_likelihood(ref_marg, window.sequence)
    scores = []
    for v, alt_marg in zip(checked, scored.log_marginals[1:]):
        o = window.offset(v.pos)
        alt_ll = sequence_log_likelihood(alt_marg, mutate(window, v))
        scores.append(VariantScore(v, float(ref_marg[o, _BASE_INDEX[v.ref]]), float(ref_marg[o, _BASE_INDEX[v.alt]]),
                                   ref_ll, alt_ll))
    return VariantScoring(scores, scored.batch_ms, size, window.scored_bp, len(rows))


@dataclass(frozen=True)
class ScanResult:
    """Per-base log-likelihoods of one long window (a likelihood scan)."""

    window: Window
    log_probs: np.ndarray  # [scored_bp] log P(observed base)
    cte_ms: float

    @property
    def log_likelihood(self) -> float:
        return float(self.log_probs.sum())


def scan_window(engine: Engine, tokenizer: CarbonTokenizer, window: Window) -> ScanResult:
    """One pass over a long window: the log-likelihood of each of its bases."""
    check_bases(window.sequence, f"window {window.chrom}:{window.start}")
    if window.whole_kmers < 1:
        raise ScoringError(f"window {window.chrom}:{window.start} has {len(window)} bp: fewer than one 6-mer")
    scored = score_rows(engine, [window_ids(tokenizer, window)], window.predicted_kmers, 1)
    marg = scored.log_marginals[0]
    idx = base_indices(window.sequence)
    return ScanResult(window, marg[np.arange(len(idx)), idx], scored.batch_ms[0])


def scoring_figures(variants: int, scored_bp: int, round_ms: Sequence[float], batch_ms: Sequence[float],
                    price_per_hour: float | None = None) -> dict[str, float]:
    """``variants_per_s`` and ``scored_kbp_per_s`` at the median round, ``cte_ms_p50/p99`` per
    engine call (one batch), and ``usd_per_million_variants`` when the hardware has a price."""
    if variants < 1:
        raise ValueError(f"variants={variants}: nothing was scored")
    total = Summary.of(round_ms).p50
    calls = Summary.of(batch_ms)
    figures = {"variants_per_s": throughput(variants, total), "scored_kbp_per_s": throughput(scored_bp, total) / 1e3,
               "cte_ms_p50": calls.p50, "cte_ms_p99": calls.p99, "scoring_ms_p50": total}
    if price_per_hour:
        figures["usd_per_million_variants"] = usd_per_million(figures["variants_per_s"], price_per_hour)
    return figures


# ---------------------------------------------------------------------------------------------
# Per-base likelihood of whole sequences (the model card's bp-level score)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SequenceScore:
    """Per-base probabilities of an observed sequence under the model (the model card's bp-level score)."""

    sequence: str
    base_probs: np.ndarray  # [bp] probability of each observed base, a trailing partial 6-mer's included

    @property
    def mean_log_likelihood(self) -> float:
        return float(np.log(self.base_probs).mean()) if self.base_probs.size else math.nan


def scored_bases(tokenizer: CarbonTokenizer, sequence: str) -> list[int]:
    """How many real bases each 6-mer of ``<dna>`` + ``sequence`` carries, from the published FNS token
    mask: 6 for a whole 6-mer, r for a trailing block of r bases the tokenizer pads with A. The padding
    is never scored."""
    _, mask = tokenizer.encode(DNA_BEGIN + sequence, return_token_mask=True)
    return list(mask[1:])


def score_sequences(engine: Any, tokenizer: CarbonTokenizer, sequences: Sequence[str]) -> list[SequenceScore]:
    """Score a batch of DNA sequences: the logits at ``<dna>`` + kmers[:i] predict 6-mer i, whose
    marginals give the probability of each of its real bases (``scored_bases``): every base of the
    sequence is scored, a trailing partial 6-mer's included."""
    cleaned = [s.strip().upper() for s in sequences]
    for s in cleaned:
        bad = set(s) - set("ACGT")
        if bad:
            raise ValueError(f"sequence has non-ACGT characters {sorted(bad)!r}: only A, C, G, T can be scored")
    batch = Batch.from_prompts(tokenizer, ["<dna>" + s for s in cleaned])
    logits = engine.kmer_logits(batch)
    out = []
    for row, seq in enumerate(cleaned):
        counts = scored_bases(tokenizer, seq)
        if sum(counts) != len(seq):
            raise ScoringError(f"the token mask covers {sum(counts)} of the sequence's {len(seq)} bases")
        marg = kmer_marginals(logits[row, :len(counts)]).numpy()  # position i predicts 6-mer i (after <dna>)
        observed = base_indices(seq)
        probs, at = [], 0
        for i, n in enumerate(counts):
            probs.append(marg[i, np.arange(n), observed[at:at + n]])
            at += n
        out.append(SequenceScore(seq, np.concatenate(probs) if probs else np.zeros(0)))
    return out


def score_sequence(engine: Any, tokenizer: CarbonTokenizer, dna: str) -> SequenceScore:
    return score_sequences(engine, tokenizer, [dna])[0]
