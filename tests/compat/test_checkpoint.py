"""Synthetic checkpoints load offline with transformers and match the published Carbon configs."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from harness.carbon.checkpoint import CheckpointError, fingerprint, inspect_checkpoint, write_checkpoint
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.spec import MODELS, get_model
from harness.core.storage import StorageError, sha256_file
from tests.helpers import run_cli, start_cli

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
    r = run_cli("checkpoint", "--model", "carbon-tiny", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "weights" in r.stderr  # progress is shown
    assert inspect_checkpoint(out).has_weights


@pytest.mark.parametrize("args,message", [
    (["--model", "carbon-9b"], "unknown model 'carbon-9b'; known models: carbon-500m, carbon-3b, carbon-8b"),
    (["--model", "carbon-tiny", "--seed", "-1"], "'-1' must be >= 0"),
])
def test_cli_rejects_bad_arguments(tmp_path, args, message):
    r = run_cli("checkpoint", "--out", str(tmp_path / "x"), *args)
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
    import harness.carbon.checkpoint as ck

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


# -- cached checkpoints are verified, rebuilt or refused (issue 12, item 4) ------------------------

def _corrupt_middle(path):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = bytes(4096)  # zeros inside the weights: the header stays valid
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage,reason", [
    (lambda d: _corrupt_middle(d / "model.safetensors"), "model.safetensors does not match its sha256"),
    (lambda d: (d / "config.json").unlink(), "config.json is missing"),
    (lambda d: (d / "config.json").write_text((d / "config.json").read_text()[:40]), "config.json has 40 bytes"),
])
def test_a_damaged_cache_entry_is_rebuilt_saying_why(tmp_path, damage, reason):
    from harness.carbon import checkpoint as ck

    first = ck.cached_checkpoint("carbon-tiny", tmp_path, progress=None)
    damage(first)
    ck._VERIFIED.discard(first)  # a new session
    messages = []
    again = ck.cached_checkpoint("carbon-tiny", tmp_path, progress=messages.append)
    assert again == first and ck.verify_checkpoint(again)
    assert sha256_file(again / "model.safetensors") == CARBON_TINY_SEED0_SHA256
    assert any("rebuilding" in m and reason in m for m in messages), messages


def test_a_user_checkpoint_that_fails_verification_names_the_file(tmp_path):
    out = write_checkpoint("carbon-tiny", tmp_path / "ck", progress=None)
    before = fingerprint(out)
    _corrupt_middle(out / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"ck/model.safetensors does not match its sha256"):
        inspect_checkpoint(out, verify=True)
    with pytest.raises(CheckpointError, match="model.safetensors does not match"):
        fingerprint(out)  # artifact keys never come from unverified content
    write_checkpoint("carbon-tiny", out, seed=1, force=True, progress=None)
    assert fingerprint(out) != before


def test_fingerprint_of_a_checkpoint_without_manifest_sees_every_byte(tmp_path):
    from harness.carbon.checkpoint import MANIFEST_FILE

    out = write_checkpoint("carbon-tiny", tmp_path / "ck", progress=None)
    (out / MANIFEST_FILE).unlink()  # as a real published checkpoint: no manifest
    before = fingerprint(out)
    _corrupt_middle(out / "model.safetensors")  # not in the first or last MiB
    assert fingerprint(out) != before


def test_the_cache_entry_is_tied_to_the_spec(tmp_path):
    from dataclasses import replace

    from harness.carbon.checkpoint import spec_digest

    spec = get_model("carbon-tiny")
    assert spec_digest(spec, 0) != spec_digest(replace(spec, head_dim=16), 0) != spec_digest(spec, 1)
    path = __import__("harness.carbon.checkpoint", fromlist=["x"]).cached_checkpoint("carbon-tiny", tmp_path, progress=None)
    assert path.name == f"carbon-tiny-seed0-{spec_digest(spec, 0)[:12]}"


def test_golden_refuses_a_corrupt_cache_by_rebuilding_first(tmp_path):
    """`carbon-harness golden` on a corrupt cache rebuilds (saying why) and writes the same goldens
    as the committed ones: never goldens from damaged weights."""
    from harness.carbon import checkpoint as ck
    from harness.core.paths import FIXTURES_DIR

    entry = ck.cached_checkpoint("carbon-tiny", tmp_path / "cache", progress=None)
    _corrupt_middle(entry / "model.safetensors")
    out = tmp_path / "golden.json"
    r = run_cli("golden", "--out", str(out), "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    assert "rebuilding" in r.stderr and "model.safetensors does not match its sha256" in r.stderr
    golden = json.loads((FIXTURES_DIR / "golden" / "carbon-tiny-seed0.json").read_text())
    assert {k: v["tokens"] for k, v in json.loads(out.read_text())["cases"].items()} == {
        k: v["tokens"] for k, v in golden["cases"].items()}


def _qwen_sized_weights(d):
    """Weights whose embedding has another vocabulary than config.json (a Qwen3 checkpoint's)."""
    from harness.carbon.checkpoint import safetensors_header

    (d / "model.safetensors").write_bytes(safetensors_header({"model.embed_tokens.weight": (151936, 64)}, {}))


@pytest.mark.parametrize("mutate,message", [
    (lambda d: (d / "dna_config.json").write_bytes(b'{"k": 6, "x": "\xff\xfe"}'),
     "dna_config.json: not valid JSON (not UTF-8"),
    (lambda d: (d / "dna_config.json").write_text("null"), "dna_config.json must hold a JSON object"),
    (lambda d: _qwen_sized_weights(d), "model.embed_tokens.weight has 151936 rows but"),
])
def test_malformed_tokenizer_config_and_vocab_mismatch_are_one_line(tmp_path, mutate, message):
    out = write_checkpoint("carbon-tiny", tmp_path / "ck", progress=None)
    mutate(out)
    with pytest.raises(CheckpointError, match=re.escape(message)):
        inspect_checkpoint(out)


# -- concurrent writers and killed builds (items 6 and 8) -----------------------------------------

def _cli_checkpoint(out, *extra):
    return start_cli("checkpoint", "--model", "carbon-tiny", "--out", str(out), *extra)


def test_a_second_writer_of_one_out_fails_clearly_while_the_first_holds_it(tmp_path):
    from filelock import FileLock

    out = tmp_path / "ck"
    with FileLock(str(tmp_path / ".ck.lock")):  # the first writer, mid-build
        p = _cli_checkpoint(out, "--force")
        _, err = p.communicate(timeout=120)
    assert p.returncode == 2
    assert f"another carbon-harness checkpoint is writing {out}" in err and "lock" in err
    assert not out.exists()


def test_concurrent_writers_never_silently_race(tmp_path):
    """Two real processes into one --out: each either finishes or fails naming the other writer;
    what is left is one complete, pinned checkpoint and no partial directory."""
    out = tmp_path / "ck"
    procs = [_cli_checkpoint(out, "--force") for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for rc, err in results:
        assert rc == 0 or (rc == 2 and "another carbon-harness checkpoint is writing" in err), err
    assert any(rc == 0 for rc, _ in results)
    assert sha256_file(out / "model.safetensors") == CARBON_TINY_SEED0_SHA256
    from harness.carbon.checkpoint import verify_checkpoint

    assert verify_checkpoint(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ck.lock", "ck"]


def test_stale_partials_of_killed_builds_are_removed_at_the_next_build(tmp_path):
    from harness.carbon import checkpoint as ck

    cache = tmp_path / "cache" / "checkpoints"
    cache.mkdir(parents=True)
    name = f"carbon-tiny-seed0-{ck.spec_digest(get_model('carbon-tiny'), 0)[:12]}"
    stale = cache / f".{name}.k1ll3d_x.partial"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"\0" * 1024)
    other = cache / f".{name}-other.abc.partial"  # another key's build: not ours to remove
    other.mkdir()
    messages = []
    ck.cached_checkpoint("carbon-tiny", tmp_path / "cache", progress=messages.append)
    assert not stale.exists() and other.exists()
    assert any("stale partial" in m for m in messages)
    out = tmp_path / "out"
    (tmp_path / ".out.dead0001.partial").mkdir()
    write_checkpoint("carbon-tiny", out, config_only=True, progress=None)
    assert not (tmp_path / ".out.dead0001.partial").exists()


def test_golden_out_onto_an_existing_file_needs_force(tmp_path, carbon_tiny_checkpoint, carbon_cache_dir):
    """`golden --out FILE` never silently replaces a file (a committed golden is the reference every
    accuracy check compares against): it refuses before generating, naming the file and --force;
    with --force it replaces it whole, and a directory is refused outright."""
    out = tmp_path / "golden.json"
    out.write_text("the committed golden\n")
    cache = ["--cache-dir", str(carbon_cache_dir)]
    r = run_cli("golden", "--out", str(out), *cache)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(out) in r.stderr and "--force" in r.stderr, r.stderr
    assert out.read_text() == "the committed golden\n"
    r = run_cli("golden", "--out", str(tmp_path), "--force", *cache)
    assert r.returncode == 2 and "is a directory" in r.stderr, r.stdout + r.stderr
    r = run_cli("golden", "--out", str(out), "--force", *cache)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["model"] == "carbon-tiny"
    assert [p.name for p in tmp_path.iterdir()] == ["golden.json"]  # no partial left beside it
