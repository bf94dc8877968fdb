"""A small trained Carbon checkpoint: the synthetic init of an architecture trained a few minutes on the
CPU on DNA from a seeded Markov source (``harness.carbon.markov``), so its logits look like a trained
model's (non-DNA tokens far below, 6-mer distributions peaked where the source is predictable) where a
random init's are flat, with a near-tie at almost every position.

    carbon-harness checkpoint --model carbon-tiny-trained --out DIR      # or any use of the model name

Reproducible from the seed: the data, the init and the order of every step are seeded, torch runs a fixed
number of threads with deterministic algorithms, so a rerun on the same torch build and CPU gives the
same bytes (another build may differ in the last bits of a sum; the checkpoint's manifest then differs,
and so does its fingerprint). Built once into the cache like the synthetic ones (``cached_checkpoint``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.carbon.fns import kmer_ids_from_bases
from harness.carbon.markov import BASES, MarkovSource
from harness.core.vocab import QWEN3_VOCAB_SIZE as DNA_START_ID  # <dna>: the DNA block starts with it

TRAINER_VERSION = 1
DNA_END_ID = DNA_START_ID + 4099  # <dna>, </dna>, <oov> and the 4,096 6-mers; the unused tail after it
NON_DNA_SAMPLE = 4096


@dataclass(frozen=True)
class Recipe:
    """How a trained checkpoint is made (part of its cache key)."""

    steps: int = 600
    batch: int = 16
    tokens: int = 64  # per sequence: <dna> and 63 6-mers (378 bp)
    lr: float = 5e-3
    warmup: int = 20
    threads: int = 2
    source: MarkovSource = field(default_factory=MarkovSource)

    def key(self) -> dict[str, Any]:
        return {"trainer": TRAINER_VERSION, **asdict(self)}


def token_batches(recipe: Recipe, seed: int) -> torch.Tensor:
    """Every step's batch ``[steps, batch, tokens]``: <dna> then the 6-mers of fresh Markov DNA."""
    rng = np.random.Generator(np.random.PCG64([seed, 2]))
    kmers = recipe.tokens - 1
    n = recipe.steps * recipe.batch
    rows = np.empty((n, recipe.tokens), dtype=np.int64)
    lookup = {b: i for i, b in enumerate(BASES)}
    for i in range(n):
        dna = recipe.source.sample(kmers * 6, rng)
        idx = np.array([lookup[b] for b in dna]).reshape(kmers, 6)
        rows[i, 0] = DNA_START_ID
        rows[i, 1:] = kmer_ids_from_bases(idx)
    return torch.from_numpy(rows).reshape(recipe.steps, recipe.batch, recipe.tokens)


def lr_at(recipe: Recipe, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    t = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def sampled_loss(model: Any, batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Next-token cross-entropy over the DNA block and ``NON_DNA_SAMPLE`` uniformly drawn other ids, each
    sampled logit raised by log(others / sample) (the importance weight of a uniform draw), so the
    partition function is estimated without a 155,776-wide head per token: that full head made a step
    ~10 s on this CPU, and it is what pushes every non-DNA id far below the 6-mers, as training does."""
    hidden = model.model(input_ids=batch).last_hidden_state[:, :-1]
    others = torch.cat([torch.arange(0, DNA_START_ID), torch.arange(DNA_END_ID, model.config.vocab_size)])
    pick = others[torch.randperm(len(others), generator=generator)[:NON_DNA_SAMPLE]]
    ids = torch.cat([torch.arange(DNA_START_ID, DNA_END_ID), pick])
    logits = hidden @ model.get_output_embeddings().weight[ids].T
    correction = torch.zeros(len(ids))
    correction[DNA_END_ID - DNA_START_ID:] = math.log(len(others) / NON_DNA_SAMPLE)
    target = batch[:, 1:] - DNA_START_ID  # every target is a DNA-block id
    return torch.nn.functional.cross_entropy((logits + correction).reshape(-1, len(ids)), target.reshape(-1))


def train(checkpoint: Path, recipe: Recipe, seed: int, progress: Callable[[str], None] | None = None
          ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train the checkpoint's weights in place of its init (loaded in fp32); returns the trained state
    dict (tied weights once) and a summary (losses, seconds)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    try:
        data = token_batches(recipe, seed)
        generator = torch.Generator().manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)
        losses, start, last = [], time.perf_counter(), 0.0
        for step in range(recipe.steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(recipe, step)
            loss = sampled_loss(model, data[step], generator)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            now = time.perf_counter()
            if progress and (now - last > 10 or step == recipe.steps - 1):
                progress(f"training step {step + 1}/{recipe.steps}: loss {losses[-1]:.3f} "
                         f"({now - start:.0f} s)")
                last = now
        state = {k: v.detach().float() for k, v in model.state_dict().items() if k != "lm_head.weight"
                 or not model.config.tie_word_embeddings}
        summary = {"first_loss": losses[0], "final_loss": sum(losses[-10:]) / len(losses[-10:]),
                   "loss_every_20": losses[::20], "seconds": round(time.perf_counter() - start, 1),
                   "torch": torch.__version__}
        return state, summary
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)


def train_in_place(spec: Any, folder: Path, seed: int, provenance: Path, progress: Callable[[str], None] | None,
                   recipe: Recipe | None = None) -> None:
    """Replace ``folder``'s init weights (written by ``populate``) with trained ones, bf16 in the same
    layout, and record the recipe and the losses in its provenance file."""
    from harness.carbon.safetensors_bf16 import write_bf16

    recipe = recipe or Recipe()
    if progress:
        progress(f"training {spec.name} (seed {seed}, {recipe.steps} steps of {recipe.batch} x {recipe.tokens} tokens "
                 f"on {recipe.threads} threads)")
    state, summary = train(folder, recipe, seed, progress)
    tensors = {name: state[name].numpy() for name in spec.tensor_shapes()}
    weights = folder / "model.safetensors"
    write_bf16(weights, tensors, {"format": "pt", "carbon_harness_seed": str(seed),
                                  "carbon_harness_model": spec.name, "carbon_harness_trained": "1"})
    record = json.loads(provenance.read_text())
    record["trained"] = {"recipe": recipe.key(), **summary}
    provenance.write_text(json.dumps(record, indent=2, default=str) + "\n")
