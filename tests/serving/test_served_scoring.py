"""Scoring through a real vLLM server's prompt logprobs (the openai backend on a scoring shape) against
transformers on the served checkpoint: the 6-mer distribution at every position, position 0 included, and
every score built on it (variant effects, a scan, bp-level sequence scores), at fp32 tolerance.

The server is the one the session starts on the checkpoint's DNA-block view (``--carbon-serve vllm``), where
all 4,107 ids come back at every position; a server at ``--carbon-endpoint`` serves a full vocabulary, whose
top-k is refused (``test_vllm_server.py::test_full_vocabulary_top_k_is_refused_not_approximated``).
"""

from __future__ import annotations

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.openai import OpenAIEngine
from harness.carbon.dna import prompt_suite
from harness.carbon.fns import kmer_block
from harness.core.errors import BackendCannot
from harness.core.spec import get_shape
from tests.helpers import assert_scan_agrees, assert_sequence_scores_agree, assert_variant_scores_agree

pytestmark = [pytest.mark.serving, pytest.mark.compat]

SHAPE = get_shape("vep-bs8")
# vLLM and transformers both run fp32 on the same weights (measured: < 1e-6 on carbon-tiny's 6-mer log-probabilities)
LOGPROB_ATOL = 1e-5


@pytest.fixture(scope="module")
def served(carbon_session, carbon_endpoint, served_checkpoint):
    """The openai engine on the session's DNA-block view server of the served checkpoint."""
    if carbon_session.config.serve != "vllm":
        pytest.skip("exact served scoring needs the DNA-block view server that --carbon-serve vllm starts; a server "
                    "at --carbon-endpoint serves a full vocabulary (its top-k refusal is tested in test_vllm_server.py)")
    return OpenAIEngine(carbon_session.scoring_endpoint(served_checkpoint), SHAPE, "served",
                        checkpoint=str(served_checkpoint))


@pytest.fixture(scope="module")
def hf(served_hf_engine):
    return served_hf_engine(SHAPE)


@pytest.fixture(scope="module")
def ragged(carbon_tokenizer) -> Batch:
    """Three right-padded DNA rows of different lengths, one ending in a partial 6-mer."""
    suite = prompt_suite(600)
    return Batch.from_prompts(carbon_tokenizer, [suite[0].prompt, suite[1].prompt[:200], "<dna>ACGTACGGTTAAC"])


def test_kmer_logprobs_equal_hf_at_every_position(served, hf, ragged):
    got, want = served.kmer_logits(ragged), kmer_block(hf.logits(ragged))
    assert got.shape == (ragged.size, ragged.input_ids.shape[1], 4096)
    for row, n in enumerate(ragged.prompt_lengths.tolist()):
        # the server returns log-probabilities, transformers logits: equal up to one constant per position
        diff = (torch.log_softmax(got[row, :n].double(), -1) - torch.log_softmax(want[row, :n].double(), -1)).abs()
        worst = diff.amax(-1)
        assert worst.max().item() < LOGPROB_ATOL, (f"row {row}: position {int(worst.argmax())} differs by "
                                                   f"{worst.max():.2e}")
        assert torch.isnan(got[row, n:]).all(), "positions past a row's length were scored by nothing"


def test_variant_scores_equal_hf(served, hf, carbon_tokenizer, scoring_window, scoring_variants):
    assert_variant_scores_agree(served, hf, carbon_tokenizer, scoring_window, scoring_variants)


@pytest.mark.parametrize("trim", [0, 3], ids=["whole-6mers", "trailing-partial-6mer"])
def test_scan_equals_hf_base_by_base(served, hf, carbon_tokenizer, scoring_window, trim):
    assert_scan_agrees(served, hf, carbon_tokenizer, scoring_window, trim)


def test_sequence_scores_equal_hf(served, hf, carbon_tokenizer):
    assert_sequence_scores_agree(served, hf, carbon_tokenizer)


def test_a_text_token_is_refused_naming_it(served, carbon_tokenizer):
    batch = Batch.from_prompts(carbon_tokenizer, ["hi <dna>ACGTAC"])
    text_id = batch.input_ids[0, 0].item()
    with pytest.raises(ValueError, match=f"token {text_id} is not in the vocabulary of .*DNA-block view.* it scores "
                                         r"<dna> \+ 6-mer prompts only"):
        served.kmer_logits(batch)


def test_the_scoring_engine_generates_nothing(served, ragged):
    assert served.info.extra["build"] == "scoring" and "DNA-block view" in served.info.extra["scoring"]
    with pytest.raises(BackendCannot, match="'vep-bs8' is a scoring shape"):
        served.generate(ragged, 2)
    with pytest.raises(BackendCannot, match="scoring reads kmer_logits"):
        served.logits(ragged)
