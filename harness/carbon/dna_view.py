"""The DNA-block view of a checkpoint: the same model with its vocabulary cut to the DNA block, the
scoring artifact a served model is scored through (``harness.backends.openai``).

A server's prompt log-probabilities come as a top-k over the whole vocabulary, which can leave 6-mers out,
and the whole vocabulary (155,776 ids) is too much to return at every position. The view keeps the
transformer whole and keeps only the DNA block's rows of the embedding and the lm head (ids 151669..155775
become 0..4106, in order). A DNA prompt (``<dna>`` and 6-mers) reaches the same hidden states, each 6-mer
gets the same logit, and the view's softmax differs from the full one by one constant per position, which
the FNS marginals do not see. Asked for all 4,107 logprobs, a server on the view returns every 6-mer at
every position: the marginals are exact, for 38x less than the full vocabulary.

Built once per checkpoint (keyed by its content fingerprint) into the cache, atomically, with a manifest.
Weights are copied tensor by tensor in their own dtype, so the view holds as many bytes as the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.carbon.checkpoint import CheckpointError, fingerprint, read_json, verify_checkpoint, write_manifest
from harness.core.storage import build_once
from harness.core.vocab import DnaLayout

VIEW_FILE = "carbon_harness_view.json"
VIEW_FORMAT = 1
# the vocabulary-sized tensors of a Llama checkpoint; every other tensor is copied unchanged
VOCAB_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")
# token ids of the full vocabulary that name nothing in the view
DROPPED_CONFIG_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def view_config(config: dict[str, Any], layout: DnaLayout = DnaLayout()) -> dict[str, Any]:
    """The source's config.json with the DNA block as its whole vocabulary (and no BOS / EOS / pad, which
    are BPE ids: the view only scores)."""
    if config.get("vocab_size") != layout.dna_stop_id:
        raise CheckpointError(f"config.json has vocab_size={config.get('vocab_size')!r}; a DNA-block view needs "
                              f"Carbon's {layout.dna_stop_id} (the DNA block is ids {layout.dna_start_id}.."
                              f"{layout.dna_stop_id - 1})")
    return {**config, "vocab_size": layout.dna_vocab_size, **{k: None for k in DROPPED_CONFIG_IDS}}


def write_dna_view(source: Path, out: Path, layout: DnaLayout = DnaLayout()) -> None:
    """Write the view of the checkpoint at ``source`` into the (empty) directory ``out``."""
    import torch
    from safetensors.torch import load_file, save_file

    config = view_config(read_json(source / "config.json"), layout)
    shards = sorted(source.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(f"{source} has no *.safetensors weights to take a DNA-block view of")
    rows = slice(layout.dna_start_id, layout.dna_stop_id)
    cut = []
    for shard in shards:
        tensors = load_file(str(shard))
        for name in VOCAB_TENSORS:
            if name in tensors:
                if tensors[name].shape[0] != layout.dna_stop_id:
                    raise CheckpointError(f"{shard.name}: {name} has {tensors[name].shape[0]} rows, expected "
                                          f"{layout.dna_stop_id}")
                tensors[name] = tensors[name][rows].clone()
                cut.append(name)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / shard.name), metadata={"format": "pt"})
        del tensors
    if "model.embed_tokens.weight" not in cut:
        raise CheckpointError(f"{source} has no model.embed_tokens.weight")
    if not config.get("tie_word_embeddings") and "lm_head.weight" not in cut:
        raise CheckpointError(f"{source}: tie_word_embeddings is false but there is no lm_head.weight")
    index = source / "model.safetensors.index.json"
    if index.is_file():  # tensor names and shards are unchanged, only the two shapes
        (out / index.name).write_text(index.read_text())
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / VIEW_FILE).write_text(json.dumps({"format": VIEW_FORMAT, "view": "dna-block", "source": str(source),
                                             "id_offset": layout.dna_start_id, "vocab_size": layout.dna_vocab_size,
                                             "torch": torch.__version__}, indent=2))
    write_manifest(out)


def view_id_offset(path: Path) -> int:
    """The full-vocabulary id of view id 0, from the view's own record (refusing a directory that is not one)."""
    record = Path(path) / VIEW_FILE
    if not record.is_file():
        raise CheckpointError(f"{path} is not a DNA-block view (no {VIEW_FILE})")
    return int(read_json(record)["id_offset"])


def cached_dna_view(checkpoint: str | Path, cache_dir: str | Path,
                    progress: Callable[[str], None] | None = None) -> Path:
    """The view of ``checkpoint`` in the cache, built on first use (under a lock, atomically), keyed by the
    checkpoint's content fingerprint, so a changed checkpoint never reuses an old view; a corrupt or
    truncated one is rebuilt, the progress line saying why."""
    source = Path(checkpoint)
    dest = Path(cache_dir) / "dna-views" / f"{source.name}-{fingerprint(source)}-v{VIEW_FORMAT}"

    def build(tmp: Path) -> None:
        if progress:
            progress(f"building the DNA-block view of {source} (the served scoring artifact) at {dest}")
        write_dna_view(source, tmp)

    return build_once(dest, build, validate=check_view, log=progress or (lambda _: None))[0]


def check_view(path: Path) -> None:
    """A cached view is reused only if it is one and every file matches its manifest (else it is rebuilt)."""
    view_id_offset(path)
    if not verify_checkpoint(path):
        raise CheckpointError(f"{path} has no manifest to check its files against")
