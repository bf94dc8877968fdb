"""Fixtures of the serving tests: the session's server comes from the plugin (``carbon_endpoint``)."""

from __future__ import annotations

import pytest

from harness.backends.hf import HFEngine
from harness.spec import RunShape


@pytest.fixture(scope="session")
def served_checkpoint(carbon_session, carbon_endpoint):
    """The checkpoint the server serves: the session's first model (what --carbon-serve started)."""
    return carbon_session.checkpoint(carbon_session.config.models[0])


@pytest.fixture(scope="session")
def served_hf_engine(served_checkpoint):
    """transformers on the served checkpoint, fp32 on the CPU, one engine per shape."""
    engines: dict[RunShape, HFEngine] = {}

    def get(shape: RunShape) -> HFEngine:
        if shape not in engines:
            engines[shape] = HFEngine(served_checkpoint, shape, "served", device="cpu", dtype="fp32")
        return engines[shape]

    yield get
    for engine in engines.values():
        engine.close()
