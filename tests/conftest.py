"""Fixtures shared by the test suites (the plugin's own fixtures live in harness/plugin/fixtures.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from harness.backends.hf import HFEngine
from harness.carbon.variants import FIXTURE_DIR, read_fasta, read_variants
from harness.core.spec import RunShape

# Hypothesis profiles: "ci" is derandomized and bounded so CI is reproducible and fast; "dev" explores more (random
# draws). Pick with HYPOTHESIS_PROFILE (default: ci when CI is set, else dev). Neither has a deadline: a property's
# draw timed on a loaded runner is no property (a targeted run once failed a 200 ms default at load 14).
settings.register_profile("ci", derandomize=True, max_examples=150, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def tiny_hf_engine(carbon_tiny_checkpoint, carbon_engine_pool):
    """CPU transformers engines on the embedded default, one per (shape, dtype), built on first use."""

    def get(shape: RunShape, dtype: str = "fp32") -> HFEngine:
        return carbon_engine_pool.get(("tiny-hf", shape, dtype), lambda: HFEngine(
            carbon_tiny_checkpoint, shape, "carbon-tiny", device="cpu", dtype=dtype))

    return get


@pytest.fixture(scope="session")
def scoring_window():
    """The scoring window shipped in fixtures/scoring/window.fa (the VEP, sweep and scan input)."""
    return read_fasta(FIXTURE_DIR / "window.fa")


@pytest.fixture(scope="session")
def scoring_variants():
    """The variants shipped in fixtures/scoring/variants.tsv, for the scoring window."""
    return read_variants(FIXTURE_DIR / "variants.tsv")


@pytest.fixture(scope="session")
def nxdi_source(carbon_session) -> Path:
    """The NxDI source tree this run was given, read where the plugin reads it (--carbon-nxdi-source=DIR,
    whose default is $CARBON_NXDI_SOURCE), so a test reads the same NxDI as the NxDI CPU tier. Skips
    when none was given; fails when the one given holds no NxDI sources, since the user asked for it."""
    source = carbon_session.config.nxdi_source
    if source is None:
        pytest.skip("needs NxDI 0.9 sources: pass --carbon-nxdi-source=DIR (or set CARBON_NXDI_SOURCE), a dir with "
                    "neuronx-distributed-inference/src and neuronx-distributed/src (carbon-harness nxdi-source 2.29.0 "
                    "fetches one)")
    if not (source / "neuronx-distributed-inference" / "src").is_dir():
        pytest.fail(f"--carbon-nxdi-source {source} has no neuronx-distributed-inference/src (give a dir laid out "
                    f"as carbon-harness nxdi-source writes it: neuronx-distributed-inference/src and neuronx-distributed/src)",
                    pytrace=False)
    return source
