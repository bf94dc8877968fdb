"""The perf tests skip only on the backends' own "cannot do this here" signal: a plain
NotImplementedError (a bug) from the engine call must fail the test, not hide as a skip."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.core.errors import BackendCannot
from tests.perf.test_scoring import measure


class OneRoundBenchmark:
    """pytest-benchmark's ``pedantic`` reduced to what ``measure`` calls: run the function once."""

    def pedantic(self, fn, rounds: int, warmup_rounds: int) -> None:
        fn()


SESSION = SimpleNamespace(config=SimpleNamespace(runs=1, warmup=0, backend="hf"))


def raising(exc: BaseException):
    def run():
        raise exc
    return run


def test_a_plain_not_implemented_error_fails_instead_of_skipping():
    try:
        with pytest.raises(NotImplementedError, match="a bug"):
            measure(OneRoundBenchmark(), SESSION, raising(NotImplementedError("a bug")))
    except pytest.skip.Exception as exc:
        pytest.fail(f"a plain NotImplementedError was turned into a skip: {exc}")


def test_the_backends_cannot_signal_skips():
    with pytest.raises(pytest.skip.Exception, match="no full-vocabulary logits"):
        measure(OneRoundBenchmark(), SESSION, raising(BackendCannot("no full-vocabulary logits")))
