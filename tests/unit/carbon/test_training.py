"""The trained checkpoint's ingredients (``harness.carbon.markov``, ``harness.carbon.training``): a DNA
source with the structure it promises, the same under a seed on every draw, and a recipe that is part of
the checkpoint's cache key (the training itself runs where the checkpoint is first built)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.carbon.checkpoint import spec_digest
from harness.carbon.markov import MarkovSource
from harness.carbon.training import DNA_END_ID, DNA_START_ID, Recipe, lr_at, token_batches
from harness.core.spec import get_model

pytestmark = pytest.mark.unit


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_seed_gives_the_same_bases_and_other_seeds_others(seed):
    a = MarkovSource(seed=3).sample(3000, np.random.default_rng(seed))
    b = MarkovSource(seed=3).sample(3000, np.random.default_rng(seed))
    assert a == b and len(a) == 3000 and set(a) <= set("ACGT")
    assert a != MarkovSource(seed=4).sample(3000, np.random.default_rng(seed))


def test_the_source_has_the_structure_a_model_can_learn():
    dna = MarkovSource().sample(200_000, np.random.default_rng(0))
    freq = {b: dna.count(b) / len(dna) for b in "ACGT"}
    cg_expected = freq["C"] * freq["G"]
    assert dna.count("CG") / len(dna) < 0.9 * cg_expected  # CpG depleted overall, islands included
    background, island = MarkovSource().tables()
    after_c = [ctx for ctx in range(64) if ctx % 4 == 1]  # contexts ending in C (A C G T = 0 1 2 3)
    assert island[after_c, 2].mean() > 2 * background[after_c, 2].mean()  # CpG enriched in the islands
    tandem = sum(dna[i:i + 6] * 3 == dna[i:i + 18] for i in range(0, len(dna) - 18, 6))
    assert tandem > 100  # tandem repeats
    # a Markov source is predictable: the empirical entropy of a base given three before it is well under 2 bits
    counts = {}
    for i in range(3, len(dna)):
        counts.setdefault(dna[i - 3:i], {}).setdefault(dna[i], 0)
        counts[dna[i - 3:i]][dna[i]] += 1
    h = 0.0
    for ctx in counts.values():
        n = sum(ctx.values())
        h += sum(-c * np.log(c / n) for c in ctx.values())
    assert h / (len(dna) - 3) < 0.8 * np.log(4)


def test_every_training_row_is_dna_tokens_after_its_tag():
    rows = token_batches(dataclasses.replace(Recipe(), steps=2, batch=3), seed=0)
    assert rows.shape == (2, 3, Recipe().tokens)
    assert (rows[..., 0] == DNA_START_ID).all()
    kmers = rows[..., 1:]
    assert ((kmers >= DNA_START_ID + 3) & (kmers < DNA_END_ID)).all()
    assert (token_batches(dataclasses.replace(Recipe(), steps=2, batch=3), seed=0) == rows).all()


def test_the_learning_rate_warms_up_then_decays_to_a_tenth():
    r = Recipe()
    assert lr_at(r, 0) == pytest.approx(r.lr / r.warmup) and lr_at(r, r.warmup - 1) == pytest.approx(r.lr)
    assert lr_at(r, r.steps) == pytest.approx(0.1 * r.lr)
    assert all(lr_at(r, k + 1) <= lr_at(r, k) for k in range(r.warmup, r.steps))


def test_the_recipe_is_in_the_trained_checkpoints_cache_key():
    trained = get_model("carbon-tiny-trained")
    assert trained.trained and spec_digest(trained, 0) != spec_digest(dataclasses.replace(trained, trained=False), 0)
    assert dataclasses.replace(get_model("carbon-tiny"), name=trained.name, hf_name=trained.hf_name,
                               trained=True) == trained  # carbon-tiny's architecture, trained
