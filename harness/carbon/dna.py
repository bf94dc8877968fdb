"""DNA prompt suites of the reference runs, and sequence metrics of generated text.

The suites are seeded and deterministic: the same length and seed give the same prompts on any
machine, so results are comparable across runs and releases.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.measure import throughput
from harness.core.speculation import SpeculativeCase
from harness.core.vocab import DNA_BEGIN

SUITE_CASES = ("balanced", "cpg_island", "at_rich", "gc_rich", "orf_like", "tata_box", "triplet_repeat")
MOTIFS = {"TATA": "TATAAA", "CpG": "CG", "CAG": "CAG", "ATG": "ATG", "polyA": "AAAAAA"}
STOP_CODONS = ("TAA", "TAG", "TGA")
_CODONS = [a + b + c for a in "ACGT" for b in "ACGT" for c in "ACGT"]
_SENSE_CODONS = [c for c in _CODONS if c not in STOP_CODONS]


@dataclass(frozen=True)
class DnaCase:
    name: str
    sequence: str
    description: str

    @property
    def prompt(self) -> str:
        """The prompt as the reference runs sent it: ``<dna>`` + sequence (no closing tag, so the
        model continues in DNA mode)."""
        return DNA_BEGIN + self.sequence

    @property
    def bp(self) -> int:
        return len(self.sequence)


def _draw(rng: np.random.Generator, n: int, probs: dict[str, float]) -> str:
    bases = list(probs)
    p = np.array([probs[b] for b in bases], dtype=float)
    return "".join(np.array(bases)[rng.choice(len(bases), size=n, p=p / p.sum())])


TRIPLET_REPEATS = ("CAG", "CGG", "GAA")  # Huntington's, fragile X, Friedreich's ataxia expansions


def _case(name: str, n: int, rng: np.random.Generator, variant: int = 0) -> tuple[str, str]:
    if name == "balanced":
        return _draw(rng, n, {"A": 1, "C": 1, "G": 1, "T": 1}), "uniform random bases"
    if name == "cpg_island":
        seq = list(_draw(rng, n, {"A": 0.2, "C": 0.3, "G": 0.3, "T": 0.2}))
        for i in range(0, n - 1, 8):  # CpG dinucleotides well above the genomic background
            seq[i], seq[i + 1] = "C", "G"
        return "".join(seq), "GC-rich with frequent CpG dinucleotides"
    if name == "at_rich":
        return _draw(rng, n, {"A": 0.4, "C": 0.1, "G": 0.1, "T": 0.4}), "80% A/T"
    if name == "gc_rich":
        return _draw(rng, n, {"A": 0.1, "C": 0.4, "G": 0.4, "T": 0.1}), "80% G/C"
    if name == "orf_like":
        body = "".join(rng.choice(_SENSE_CODONS, size=max(0, (n - 6) // 3)))
        return ("ATG" + body + "TAA" + "A" * n)[:n], "ATG, sense codons, stop codon"
    if name == "tata_box":
        seq = list(_draw(rng, n, {"A": 1, "C": 1, "G": 1, "T": 1}))
        for start in range(24, n - 6, 120):
            seq[start:start + 6] = "TATAAA"
        return "".join(seq)[:n], "random background with a TATA box every 120 bp"
    if name == "triplet_repeat":
        unit = TRIPLET_REPEATS[variant % len(TRIPLET_REPEATS)]
        return (unit * (n // 3 + 1))[:n], f"{unit} triplet repeat (stress case)"
    raise ValueError(f"unknown DNA case {name!r}; known cases: {', '.join(SUITE_CASES)}")


def _check_length(length_bp: int) -> None:
    if not isinstance(length_bp, int) or length_bp < 6:
        raise ValueError(f"length_bp={length_bp!r} must be an integer >= 6 (one 6-mer)")


def prompt_suite(length_bp: int = 1080, seed: int = 0) -> list[DnaCase]:
    """The 7 cases of the reference batch-1 suite, each ``length_bp`` long."""
    _check_length(length_bp)
    cases = []
    for i, name in enumerate(SUITE_CASES):
        seq, desc = _case(name, length_bp, np.random.default_rng([seed, i]))
        cases.append(DnaCase(name, seq, desc))
    return cases


def batch_suite(length_bp: int = 1020, batch_size: int = 16, seed: int = 0) -> list[DnaCase]:
    """The batch suite: ``batch_size`` prompts cycling through the 7 regimes with distinct seeds,
    so a batch mixes compositions the way the reference A100-style run did."""
    _check_length(length_bp)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
    out = []
    for i in range(batch_size):
        name = SUITE_CASES[i % len(SUITE_CASES)]
        seq, desc = _case(name, length_bp, np.random.default_rng([seed, 1000 + i]), variant=i // len(SUITE_CASES))
        out.append(DnaCase(f"{name}_{i:02d}", seq, desc))
    return out


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SequenceMetrics:
    bp: int  # A/C/G/T characters
    length: int  # characters after removing tags
    valid_dna_fraction: float
    gc_content: float
    entropy_1mer: float  # bits, max 2
    entropy_2mer: float  # bits, max 4
    longest_homopolymer: int
    unique_6mer_ratio: float
    motif_counts: dict[str, int] = field(default_factory=dict)
    tag_count: int = 0


_TAG = re.compile(r"</?dna>|<oov>|<unused_\d+>|<[^<>\s]+>")


def _entropy(counts: Counter) -> float:
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return -sum(c / total * math.log2(c / total) for c in counts.values() if c)


def sequence_metrics(text: str) -> SequenceMetrics:
    """Metrics of a (generated) text: how much of it is DNA and what that DNA looks like.

    Tags (``<dna>``, ``</dna>``, ``<oov>``, metadata tags) are counted and removed; whitespace is
    ignored; every other non-ACGT character counts against the valid-DNA fraction.
    """
    tag_count = len(_TAG.findall(text))
    body = re.sub(r"\s+", "", _TAG.sub("", text)).upper()
    bases = [c for c in body if c in "ACGT"]
    seq = "".join(bases)
    n = len(seq)
    longest, run = 0, 0
    for i, c in enumerate(seq):
        run = run + 1 if i and seq[i - 1] == c else 1
        longest = max(longest, run)
    kmers = [seq[i:i + 6] for i in range(0, n - 5, 6)]
    return SequenceMetrics(
        bp=n,
        length=len(body),
        valid_dna_fraction=n / len(body) if body else 0.0,
        gc_content=(seq.count("G") + seq.count("C")) / n if n else 0.0,
        entropy_1mer=_entropy(Counter(seq)),
        entropy_2mer=_entropy(Counter(seq[i:i + 2] for i in range(n - 1))),
        longest_homopolymer=longest,
        unique_6mer_ratio=len(set(kmers)) / len(kmers) if kmers else 0.0,
        motif_counts={name: _count_overlapping(seq, motif) for name, motif in MOTIFS.items()},
        tag_count=tag_count,
    )


def _count_overlapping(seq: str, motif: str) -> int:
    return sum(1 for i in range(len(seq) - len(motif) + 1) if seq.startswith(motif, i))


def shape_prompts(shape) -> list[str]:
    """The prompts a run shape is measured with: the balanced case at batch 1, the batch suite
    otherwise, each ``shape.prompt_bp`` long (so they fit the shape's context)."""
    bp = shape.prompt_bp or shape.max_context_length * 6 - 6
    if shape.batch_size == 1:
        return [prompt_suite(bp)[0].prompt]
    return [c.prompt for c in batch_suite(bp, shape.batch_size)]


def dna_figures(tokenizer: CarbonTokenizer, tokens: Any, e2e_ms: float) -> dict[str, float]:
    """Base pairs the batch generated (A/C/G/T decoded from the new tokens) per second, and the
    mean fraction of generated characters that are DNA."""
    texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
    metrics = [sequence_metrics(t) for t in texts]
    bp = sum(m.bp for m in metrics)
    bp_per_s = throughput(bp, e2e_ms)
    return {"generated_bp": bp, "bp_per_s": bp_per_s, "kbp_per_s": bp_per_s / 1000.0,
            "valid_dna_fraction": sum(m.valid_dna_fraction for m in metrics) / len(metrics)}


def speculative_prompts(case: SpeculativeCase) -> list[str]:
    """A speculative case's prompts: the DNA suite's seven cases, or its balanced case at the
    case's length."""
    suite = prompt_suite(case.prompt_bp)
    return [c.prompt for c in suite] if case.whole_suite else [suite[0].prompt]
