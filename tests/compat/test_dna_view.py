"""The DNA-block view (``harness.carbon.dna_view``), the artifact a served model is scored through: loaded
by plain transformers, it gives every 6-mer the distribution the full checkpoint gives, at every position of
a DNA prompt, for tied and untied lm heads. No server needed: this holds in every environment."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from harness.carbon.checkpoint import CheckpointError, write_checkpoint
from harness.carbon.dna import prompt_suite
from harness.carbon.dna_view import VIEW_FILE, cached_dna_view, view_config, view_id_offset, write_dna_view
from harness.carbon.fns import kmer_block
from harness.core.spec import MODELS
from harness.core.vocab import DNA_VOCAB_SIZE, QWEN3_VOCAB_SIZE, VOCAB_SIZE, DnaLayout

pytestmark = pytest.mark.compat

KMERS = slice(DnaLayout().kmer_start_id - QWEN3_VOCAB_SIZE, DnaLayout().kmer_start_id - QWEN3_VOCAB_SIZE + 4096)


@pytest.fixture(scope="module", params=["tied", "untied"])
def checkpoint(request, tmp_path_factory):
    spec = MODELS["carbon-tiny"] if request.param == "tied" else replace(MODELS["carbon-tiny"], tie_word_embeddings=False)
    return write_checkpoint(spec, tmp_path_factory.mktemp(f"view-{request.param}") / "ckpt")


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_the_view_gives_every_6mer_the_full_models_distribution_at_every_position(checkpoint, carbon_tokenizer,
                                                                                  tmp_path):
    write_dna_view(checkpoint, tmp_path)
    full, view = load(checkpoint), load(tmp_path)
    assert view.config.vocab_size == DNA_VOCAB_SIZE and view.get_output_embeddings().weight.shape[0] == DNA_VOCAB_SIZE
    ids = torch.tensor([carbon_tokenizer.encode("<dna>" + c.sequence[:300]) for c in prompt_suite(300)[:3]])
    with torch.no_grad():
        want = torch.log_softmax(kmer_block(full(ids).logits).double(), dim=-1)
        got = torch.log_softmax(view(ids - QWEN3_VOCAB_SIZE).logits[..., KMERS].double(), dim=-1)
    assert got.shape == want.shape == (3, 51, 4096)
    worst = (got - want).abs().amax(dim=-1)  # per position, <dna> (position 0) included
    assert worst.max().item() < 1e-5, f"position {int(worst.argmax())} differs by {worst.max():.2e}"


def test_the_view_records_what_it_is(checkpoint, tmp_path):
    write_dna_view(checkpoint, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["vocab_size"] == DNA_VOCAB_SIZE
    assert (config["bos_token_id"], config["eos_token_id"]) == (None, None)  # BPE ids: nothing in the view
    assert view_id_offset(tmp_path) == QWEN3_VOCAB_SIZE
    with pytest.raises(CheckpointError, match=f"is not a DNA-block view \\(no {VIEW_FILE}\\)"):
        view_id_offset(checkpoint)


def test_a_non_carbon_vocabulary_is_refused():
    with pytest.raises(CheckpointError, match=f"vocab_size=32000; a DNA-block view needs Carbon's {VOCAB_SIZE}"):
        view_config({"vocab_size": 32000})


def test_the_cached_view_follows_the_checkpoints_bytes(checkpoint, tmp_path):
    """Built once per checkpoint content: the same bytes reuse it, a changed byte builds another."""
    first = cached_dna_view(checkpoint, tmp_path)
    assert cached_dna_view(checkpoint, tmp_path) == first
    copy = tmp_path / "edited"
    copy.mkdir()
    for f in checkpoint.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    (copy / "carbon_harness_manifest.json").unlink()
    assert cached_dna_view(copy, tmp_path) != first


def test_a_corrupt_cached_view_is_rebuilt_saying_why(checkpoint, tmp_path):
    said: list[str] = []
    view = cached_dna_view(checkpoint, tmp_path, said.append)
    weights = view / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    assert cached_dna_view(checkpoint, tmp_path, said.append) == view
    assert weights.read_bytes() == good
    assert any(f"rebuilding {view}: {weights} has {len(good) // 2} bytes" in line for line in said), said
