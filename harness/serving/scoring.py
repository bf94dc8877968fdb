"""6-mer log-probabilities at every prompt position from an OpenAI-compatible server's prompt logprobs:
what the scoring workloads (VEP, saturation sweeps, scans) read on the openai backend.

Why they are exact. FNS marginals are a softmax over the 4,096 6-mer logits of a position, and a softmax
does not see a constant added to all its inputs. A server's prompt log-probability is ``logit - logsumexp
(every logit)``: the 6-mer logits less one constant per position. So a position's 6-mer log-probabilities
give its marginals exactly, provided all 4,096 are known.

A server returns the top-k of its vocabulary (vLLM's ``prompt_logprobs=k``), which may leave 6-mers out:
a text token can outrank a 6-mer. ``kmer_logprobs_from_top`` takes a position only when its top-k holds
every 6-mer, and refuses the rows otherwise (``IncompleteLogprobs``, with how many 6-mers each misses and
the most its marginals could be off), so a gap is never filled with a guess. The harness makes the
condition hold by construction: its server serves the checkpoint's DNA-block view
(``harness.carbon.dna_view``, 4,107 ids) and asks for all of them.

Row r of a prompt's logprobs predicts token r + 1 from tokens ``[0..r]``. The scoring workloads need every
position of the prompt, the last one included (it predicts a trailing partial 6-mer), so one filler token
is appended: causal attention keeps it out of every row asked for.

numpy only: the serving layer never imports torch (``harness.serving.client``'s rule, kept here too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.core.vocab import DNA_VOCAB_SIZE, NUM_KMERS, DnaLayout
from harness.serving.client import Endpoint, ServingError, fetch_prompt_logprobs

FULL_VOCAB_TOP_K = NUM_KMERS  # asked of a full-vocabulary server: all 6-mers fit only if nothing else outranks one


class IncompleteLogprobs(ServingError):
    """A server's top-k prompt logprobs left out 6-mers at some rows: their marginals cannot be exact."""


@dataclass(frozen=True)
class ScoringEndpoint:
    """A server to score on, and how its ids map to Carbon's: ``id_offset`` is the Carbon id of its id 0
    (151669 on a DNA-block view, 0 on the full vocabulary) and ``top_k`` the logprobs asked per position."""

    endpoint: Endpoint
    id_offset: int = 0
    top_k: int = FULL_VOCAB_TOP_K
    view: bool = False

    @classmethod
    def dna_view(cls, endpoint: Endpoint, layout: DnaLayout = DnaLayout()) -> "ScoringEndpoint":
        """A server on the DNA-block view: all of its 4,107 ids asked for, so no 6-mer is ever left out."""
        return cls(endpoint, layout.dna_start_id, DNA_VOCAB_SIZE, view=True)

    @property
    def kmer_start(self) -> int:
        """The server's id of the first 6-mer."""
        return DnaLayout().kmer_start_id - self.id_offset

    def describe(self) -> str:
        what = "the DNA-block view" if self.view else "the full vocabulary"
        return f"{self.endpoint.url} ({what}, top-{self.top_k} prompt logprobs)"


def kmer_logprobs_from_top(rows: Sequence[Mapping[int, float]], kmer_start: int, where: str = "the server") -> np.ndarray:
    """The 6-mer log-probabilities ``[n, 4096]`` (vocabulary order) of each row of a server's top-k prompt
    logprobs (ids as the server numbers them, 6-mers from ``kmer_start``), when every row holds all 4,096;
    otherwise ``IncompleteLogprobs`` naming the rows, how many 6-mers each misses and the bound
    ``L / (S + L)`` on its marginals (S: the 6-mer mass returned, L: the mass the top-k left out)."""
    out = np.full((len(rows), NUM_KMERS), np.nan)
    short: list[str] = []
    for i, row in enumerate(rows):
        ids = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
        lps = np.fromiter(row.values(), dtype=np.float64, count=len(row))
        kmer = (ids >= kmer_start) & (ids < kmer_start + NUM_KMERS)
        out[i, ids[kmer] - kmer_start] = lps[kmer]
        missing = NUM_KMERS - int(kmer.sum())
        if missing:
            left_out = max(0.0, 1.0 - float(np.exp(lps).sum()))
            seen = float(np.exp(lps[kmer]).sum())
            bound = left_out / (seen + left_out) if seen + left_out > 0 else 1.0
            short.append(f"row {i}: {missing} of {NUM_KMERS} 6-mers missing, marginals off by up to {bound:.3g}")
    if short:
        shown = "; ".join(short[:3]) + (f"; and {len(short) - 3} more rows" if len(short) > 3 else "")
        top = max(len(r) for r in rows)
        raise IncompleteLogprobs(f"the top-{top} prompt logprobs of {where} leave 6-mers out at {len(short)} of "
                                 f"{len(rows)} rows ({shown}): their marginals would not be exact. Score on a "
                                 "server of the checkpoint's DNA-block view (--carbon-serve vllm starts one), "
                                 "where every 6-mer is returned")
    return out


async def kmer_logprobs(http: object, scoring: ScoringEndpoint, ids: Sequence[int]) -> np.ndarray:
    """The 6-mer log-probabilities ``[len(ids), 4096]`` at every position of ``ids`` (Carbon ids), exact or
    refused: the ids are sent as the server numbers them, with one filler appended (see the module docstring)."""
    if not ids:
        raise ValueError("an empty prompt has no position to score")
    served = [int(t) - scoring.id_offset for t in ids]
    if min(served) < 0:
        bad = next(t for t in ids if int(t) < scoring.id_offset)
        raise ValueError(f"token {bad} is not in the vocabulary of {scoring.describe()}, which starts at Carbon id "
                         f"{scoring.id_offset}: it scores <dna> + 6-mer prompts only")
    filler = served[0]  # any id of the served vocabulary: its own row is never read
    rows = await fetch_prompt_logprobs(http, scoring.endpoint, [*served, filler], scoring.top_k)
    if len(rows) != len(served) + 1 or rows[0] is not None:
        raise ServingError(f"{scoring.endpoint.url} returned {len(rows)} prompt_logprobs rows for a prompt of "
                           f"{len(served) + 1} ids")
    return kmer_logprobs_from_top(rows[1:], scoring.kmer_start, scoring.describe())
