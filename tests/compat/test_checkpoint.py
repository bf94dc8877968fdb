"""Synthetic checkpoints load offline with transformers and match the published Carbon configs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from harness.checkpoint import (
    CheckpointError,
    fingerprint,
    inspect_checkpoint,
    write_checkpoint,
)
from harness.spec import MODELS, get_model
from harness.storage import StorageError
from harness.tokenizer import CarbonTokenizer, sha256_file

pytestmark = pytest.mark.compat

# DESIGN.md, "Model configs": hidden, layers, heads, kv heads, head_dim, ffn, tied, rope_theta, rms_eps, max_pos
PUBLISHED = {
    "carbon-500m": (1024, 28, 16, 8, 64, 3072, True, 500000, 1e-6, 8192),
    "carbon-3b": (3072, 30, 32, 4, 96, 8448, True, 5000000, 1e-6, 32768),
    "carbon-8b": (4096, 32, 32, 8, 128, 14336, False, 5000000, 1e-5, 32768),
}
FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
          "intermediate_size", "tie_word_embeddings", "rope_theta", "rms_norm_eps", "max_position_embeddings")
# Pinned: numpy PCG64 + our own bf16 rounding and safetensors writer make this independent of torch.
CARBON_TINY_SEED0_SHA256 = "0d0d55cbb2589ad4314d205a757389b53c9f729c0568570eb1b4517b672e832f"


def rope_theta(cfg) -> float:
    """transformers 5 moves rope_theta into rope_parameters; 4.57 keeps the attribute."""
    params = getattr(cfg, "rope_parameters", None) or {}
    return params.get("rope_theta", getattr(cfg, "rope_theta", None))


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_real_size_config_matches_published(tmp_path, model):
    out = write_checkpoint(model, tmp_path / model, config_only=True, progress=None)
    raw = json.loads((out / "config.json").read_text())
    assert tuple(raw[f] for f in FIELDS) == PUBLISHED[model]
    assert (raw["vocab_size"], raw["bos_token_id"], raw["eos_token_id"]) == (155776, 1, 2)
    assert raw["architectures"] == ["LlamaForCausalLM"] and raw["hidden_act"] == "silu"
    cfg = AutoConfig.from_pretrained(out)
    hidden, _, _, kv_heads, head_dim = PUBLISHED[model][:5]
    assert (cfg.hidden_size, cfg.num_key_value_heads, cfg.head_dim) == (hidden, kv_heads, head_dim)
    assert rope_theta(cfg) == PUBLISHED[model][7]
    assert not (out / "model.safetensors").exists()


@pytest.mark.parametrize("model,billions", [("carbon-500m", 0.512), ("carbon-3b", 3.45), ("carbon-8b", 8.26)])
def test_real_size_parameter_counts(tmp_path, model, billions):
    """The architecture built by transformers on the meta device has the published size."""
    out = write_checkpoint(model, tmp_path / model, config_only=True, progress=None)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out))
    n = sum(p.numel() for p in m.parameters())
    assert n == get_model(model).num_parameters
    assert abs(n / 1e9 - billions) < 0.01


def test_tiny_loads_offline_with_transformers(carbon_tiny_checkpoint, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = AutoModelForCausalLM.from_pretrained(carbon_tiny_checkpoint, dtype=torch.float32)
    spec = MODELS["carbon-tiny"]
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA kept
    assert model.num_parameters() == spec.num_parameters
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied, like 500M
    tok = CarbonTokenizer.from_checkpoint(carbon_tiny_checkpoint)
    logits = model(torch.tensor([tok.encode("<dna>ACGTACGTACGT")])).logits
    assert logits.shape == (1, 3, 155776) and torch.isfinite(logits).all()


def test_tiny_weights_are_pinned(tmp_path):
    out = write_checkpoint("carbon-tiny", tmp_path / "a", seed=0, progress=None)
    assert sha256_file(out / "model.safetensors") == CARBON_TINY_SEED0_SHA256


def test_seed_changes_weights_and_fingerprint(tmp_path):
    a = write_checkpoint("carbon-tiny", tmp_path / "a", seed=0, progress=None)
    b = write_checkpoint("carbon-tiny", tmp_path / "b", seed=1, progress=None)
    assert sha256_file(a / "model.safetensors") != sha256_file(b / "model.safetensors")
    assert fingerprint(a) != fingerprint(b)


def test_files_of_a_checkpoint(carbon_tiny_checkpoint):
    names = {p.name for p in carbon_tiny_checkpoint.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "vocab.json",
            "merges.txt", "tokenizer_config.json", "dna_config.json"} <= names
    dna = json.loads((carbon_tiny_checkpoint / "dna_config.json").read_text())
    assert dna == {"k": 6, "dna_start_id": 151669, "dna_vocab_size": 4107,
                   "dna_special_tokens": ["<dna>", "</dna>", "<oov>"], "auto_dna_tags": False}
    assert json.loads((carbon_tiny_checkpoint / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "HybridDNATokenizer")


def test_cli_writes_a_checkpoint(tmp_path):
    out = tmp_path / "ck"
    r = subprocess.run([sys.executable, "-m", "harness.cli", "checkpoint", "--model", "carbon-tiny", "--out",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "weights" in r.stderr  # progress is shown
    assert inspect_checkpoint(out).has_weights


@pytest.mark.parametrize("args,message", [
    (["--model", "carbon-9b"], "unknown model 'carbon-9b'; known models: carbon-500m, carbon-3b, carbon-8b"),
    (["--model", "carbon-tiny", "--seed", "-1"], "'-1' must be >= 0"),
])
def test_cli_rejects_bad_arguments(tmp_path, args, message):
    r = subprocess.run([sys.executable, "-m", "harness.cli", "checkpoint", "--out", str(tmp_path / "x"), *args],
                       capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr


def test_non_empty_out_needs_force(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(StorageError, match="not empty; pass --force"):
        write_checkpoint("carbon-tiny", tmp_path, config_only=True, progress=None)
    assert (tmp_path / "keep.txt").read_text() == "mine"
    write_checkpoint("carbon-tiny", tmp_path, config_only=True, force=True, progress=None)
    assert not (tmp_path / "keep.txt").exists() and (tmp_path / "config.json").is_file()


def test_unwritable_out_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError, match="cannot create directory"):
        write_checkpoint("carbon-tiny", blocker / "sub" / "ck", config_only=True, progress=None)


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    import harness.checkpoint as ck

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "write_weights", boom)
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint("carbon-tiny", tmp_path / "ck", progress=None)
    assert [p.name for p in tmp_path.iterdir()] == [".ck.lock"]  # only the (empty) lock file of --out


@pytest.mark.parametrize("mutate,message", [
    (lambda d: (d / "config.json").unlink(), "config.json does not exist"),
    (lambda d: (d / "config.json").write_text("{"), "config.json: not valid JSON"),
    (lambda d: (d / "config.json").write_text('{"model_type": "mistral"}'), "model_type='mistral'; Carbon is 'llama'"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x01"), "truncated"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage!garbage}"),
     "corrupt safetensors header"),
])
def test_malformed_checkpoints_are_named(tmp_path, mutate, message):
    out = write_checkpoint("carbon-tiny", tmp_path / "ck", progress=None)
    mutate(out)
    with pytest.raises(CheckpointError, match=message):
        inspect_checkpoint(out)
