"""Round-by-round progress of a benchmark, in pytest's conventions.

A benchmark of the batch suite runs minutes of rounds inside one test, and pytest shows one dot (or
one ``PASSED``) per test: a run that is working looks the same as one that hangs. So each
``benchmark.pedantic`` call reports its rounds as they end, with an estimate of the time left, at a
rate set by pytest's verbosity:

- ``-q`` and below: nothing (a quiet run stays quiet);
- the default: a line only while a benchmark has run long (``DEFAULT_EVERY_S`` between lines), so
  fast benchmarks keep pytest's dots and a slow one shows it is alive;
- ``-v``: a line per group of rounds, at most one a second (``VERBOSE_EVERY_S``);
- ``-vv``: a line per round.

The rounds are counted through pedantic's own ``teardown`` hook, which pytest-benchmark calls after
each round (warm-up rounds included) outside the timed region, so reporting never adds to a timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_EVERY_S = 15.0
VERBOSE_EVERY_S = 1.0


def interval_for(verbosity: int) -> float | None:
    """Seconds between two progress lines of one benchmark at this pytest verbosity; None: no lines."""
    if verbosity < 0:
        return None
    if verbosity == 0:
        return DEFAULT_EVERY_S
    return VERBOSE_EVERY_S if verbosity == 1 else 0.0


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes} min {s:02d} s"


@dataclass
class RoundProgress:
    """The rounds of one ``pedantic`` call: ``warmup`` untimed then ``rounds`` timed ones. ``clock``
    is injectable so the line and its throttle are pure functions of the times they are given."""

    name: str
    rounds: int
    warmup: int
    every_s: float
    clock: Callable[[], float] = time.monotonic
    done: int = 0
    started: float = field(default=0.0)
    last_line: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.last_line = self.clock()

    @property
    def total(self) -> int:
        return self.rounds + self.warmup

    def line(self, now: float) -> str:
        elapsed = now - self.started
        if self.done <= self.warmup:
            which = f"warm-up {self.done}/{self.warmup}"
        else:
            which = f"round {self.done - self.warmup}/{self.rounds}"
        per_round = elapsed / self.done
        left = self.total - self.done
        eta = f"eta {_duration(per_round * left)}" if left else "done"
        return (f"{self.name}: {which} ({_duration(per_round)} a round, {_duration(elapsed)} so far), {eta}")

    def round_ended(self) -> str | None:
        """Count one round; the line to show now, or None while the throttle holds it back (the
        last round is shown whenever any earlier one was, so a shown benchmark is seen to end)."""
        self.done += 1
        now = self.clock()
        shown_before = self.last_line != self.started
        due = now - self.last_line >= self.every_s or (self.done == self.total and shown_before)
        if not due:
            return None
        self.last_line = now
        return self.line(now)


def instrument(benchmark: Any, name: str, every_s: float | None, write: Callable[[str], None]) -> None:
    """Make ``benchmark.pedantic`` report its rounds through ``write`` (nothing when ``every_s`` is
    None, or when benchmarks are disabled: then nothing is timed)."""
    if every_s is None or getattr(benchmark, "disabled", True) or not callable(getattr(benchmark, "pedantic", None)):
        return
    original = benchmark.pedantic

    def pedantic(target, args=(), kwargs=None, setup=None, teardown=None, rounds=1, warmup_rounds=0, iterations=1):
        progress = RoundProgress(name, rounds if isinstance(rounds, int) else 0,
                                 warmup_rounds if isinstance(warmup_rounds, int) else 0, every_s)

        def counted_teardown(*a: Any, **kw: Any) -> None:
            if teardown is not None:
                teardown(*a, **kw)
            if progress.done < progress.total:  # pytest-benchmark's extra untimed calls are not rounds
                line = progress.round_ended()
                if line is not None:
                    write(line)

        return original(target, args=args, kwargs=kwargs, setup=setup, teardown=counted_teardown, rounds=rounds,
                        warmup_rounds=warmup_rounds, iterations=iterations)

    benchmark.pedantic = pedantic
