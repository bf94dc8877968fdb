"""test_tkg's rounds: single decode steps on a warm cache, each at a position a generation of the shape
really takes, with every position the timed rounds take already taken once, untimed.

Why the untimed pass: an engine whose step costs more the first time it meets a KV length pays that
cost in whichever round meets the length first. On an H100 (2026-11-27, transformers 5.17, torch
2.11+cu130) an eager decode step of carbon-tiny took about 38 ms the first time it met a length and
2 ms after: pytest-benchmark's one warm-up round covers one position, so every timed round met a new
length and TKG read 40 ms against a 2.75 ms step inside e2e (whose warm-up round is a whole generation,
every length). A compiled engine (fixed shapes: Neuron, ``--carbon-hf-compile``) meets no new length,
and the pass costs it ``warmup + rounds`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.backends.base import Batch, Engine


@dataclass
class DecodeRounds:
    """The setup of test_tkg's rounds (``ready``) and the pass that warms their positions (``warm``).

    ``positions`` holds the decode position (1 = the first step after the prefill) each ``ready`` has
    prepared since the last ``warm``: after the timed rounds it equals what ``warm`` returned."""

    engine: Engine
    batch: Batch
    steps_per_generation: int  # decode steps a generation of the shape makes (max_new_tokens - 1)
    taken: int = field(init=False)
    positions: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.steps_per_generation < 1:
            raise ValueError(f"steps_per_generation={self.steps_per_generation} must be at least 1: "
                             "a shape with max_new_tokens=1 makes no decode step to time")
        self.taken = self.steps_per_generation  # the first round prefills

    def ready(self) -> None:
        """Before a round: re-prefill (untimed) once a generation of the shape would have ended."""
        if self.taken >= self.steps_per_generation:
            self.engine.prefill(self.batch)
            self.taken = 0
        self.taken += 1
        self.positions.append(self.taken)

    def warm(self, calls: int) -> list[int]:
        """Take, untimed and waited on, the positions of the next ``calls`` rounds; the rounds after
        it start over from a prefill and take the same positions. Returns those positions."""
        if calls < 1:
            raise ValueError(f"calls={calls} must be at least 1 (the warm-up and timed rounds to come)")
        for _ in range(calls):
            self.ready()
            self.engine.decode_step()
        self.engine.synchronize()
        warmed, self.positions = self.positions, []
        self.taken = self.steps_per_generation
        return warmed
