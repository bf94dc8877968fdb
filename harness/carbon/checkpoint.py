"""Synthetic Carbon checkpoints: the real architecture and tokenizer files, seeded weights.

Weights come from numpy's PCG64 and are written by a small streaming safetensors writer (bf16
bit patterns computed in numpy), so the same seed gives byte-identical files on any machine and
any torch version, and an 8B model is written with bounded memory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.carbon.qwen3 import builtin_tokenizer_dir
from harness.carbon.safetensors_bf16 import float32_to_bf16_bits, safetensors_header  # noqa: F401 (API)
from harness.core.spec import ModelSpec, get_model
from harness.core.storage import (
    COMPLETE_MARKER,
    StorageError,
    atomic_dir,
    build_once,
    exclusive_lock,
    is_complete,
    load_json,
    remove_stale_partials,
    sha256_file,
)
from harness.core.vocab import DNA_SPECIAL_TOKENS, DNA_VOCAB_SIZE, PAD_TOKEN, QWEN3_VOCAB_SIZE, VOCAB_SIZE, K

WEIGHTS_FILE = "model.safetensors"
PROVENANCE_FILE = "carbon_harness.json"
MANIFEST_FILE = "carbon_harness_manifest.json"  # sha256 and size of every other file, written last
WRITER_VERSION = 1  # bump when populate() writes different bytes for the same spec and seed
INIT_STD = 0.02
CHUNK_ELEMENTS = 1 << 22  # bounded memory: 16 MiB of float32 per generation step
DEFAULT_SEED = 0


class CheckpointError(ValueError):
    """A checkpoint directory is missing, malformed or not Carbon-shaped; the message says which file."""


Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(f"[carbon-harness] {message}", file=sys.stderr, flush=True)


def init_std(name: str, shape: tuple[int, ...]) -> float:
    """Embeddings N(0, 0.02); projections N(0, 1/sqrt(fan_in)) so that, behind the pre-norms,
    attention and MLP outweigh the token embedding and greedy output depends on the whole
    context (with 0.02 everywhere a synthetic model just repeats one token, which would make
    batch-equivalence and accuracy checks vacuous)."""
    if name == "model.embed_tokens.weight":
        return INIT_STD
    return float(shape[-1]) ** -0.5


def _tensor_stream(shape: tuple[int, ...], name: str, seed: int, index: int):
    """bf16 bytes of one tensor in chunks: norms are ones, weights seeded normals."""
    n = int(np.prod(shape))
    if name.endswith("norm.weight"):
        yield float32_to_bf16_bits(np.ones(n, dtype=np.float32)).tobytes()
        return
    rng = np.random.Generator(np.random.PCG64([seed, index]))
    std = np.float32(init_std(name, shape))
    for start in range(0, n, CHUNK_ELEMENTS):
        chunk = rng.standard_normal(min(CHUNK_ELEMENTS, n - start), dtype=np.float32) * std
        yield float32_to_bf16_bits(chunk).tobytes()


def write_weights(spec: ModelSpec, path: Path, seed: int, progress: Progress | None = None) -> None:
    shapes = spec.tensor_shapes()
    total = spec.weight_bytes(2)
    written, last = 0, 0.0
    with open(path, "wb") as f:
        f.write(safetensors_header(shapes, {"format": "pt", "carbon_harness_seed": str(seed),
                                            "carbon_harness_model": spec.name}))
        for index, (name, shape) in enumerate(shapes.items()):
            for data in _tensor_stream(shape, name, seed, index):
                f.write(data)
                written += len(data)
                now = time.monotonic()
                if progress and (now - last > 2.0 or written == total):
                    progress(f"{spec.name}: weights {written / 2**30:.2f} / {total / 2**30:.2f} GiB "
                             f"({100 * written / total:.0f}%)")
                    last = now


def tokenizer_config(spec: ModelSpec) -> dict[str, Any]:
    return {
        "tokenizer_class": "HybridDNATokenizer",
        "model_max_length": spec.max_position_embeddings,
        "pad_token": PAD_TOKEN,
        "eos_token": PAD_TOKEN,
        "bos_token": None,
        "padding_side": "right",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }


def dna_config() -> dict[str, Any]:
    return {
        "k": K,
        "dna_start_id": QWEN3_VOCAB_SIZE,
        "dna_vocab_size": DNA_VOCAB_SIZE,
        "dna_special_tokens": list(DNA_SPECIAL_TOKENS),
        "auto_dna_tags": False,
    }


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def populate(spec: ModelSpec, out: Path, seed: int, config_only: bool, progress: Progress | None) -> None:
    """Write every checkpoint file into ``out`` (a fresh temporary directory)."""
    _write_json(out / "config.json", spec.hf_config())
    _write_json(out / "generation_config.json",
                {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 151643, "do_sample": False})
    _write_json(out / "tokenizer_config.json", tokenizer_config(spec))
    _write_json(out / "special_tokens_map.json", {"pad_token": PAD_TOKEN, "eos_token": PAD_TOKEN})
    _write_json(out / "dna_config.json", dna_config())
    src = builtin_tokenizer_dir()
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        shutil.copyfile(src / name, out / name)
    _write_json(out / PROVENANCE_FILE, {"synthetic": True, "model": spec.name, "seed": seed,
                                        "config_only": config_only, "spec_digest": spec_digest(spec, seed)})
    if not config_only:
        write_weights(spec, out / WEIGHTS_FILE, seed, progress)
        if spec.trained:
            from harness.carbon.training import train_in_place

            train_in_place(spec, out, seed, out / PROVENANCE_FILE, progress)
    write_manifest(out)


def spec_digest(spec: ModelSpec, seed: int) -> str:
    """What a synthetic checkpoint's bytes depend on: the config it writes, the seed and the writer."""
    key = {"hf_config": spec.hf_config(), "seed": seed, "writer": WRITER_VERSION,
           "tensors": {k: list(v) for k, v in spec.tensor_shapes().items()}}
    if spec.trained:
        from harness.carbon.training import Recipe

        key["trained"] = Recipe().key()
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _content_files(root: Path) -> list[Path]:
    return sorted(f for f in root.iterdir() if f.is_file() and f.name not in (MANIFEST_FILE, COMPLETE_MARKER))


def write_manifest(root: Path) -> Path:
    """Record the sha256 and size of every file, so later corruption (a truncated or edited file,
    random bytes inside the weights) is detected instead of measured."""
    files = {f.name: {"sha256": sha256_file(f), "size": f.stat().st_size} for f in _content_files(root)}
    _write_json(root / MANIFEST_FILE, {"schema": 1, "files": files})
    return root / MANIFEST_FILE


def read_manifest(root: Path) -> dict[str, dict[str, Any]] | None:
    path = root / MANIFEST_FILE
    if not path.is_file():
        return None
    data = read_json(path)
    files = data.get("files")
    if data.get("schema") != 1 or not isinstance(files, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("size"), int)
            for v in files.values()):
        raise CheckpointError(f"{path} is malformed (expected schema 1 with files: name -> sha256, size)")
    return files


def verify_checkpoint(path: str | Path) -> bool:
    """Check every file against the manifest (a missing, resized or altered file raises a
    CheckpointError naming it); False when the directory has no manifest to check against."""
    root = Path(path)
    files = read_manifest(root)
    if files is None:
        return False
    for name, want in sorted(files.items()):
        f = root / name
        if not f.is_file():
            raise CheckpointError(f"{f} is missing (recorded in {MANIFEST_FILE})")
        size = f.stat().st_size
        if size != want["size"]:
            raise CheckpointError(f"{f} has {size} bytes, {want['size']} recorded in {MANIFEST_FILE} (truncated?)")
        if sha256_file(f) != want["sha256"]:
            raise CheckpointError(f"{f} does not match its sha256 recorded in {MANIFEST_FILE} (corrupt)")
    extra = sorted({f.name for f in _content_files(root) if f.suffix in (".json", ".safetensors")} - set(files))
    if extra:
        raise CheckpointError(f"{root / extra[0]} is not in {MANIFEST_FILE} (added after the checkpoint was written)")
    return True


def write_checkpoint(model: str | ModelSpec, out: str | Path, seed: int = DEFAULT_SEED, config_only: bool = False,
                     force: bool = False, progress: Progress | None = stderr_progress) -> Path:
    """Write a synthetic checkpoint atomically: ``out`` appears complete or not at all."""
    spec = model if isinstance(model, ModelSpec) else get_model(model)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StorageError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise StorageError(f"--out {out} exists and is not empty; pass --force to replace it")
    # One writer per --out at a time: a second concurrent run fails naming the lock instead of
    # racing the first and silently winning.
    with exclusive_lock(out, f"another carbon-harness checkpoint is writing {out}; wait for it to finish "
                             "or choose another --out"):
        if out.is_dir() and any(out.iterdir()) and not force:
            raise StorageError(f"--out {out} exists and is not empty; pass --force to replace it")
        remove_stale_partials(out, progress)
        if progress:
            progress(f"writing {spec.name} ({spec.num_parameters / 1e9:.3f} B parameters, seed {seed}"
                     f"{', config only' if config_only else ''}) to {out}")
        with atomic_dir(out, replace=True) as tmp:
            populate(spec, tmp, seed, config_only, progress)
    return out


# ---------------------------------------------------------------------------------------------
# Reading checkpoints
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    config: dict[str, Any]
    has_weights: bool
    synthetic: bool
    name: str


def read_json(path: Path) -> dict[str, Any]:
    data = load_json(path, CheckpointError, "checkpoint file")
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def inspect_checkpoint(path: str | Path, require_weights: bool = True, verify: bool = False) -> CheckpointInfo:
    """Check that a directory is a loadable Carbon checkpoint, with a clear error if not;
    ``verify`` also checks every file against the manifest, where the checkpoint has one."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory {root} does not exist: give an existing checkpoint directory "
                              "(--carbon-model PATH, --carbon-model-root DIR), or a model name to build the embedded "
                              "one")
    if verify:
        verify_checkpoint(root)
    config = read_json(root / "config.json")
    if config.get("model_type") != "llama":
        raise CheckpointError(f"{root / 'config.json'}: model_type={config.get('model_type')!r}; Carbon is 'llama'")
    if config.get("vocab_size") != VOCAB_SIZE:
        raise CheckpointError(
            f"{root / 'config.json'}: vocab_size={config.get('vocab_size')!r}; Carbon checkpoints have {VOCAB_SIZE}"
        )
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise CheckpointError(f"{root / 'config.json'}: {key}={config.get(key)!r} must be a positive integer")
    weights = sorted(root.glob("*.safetensors"))
    for w in weights:
        with open(w, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{w} is truncated (no safetensors header)")
            (n,) = struct.unpack("<Q", head)
            if n > 100 * 2**20:
                raise CheckpointError(f"{w} has an implausible header length {n}: not a safetensors file")
            try:
                header = json.loads(f.read(n))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CheckpointError(f"{w} has a corrupt safetensors header ({exc})") from exc
        if not isinstance(header, dict):
            raise CheckpointError(f"{w} has a corrupt safetensors header (not an object)")
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            shape = (header.get(name) or {}).get("shape") if isinstance(header.get(name), dict) else None
            if shape and shape[0] != config["vocab_size"]:
                raise CheckpointError(f"{w}: {name} has {shape[0]} rows but {root / 'config.json'} says "
                                      f"vocab_size={config['vocab_size']}: config and weights disagree")
    dna = root / "dna_config.json"
    if dna.exists():
        read_json(dna)  # non-UTF-8, malformed or null: one line naming the file, not a tokenizer traceback
    if require_weights and not weights:
        raise CheckpointError(f"{root} has no *.safetensors weights (a --config-only checkpoint?)")
    prov = root / PROVENANCE_FILE
    provenance = read_json(prov) if prov.is_file() else {}
    return CheckpointInfo(root, config, bool(weights), bool(provenance.get("synthetic")),
                          provenance.get("model") or root.name)


_FULL_HASHES: dict[tuple[str, int, int], str] = {}


def fingerprint(path: str | Path) -> str:
    """A content fingerprint for artifact keys: it changes whenever any byte of a checkpoint file does.

    With a manifest (every checkpoint the harness writes) it digests the recorded sha256 of each
    file, after checking the files against them (once per process); without one (a user's real
    checkpoint) it hashes the weights whole, once per process per file version."""
    root = Path(path)
    h = hashlib.sha256()
    files = read_manifest(root)
    if files is not None:
        stamp = (str(root.resolve()), 0, max((f.stat().st_mtime_ns for f in _content_files(root)), default=0))
        if stamp not in _FULL_HASHES:
            verify_checkpoint(root)
            _FULL_HASHES[stamp] = "verified"
        for name, want in sorted(files.items()):
            if name != PROVENANCE_FILE:
                h.update(f"{name}:{want['size']}:{want['sha256']}\n".encode())
        return h.hexdigest()[:24]
    for f in sorted(root.iterdir()):
        if f.suffix == ".json" and f.name != PROVENANCE_FILE:
            h.update(f.name.encode() + f.read_bytes())
        elif f.suffix == ".safetensors":
            st = f.stat()
            key = (str(f.resolve()), st.st_size, st.st_mtime_ns)
            if key not in _FULL_HASHES:
                _FULL_HASHES[key] = sha256_file(f)
            h.update(f"{f.name}:{st.st_size}:{_FULL_HASHES[key]}\n".encode())
    return h.hexdigest()[:24]


_VERIFIED: set[Path] = set()  # cache entries checked against their manifest in this process


def cached_checkpoint(model: str, cache_dir: str | Path, seed: int | None = None,
                      progress: Progress | None = stderr_progress) -> Path:
    """The synthetic checkpoint of ``model`` in the cache, built on first use (once, under a lock);
    ``seed`` defaults to the spec's own (a draft's differs from its target's).

    The entry's name carries a digest of the spec (hf config, tensor shapes), the seed and the
    writer version, so a changed spec never reuses stale weights. Once per process the entry is
    checked against its manifest (sha256 of every file); a corrupt, truncated or missing file is
    rebuilt, with a progress line saying which and why."""
    spec = get_model(model)
    seed = spec.seed if seed is None else seed
    if not str(cache_dir).strip():
        raise StorageError("cache directory '' is empty: give a directory")
    dest = Path(cache_dir) / "checkpoints" / f"{spec.name}-seed{seed}-{spec_digest(spec, seed)[:12]}"
    if dest in _VERIFIED and is_complete(dest):
        return dest

    def build(tmp: Path) -> None:
        if progress:
            progress(f"building {spec.name} (seed {seed}) into the cache at {dest}")
        populate(spec, tmp, seed, False, progress)

    def validate(path: Path) -> None:
        inspect_checkpoint(path, verify=True)
        if read_manifest(path) is None:
            raise CheckpointError(f"{path / MANIFEST_FILE} is missing (written by an older harness)")

    path, _ = build_once(dest, build, validate=validate, log=progress or (lambda _: None))
    _VERIFIED.add(dest)
    return path
