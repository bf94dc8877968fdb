"""6-mer log-probabilities from a server's top-k prompt logprobs (``harness.serving.scoring``): exact
wherever every 6-mer came back, refused with the bound wherever one did not, on random logits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.carbon.fns import KMER_START, kmer_marginals
from harness.core.vocab import DNA_VOCAB_SIZE, NUM_KMERS, QWEN3_VOCAB_SIZE, VOCAB_SIZE
from harness.serving.client import Endpoint
from harness.serving.scoring import IncompleteLogprobs, ScoringEndpoint, kmer_logprobs_from_top

pytestmark = pytest.mark.unit

# a vocabulary of the DNA-block view's size keeps the draws small; the 6-mers sit where the view has them
VIEW = ScoringEndpoint.dna_view(Endpoint("http://127.0.0.1:1", "m"))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def top_k_rows(logits: np.ndarray, k: int, id_offset: int = 0) -> list[dict[int, float]]:
    """What a server returns: the top-k log-probabilities of each row, keyed by its ids, in rank order."""
    lps = log_softmax(logits)
    order = np.argsort(-lps, axis=-1, kind="stable")[:, :k]
    return [{int(i) + id_offset: float(row[i]) for i in top} for row, top in zip(lps, order)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 4), shift=st.floats(-50, 50))
def test_a_complete_top_k_gives_the_marginals_of_the_logits_exactly(seed, rows, shift):
    """Whatever else the top-k holds, and whatever constant the server's normaliser adds, the marginals
    from its 6-mer logprobs equal those of the raw 6-mer logits."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 3.0, size=(rows, DNA_VOCAB_SIZE)) + shift
    got = kmer_logprobs_from_top(top_k_rows(logits, DNA_VOCAB_SIZE), VIEW.kmer_start)
    assert got.shape == (rows, NUM_KMERS) and np.isfinite(got).all()
    want = logits[:, VIEW.kmer_start:VIEW.kmer_start + NUM_KMERS]
    np.testing.assert_allclose(kmer_marginals(got), kmer_marginals(want), rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, NUM_KMERS + 2))
def test_a_top_k_that_leaves_a_6mer_out_is_refused_with_a_bound_that_holds(seed, k):
    """Any top-k short of the 4,096 6-mers is refused, naming how many are missing, and the bound it
    states is at least the error the missing 6-mers would have caused."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, size=(1, DNA_VOCAB_SIZE))
    logits[0, :VIEW.kmer_start] += 10.0  # the specials outrank every 6-mer, as text tokens can on a full vocabulary
    logits[0, VIEW.kmer_start + NUM_KMERS:] += 10.0
    rows = top_k_rows(logits, k)
    kmer_ids = [i for i in rows[0] if VIEW.kmer_start <= i < VIEW.kmer_start + NUM_KMERS]
    missing = NUM_KMERS - len(kmer_ids)
    assert missing > 0  # the view's 11 other ids come first, so k <= 4,098 leaves 6-mers out
    with pytest.raises(IncompleteLogprobs, match=rf"row 0: {missing} of 4096 6-mers missing, marginals off by up to "
                                                 r"(\S+)\)") as err:
        kmer_logprobs_from_top(rows, VIEW.kmer_start)
    bound = float(str(err.value).split("off by up to ")[1].split(")")[0].split(";")[0])
    if kmer_ids:  # what a guess from the returned 6-mers would have given, against the truth
        seen = np.full((1, NUM_KMERS), -np.inf)
        seen[0, np.array(kmer_ids) - VIEW.kmer_start] = [rows[0][i] for i in kmer_ids]
        error = np.abs(kmer_marginals(seen) - kmer_marginals(logits[:, VIEW.kmer_start:VIEW.kmer_start + NUM_KMERS]))
        assert error.max() <= bound * (1 + 1e-3) + 1e-12


def test_the_refusal_names_the_rows_and_what_to_do():
    logits = np.zeros((5, DNA_VOCAB_SIZE))
    rows = top_k_rows(logits, DNA_VOCAB_SIZE)
    for r in (1, 2, 3, 4):
        del rows[r][VIEW.kmer_start + r]
    with pytest.raises(IncompleteLogprobs) as err:
        kmer_logprobs_from_top(rows, VIEW.kmer_start, "http://x (the full vocabulary, top-4096 prompt logprobs)")
    text = str(err.value)
    assert "of http://x (the full vocabulary" in text and "at 4 of 5 rows" in text
    assert "row 1: 1 of 4096 6-mers missing" in text and "and 1 more rows" in text
    assert "--carbon-serve vllm starts one" in text


def test_scoring_endpoints_map_ids_to_carbons():
    full = ScoringEndpoint(Endpoint("http://127.0.0.1:1", "m"))
    assert (full.id_offset, full.kmer_start, full.top_k) == (0, KMER_START, NUM_KMERS)
    assert (VIEW.id_offset, VIEW.kmer_start, VIEW.top_k) == (QWEN3_VOCAB_SIZE, 3, DNA_VOCAB_SIZE)
    assert VIEW.id_offset + DNA_VOCAB_SIZE == VOCAB_SIZE
    assert "DNA-block view, top-4107" in VIEW.describe() and "full vocabulary, top-4096" in full.describe()
