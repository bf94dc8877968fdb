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

from harness.spec import ModelSpec, get_model
from harness.storage import StorageError, atomic_dir, build_once, is_complete, load_json
from harness.tokenizer import (
    DNA_SPECIAL_TOKENS,
    DNA_VOCAB_SIZE,
    PAD_TOKEN,
    QWEN3_VOCAB_SIZE,
    VOCAB_SIZE,
    K,
    builtin_tokenizer_dir,
)

WEIGHTS_FILE = "model.safetensors"
PROVENANCE_FILE = "carbon_harness.json"
INIT_STD = 0.02
CHUNK_ELEMENTS = 1 << 22  # bounded memory: 16 MiB of float32 per generation step
DEFAULT_SEED = 0


class CheckpointError(ValueError):
    """A checkpoint directory is missing, malformed or not Carbon-shaped; the message says which file."""


Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(f"[carbon-harness] {message}", file=sys.stderr, flush=True)


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16), as torch does."""
    bits = x.astype(np.float32, copy=False).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


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


def safetensors_header(shapes: dict[str, tuple[int, ...]], metadata: dict[str, str]) -> bytes:
    offsets, header, pos = {}, {"__metadata__": metadata}, 0
    for name, shape in shapes.items():
        nbytes = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
        offsets[name] = pos
        pos += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((-len(raw)) % 8)  # safetensors aligns the data section to 8 bytes
    return struct.pack("<Q", len(raw)) + raw


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
                                        "config_only": config_only})
    if not config_only:
        write_weights(spec, out / WEIGHTS_FILE, seed, progress)


def write_checkpoint(model: str | ModelSpec, out: str | Path, seed: int = DEFAULT_SEED, config_only: bool = False,
                     force: bool = False, progress: Progress | None = stderr_progress) -> Path:
    """Write a synthetic checkpoint atomically: ``out`` appears complete or not at all."""
    spec = model if isinstance(model, ModelSpec) else get_model(model)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StorageError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise StorageError(f"--out {out} exists and is not empty; pass --force to replace it")
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


def inspect_checkpoint(path: str | Path, require_weights: bool = True) -> CheckpointInfo:
    """Check that a directory is a loadable Carbon checkpoint, with a clear error if not."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory {root} does not exist")
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
                json.loads(f.read(n))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CheckpointError(f"{w} has a corrupt safetensors header ({exc})") from exc
    if require_weights and not weights:
        raise CheckpointError(f"{root} has no *.safetensors weights (a --config-only checkpoint?)")
    prov = root / PROVENANCE_FILE
    provenance = read_json(prov) if prov.is_file() else {}
    return CheckpointInfo(root, config, bool(weights), bool(provenance.get("synthetic")),
                          provenance.get("model") or root.name)


def fingerprint(path: str | Path) -> str:
    """A cheap content fingerprint: the JSON files whole, and for each weights file its size,
    header and first/last MiB (hashing 16 GB per session would defeat the cache)."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(root.iterdir()):
        if f.suffix == ".json" and f.name != PROVENANCE_FILE:
            h.update(f.name.encode() + f.read_bytes())
        elif f.suffix == ".safetensors":
            size = f.stat().st_size
            h.update(f"{f.name}:{size}".encode())
            with open(f, "rb") as fh:
                h.update(fh.read(1 << 20))
                fh.seek(max(0, size - (1 << 20)))
                h.update(fh.read(1 << 20))
    return h.hexdigest()[:24]


def cached_checkpoint(model: str, cache_dir: str | Path, seed: int | None = None,
                      progress: Progress | None = stderr_progress) -> Path:
    """The synthetic checkpoint of ``model`` in the cache, built on first use (once, under a lock);
    ``seed`` defaults to the spec's own (a draft's differs from its target's)."""
    spec = get_model(model)
    seed = spec.seed if seed is None else seed
    dest = Path(cache_dir) / "checkpoints" / f"{spec.name}-seed{seed}"
    if is_complete(dest):
        return dest

    def build(tmp: Path) -> None:
        if progress:
            progress(f"building {spec.name} (seed {seed}) into the cache at {dest}")
        populate(spec, tmp, seed, False, progress)

    path, _ = build_once(dest, build, validate=inspect_checkpoint, log=progress or (lambda _: None))
    return path
