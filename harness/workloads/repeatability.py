"""Is greedy generation repeatable? Bitwise on a CPU in fp32; up to a measured near-tie on a GPU in bf16.

A bf16 run on a GPU is not bitwise repeatable from one round to the next (kernel choices and
reduction orders vary), and a synthetic model's flat logits make near-ties common: two rounds may
pick different tokens where the top two are within rounding of each other, and everything after
differs. That is not a bug of the engine; a divergence where one token clearly beats the other is.

The rule (the output contract's as of this writing: ``harness.analysis.contract`` allows a greedy
divergence between two stacks only where the top-2 margin is within ``2 x max_abs`` of the dtype): where
two rounds first differ in a row, the engine scores both tokens teacher-forced on their shared prefix (in
its own dtype, on its own device) and the divergence is allowed only when their log-probabilities are
within ``tie`` nats of each other. After the first divergence a row may differ freely (its prefix did).
The bounds are data, ``fixtures/repeatability/bounds.json`` (``near_tie``), with their provenance; the
contract is being rebuilt from measured bf16 noise, and its calibrated tie should replace them.

Why not torch's deterministic algorithms: ``torch.use_deterministic_algorithms`` is process-wide, needs
``CUBLAS_WORKSPACE_CONFIG`` set before CUDA starts, turns off inductor's autotuning and swaps kernels
for slower deterministic ones: the perf suite would time kernels no user runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.backends.base import Batch, Engine
from harness.core.paths import FIXTURES_DIR

BOUNDS_FILE = FIXTURES_DIR / "repeatability" / "bounds.json"


def max_abs(dtype: str, path: Path = BOUNDS_FILE) -> float | None:
    """How far a teacher-forced log-probability may move between two runs in ``dtype``, in nats (None:
    the dtype is not listed). A malformed entry is refused naming the file and the dtype."""
    try:
        entry = json.loads(Path(path).read_text()).get(dtype)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the repeatability bounds ({exc})") from None
    if entry is None:
        return None
    value = entry.get("max_abs") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{path}: {dtype!r} must be {{\"max_abs\": <positive nats>}}, got {entry!r}")
    return float(value)


def near_tie(dtype: str, path: Path = BOUNDS_FILE) -> float:
    """The near-tie bound of a dtype, ``2 x max_abs`` nats; 0 (no divergence allowed) where it is not listed."""
    bound = max_abs(dtype, path)
    return 2 * bound if bound is not None else 0.0


@dataclass(frozen=True)
class Divergence:
    """Where round ``round`` first differs from round 0 in one row."""

    round: int
    row: int
    position: int  # index among the generated tokens
    tokens: tuple[int, int]  # round 0's token there, this round's

    def describe(self, margin: float | None = None) -> str:
        text = (f"round {self.round} row {self.row} generated token {self.position}: {self.tokens[1]} where round 0 "
                f"has {self.tokens[0]}")
        return text + (f" (log-probabilities {margin:.3g} nats apart)" if margin is not None else "")


def divergences(rounds: Sequence[torch.Tensor]) -> list[Divergence]:
    """The first differing position of each row of each round against round 0 (tokens ``[B, new]``)."""
    if not rounds:
        return []
    first = rounds[0]
    out = []
    for r, tokens in enumerate(rounds[1:], start=1):
        if tokens.shape != first.shape:
            raise ValueError(f"round {r} generated {tuple(tokens.shape)} tokens, round 0 {tuple(first.shape)}")
        for row in range(first.shape[0]):
            differ = torch.nonzero(tokens[row] != first[row]).flatten()
            if differ.numel():
                k = int(differ[0])
                out.append(Divergence(r, row, k, (int(first[row, k]), int(tokens[row, k]))))
    return out


def divergence_margin(engine: Engine, batch: Batch, rounds: Sequence[torch.Tensor], d: Divergence) -> float:
    """How far apart the two diverging tokens are, in nats: each scored teacher-forced after the row's
    prompt and the prefix both rounds generated (``Engine.scored``: the engine's own dtype and device)."""
    prompt = batch.input_ids[d.row, : int(batch.prompt_lengths[d.row])].tolist()
    prefix = rounds[0][d.row, : d.position].tolist()
    a = engine.scored(prompt, [*prefix, d.tokens[0]], top_k=1)[-1].logprob
    b = engine.scored(prompt, [*prefix, d.tokens[1]], top_k=1)[-1].logprob
    return abs(a - b)


def repeatability_problems(engine: Engine, batch: Batch, rounds: Sequence[torch.Tensor], tie: float) -> list[str]:
    """Every divergence between the rounds' greedy tokens that is not a near-tie (``tie`` nats; 0: none
    allowed), described; empty when the rounds are repeatable under the rule."""
    if tie < 0:
        raise ValueError(f"near-tie bound {tie!r} must be >= 0 nats")
    found = divergences(rounds)
    if not found:
        return []
    if tie == 0:
        return [d.describe() + " (no near-tie allowed at this dtype)" for d in found]
    problems = []
    for d in found:
        margin = divergence_margin(engine, batch, rounds, d)
        if margin > tie:
            problems.append(d.describe(margin) + f": beyond a near-tie of {tie:g} nats")
    return problems
