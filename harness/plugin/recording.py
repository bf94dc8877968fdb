"""Helpers the benchmark tests call to record what they measured: pytest-benchmark's timed rounds,
the results of the timed rounds only, each benchmark's context (model, shape, backend, batch...),
and whether a speed gate applies to this run (only when ``-m`` selects perf)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from typing import Any

import pytest

from harness.backends.base import Batch, Engine
from harness.core.spec import MODELS, ModelSpec


def marker_selected(markexpr: str, marker: str) -> bool:
    """Whether a ``-m`` expression selects ``marker`` explicitly: false with the marker false, true
    with it true (``perf``, ``perf and not slow``, ``compat or perf`` select perf; ``""`` and
    ``not unit`` don't)."""
    if not markexpr or not markexpr.strip():
        return False
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m parser (private, stable since 6)

        expr = Expression.compile(markexpr)
    except ImportError:
        return marker in markexpr.replace(f"not {marker}", "")
    names = {marker}
    for value in (True, False):  # the expression's names, both branches of every and / or
        expr.evaluate(lambda name, value=value, **kw: names.add(name) or value)
    others = sorted(names - {marker})
    if len(others) > 8:
        return bool(expr.evaluate(lambda name, **kw: name == marker)) and not expr.evaluate(lambda name, **kw: False)
    # selected: true with it alone and false with none (compat or perf), or true for some assignment of the
    # other markers with it and false for every one without it (release and extended)
    assignments = [dict(zip(others, bits)) for bits in itertools.product((False, True), repeat=len(others))]
    alone = bool(expr.evaluate(lambda name, **kw: name == marker)) and not expr.evaluate(lambda name, **kw: False)
    return alone or (any(expr.evaluate(lambda name, a=a, **kw: name == marker or a.get(name, False))
                         for a in assignments)
                     and not any(expr.evaluate(lambda name, a=a, **kw: name != marker and a.get(name, False))
                                 for a in assignments))


def speed_gates_apply(markexpr: str) -> bool:
    """Speed is gated only when ``-m`` selects perf: a plain ``pytest`` records it ungated."""
    return marker_selected(markexpr, "perf")


# A speed gate needs an interval, and harness.core.stats's between-round interval needs two rounds.
MIN_GATED_ROUNDS = 2
# Figures that are not speeds: they do not move with machine load, so they are gated in every run.
NOT_SPEED = frozenset({"valid_dna_fraction", "spec_acceptance_rate", "spec_tokens_per_step"})
NOT_PERF = "not gated: speed is gated when -m selects perf (pytest -m perf)"


def speed_gate_exemption(metric: str, rounds: int, markexpr: str) -> str | None:
    """Why ``carbon_gate`` records a figure without gating it, or None when its threshold applies.
    The one rule for every benchmark: a speed is gated only when ``-m`` selects perf (a plain
    ``pytest`` on a busy machine must not fail on one), and only when it was measured over at least
    ``MIN_GATED_ROUNDS`` rounds (one round has no spread: one busy moment decides it)."""
    if metric in NOT_SPEED:
        return None
    if not speed_gates_apply(markexpr):
        return NOT_PERF
    if rounds < MIN_GATED_ROUNDS:
        return (f"not gated: only {rounds} round{'s' * (rounds != 1)}: a speed gate needs at least "
                f"{MIN_GATED_ROUNDS}, enough to carry an interval")
    return None


def short_reason(exemption: str) -> str:
    """What ``extra_info["not_gated"]`` and the end-of-run tally say: ``not -m perf`` or ``only N rounds``."""
    return "not -m perf" if exemption == NOT_PERF else exemption.removeprefix("not gated: ").split(":", 1)[0]


def figure_rounds(benchmark: Any, rounds: int | None = None) -> int:
    """The rounds a benchmark's figures come from: ``rounds`` when the test says (a figure computed over
    rounds of its own), else ``extra_info["rounds"]``, else pytest-benchmark's timed rounds (none when
    benchmarks are disabled)."""
    if rounds is not None:
        return int(rounds)
    recorded = benchmark.extra_info.get("rounds")
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        return recorded
    if getattr(benchmark, "disabled", False) or getattr(benchmark, "stats", None) is None:
        return 0
    return len(benchmark.stats.stats.data)


def model_spec(label: str) -> ModelSpec | None:
    return MODELS.get(label)


def engine_context(engine: Engine, hardware: str, batch: Batch, new_tokens: int) -> dict[str, Any]:
    info = engine.info
    context = {"model": info.model, "shape": info.shape, "backend": info.backend, "hardware": hardware,
               "batch_size": batch.size, "prompt_tokens": batch.max_prompt_tokens, "new_tokens": new_tokens,
               "device": info.device, "dtype": info.dtype, "load_s": info.load_s}
    if info.compile_s is not None:
        context["compile_s"] = info.compile_s
    # the engine's whole configuration goes once into the run manifest's engines, not into every benchmark
    context.update({k: v for k, v in info.extra.items() if k != "engine_config"})
    return context


def round_ms(benchmark: Any) -> list[float]:
    """pytest-benchmark's timed rounds in ms; with --benchmark-disable nothing is timed, so the
    test stops after its correctness checks."""
    if benchmark.disabled:
        pytest.skip("benchmarks disabled (--benchmark-disable): correctness was checked, nothing was timed")
    return [t * 1000.0 for t in benchmark.stats.stats.data]


def timed_results(benchmark: Any, results: list, warmup: int, runs: int) -> list:
    """The results of the timed rounds of a pedantic run (all of them when benchmarks are disabled:
    then pytest-benchmark calls the target once, with no warm-up)."""
    return results if benchmark.disabled else results[warmup:warmup + runs]


WORK_STEPS = 3  # steps counted per benchmark: the counts are per step, and exact (the same in every process)


def record_work(benchmark: Any, step: Callable[[], Any], enabled: bool, setup: Callable[[], Any] | None = None,
                steps: int = WORK_STEPS) -> None:
    """After a benchmark's timed rounds, an untimed pass that counts ``step``'s exact work into its
    ``extra_info['work']`` (``harness.backends.work_counter``): never inside a timed call, since counting
    slows what it counts. ``enabled`` False (``--carbon-work-counts off``) records that it was off."""
    if not enabled:
        benchmark.extra_info["work"] = {"off": "--carbon-work-counts off"}
        return
    from harness.backends.work_counter import count_steps

    benchmark.extra_info["work"] = count_steps(step, steps, setup).to_dict()


def record_server_work(benchmark: Any, engine: Any, batch: Callable[[], Any], enabled: bool, requests: int) -> None:
    """A served side's work: its server's own counters (``harness.core.server_work``) around one untimed batch
    after the timed rounds, into ``extra_info['server_work']``; where the server exports none, why not (the
    verdict then says this side's work was not counted). The client's Python calls are never counted here:
    they would be the client's, not the engine's."""
    if not enabled:
        benchmark.extra_info["server_work"] = {"off": "--carbon-work-counts off"}
        return
    from harness.core.server_work import ServerWorkError, batch_work, counters
    from harness.serving.client import metrics_text

    model = getattr(engine.endpoint, "model", None)
    try:
        before = counters(metrics_text(engine.endpoint), model)
        engine.reset()
        batch()
        engine.reset()
        after = counters(metrics_text(engine.endpoint), model)
    except ServerWorkError as exc:
        benchmark.extra_info["server_work"] = {"not_counted": str(exc)}
        return
    benchmark.extra_info["server_work"] = batch_work(before, after, requests)
