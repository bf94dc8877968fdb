"""The neuron scoring build (``harness.backends.neuron.scoring``) against transformers, in NxDI's CPU
mode on the embedded default: the 6-mer logits at every real position, position 0 included, and
every score built on them (variant effects, a scan, bp-level sequence scores) equal to hf's at fp32
tolerance. The scoring build is NxDI's own Llama with two changes, so these run NxDI's real code.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.backends.base import Batch
from harness.backends.hf import HFEngine
from harness.backends.neuron.engine import NeuronEngine
from harness.carbon.checkpoint import write_checkpoint
from harness.carbon.dna import prompt_suite
from harness.carbon.fns import kmer_block
from harness.carbon.variants import synthetic_window
from harness.core.errors import BackendCannot
from harness.core.plan import PlanError
from harness.core.spec import MODELS, RopeScaling, get_shape
from harness.workloads.scoring import scan_window
from tests.helpers import SCORE_RTOL, assert_scan_agrees, assert_sequence_scores_agree, assert_variant_scores_agree

pytestmark = [pytest.mark.compat, pytest.mark.neuron]

SHAPE = get_shape("vep-bs8")
# NxDI's CPU mode and transformers both run fp32 on the same weights: logits differ by rounding only
# (measured: < 5e-7 on carbon-tiny); scores are sums over up to 1,530 bases.
LOGITS_ATOL = 1e-5


@pytest.fixture(scope="module")
def neuron(nxdi_cpu_engine):
    return nxdi_cpu_engine(SHAPE)


@pytest.fixture(scope="module")
def hf(tiny_hf_engine):
    return tiny_hf_engine(SHAPE)


@pytest.fixture(scope="module")
def ragged(carbon_tokenizer) -> Batch:
    """Three right-padded rows of different lengths (DNA, DNA, text then DNA)."""
    suite = prompt_suite(600)
    return Batch.from_prompts(carbon_tokenizer, [suite[0].prompt, suite[1].prompt[:200], "hi <dna>ACGTACGGTTAA"])


def test_kmer_logits_match_hf_at_every_real_position(neuron, hf, ragged):
    got, want = neuron.kmer_logits(ragged), kmer_block(hf.logits(ragged))
    assert got.shape == (ragged.size, ragged.input_ids.shape[1], 4096)
    for row, n in enumerate(ragged.prompt_lengths.tolist()):
        diff = (got[row, :n] - want[row, :n]).abs().amax(-1)  # per position, 0 (after <dna> or text) included
        assert diff.max().item() < LOGITS_ATOL, f"row {row}: worst position {int(diff.argmax())} differs by {diff.max():.2e}"


def test_variant_scores_match_hf(neuron, hf, carbon_tokenizer, scoring_window, scoring_variants):
    assert_variant_scores_agree(neuron, hf, carbon_tokenizer, scoring_window, scoring_variants)


@pytest.mark.parametrize("trim", [0, 3], ids=["whole-6mers", "trailing-partial-6mer"])
def test_scan_matches_hf_base_by_base(neuron, hf, carbon_tokenizer, scoring_window, trim):
    assert_scan_agrees(neuron, hf, carbon_tokenizer, scoring_window, trim)


def test_sequence_scores_match_hf(neuron, hf, carbon_tokenizer):
    assert_sequence_scores_agree(neuron, hf, carbon_tokenizer)


def test_the_scoring_engine_generates_nothing(neuron, ragged):
    assert neuron.info.extra["build"] == "scoring"
    with pytest.raises(BackendCannot, match="'vep-bs8' is a scoring shape"):
        neuron.generate(ragged, 2)
    with pytest.raises(BackendCannot, match="scoring reads kmer_logits"):
        neuron.logits(ragged)
    assert torch.equal(neuron.kmer_logits(ragged), neuron.kmer_logits(ragged))  # no state carried between calls


# --- checkpoints other than the embedded default's: an untied lm head, a YaRN context extension ---------

SCAN = get_shape("scan-cpu")  # 512 positions
SHORT = replace(MODELS["carbon-tiny"], max_position_embeddings=256)  # native 256: a 512-position scan needs YaRN


@pytest.fixture(scope="module")
def variant_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("scoring-checkpoints")
    specs = {"untied": replace(MODELS["carbon-tiny"], tie_word_embeddings=False), "short": SHORT,
             "yarn": SHORT.with_rope_scaling(RopeScaling(2.0, 256))}
    return {name: write_checkpoint(spec, root / name) for name, spec in specs.items()}


def neuron_engine(checkpoint, shape, carbon_session):
    return NeuronEngine(checkpoint, shape, "carbon-tiny", hardware="cpu", cpu=True,
                        nxdi_source=carbon_session.config.nxdi_source)


def test_an_untied_lm_head_is_sliced_to_its_6mer_rows(nxdi_cpu, carbon_session, variant_checkpoints, ragged):
    """Carbon-8B does not tie its lm head to the embedding: the 6-mer rows come from the lm head itself."""
    checkpoint = variant_checkpoints["untied"]
    neuron = neuron_engine(checkpoint, SHAPE, carbon_session)
    hf = HFEngine(checkpoint, SHAPE, "carbon-tiny", device="cpu", dtype="fp32")
    got, want = neuron.kmer_logits(ragged), kmer_block(hf.logits(ragged))
    for row, n in enumerate(ragged.prompt_lengths.tolist()):
        assert (got[row, :n] - want[row, :n]).abs().max().item() < LOGITS_ATOL, f"row {row}"


def test_a_scan_past_the_native_positions_runs_with_yarn(nxdi_cpu, carbon_session, variant_checkpoints,
                                                         carbon_tokenizer):
    """512 positions on a 256-position model: with YaRN x2 in its config.json the plan lets it run (NxDI
    takes YaRN through transformers' rotary embedding) and every base's score equals transformers'."""
    checkpoint = variant_checkpoints["yarn"]
    window = synthetic_window(bp=SCAN.prompt_bp, chrom="scan")
    got = scan_window(neuron_engine(checkpoint, SCAN, carbon_session), carbon_tokenizer, window)
    want = scan_window(HFEngine(checkpoint, SCAN, "carbon-tiny", device="cpu", dtype="fp32"), carbon_tokenizer, window)
    assert got.log_probs.shape == (window.scored_bp,)
    np.testing.assert_allclose(got.log_probs, want.log_probs, rtol=SCORE_RTOL, atol=1e-6)


def test_a_scan_past_the_native_positions_without_yarn_is_refused_with_the_plans_numbers(
        nxdi_cpu, carbon_session, variant_checkpoints):
    with pytest.raises(PlanError, match=r"carbon-tiny / scan-cpu: 512 positions exceed the model's "
                                        r"max_position_embeddings=256; extend it with YaRN \(--rope-scaling yarn:2\)"):
        neuron_engine(variant_checkpoints["short"], SCAN, carbon_session)
