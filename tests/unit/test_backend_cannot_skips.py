"""The perf tests skip only on the backends' own "cannot do this here" signal: a plain
NotImplementedError (a bug) from the engine call must fail the test, not hide as a skip."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.core.errors import BackendCannot
from tests.perf.test_scoring import measure
from tests.unit.plugin.device_double import AsyncEngineDouble, Step

IDLE = Step(kernels=0, host_ms=0.0, device_ms=0.0)


def engine():
    """The engine's only part in ``measure`` is being waited on: the device double (no kernels)."""
    return AsyncEngineDouble(IDLE, IDLE)


SESSION = SimpleNamespace(config=SimpleNamespace(runs=1, warmup=0, backend="hf"))


def raising(exc: BaseException):
    def run():
        raise exc
    return run


def test_a_plain_not_implemented_error_fails_instead_of_skipping(benchmark):
    try:
        with pytest.raises(NotImplementedError, match="a bug"):
            measure(benchmark, SESSION, engine(), raising(NotImplementedError("a bug")))
    except pytest.skip.Exception as exc:
        pytest.fail(f"a plain NotImplementedError was turned into a skip: {exc}")


def test_the_backends_cannot_signal_skips(benchmark):
    with pytest.raises(pytest.skip.Exception, match="no full-vocabulary logits"):
        measure(benchmark, SESSION, engine(), raising(BackendCannot("no full-vocabulary logits")))
