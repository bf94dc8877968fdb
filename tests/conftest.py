"""Fixtures shared by the test suites (the plugin's own fixtures live in harness/fixtures.py)."""

from __future__ import annotations

import pytest

from harness.backends.hf import HFEngine
from harness.spec import RunShape


@pytest.fixture(scope="session")
def tiny_hf_engine(carbon_tiny_checkpoint):
    """CPU transformers engines on the embedded default, one per (shape, dtype), built on first use
    and closed at the end of the session."""
    engines: dict[tuple[RunShape, str], HFEngine] = {}

    def get(shape: RunShape, dtype: str = "fp32") -> HFEngine:
        if (shape, dtype) not in engines:
            engines[shape, dtype] = HFEngine(carbon_tiny_checkpoint, shape, "carbon-tiny", device="cpu", dtype=dtype)
        return engines[shape, dtype]

    yield get
    for engine in engines.values():
        engine.close()
