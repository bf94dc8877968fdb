"""One teacher-forced position as every stack can report it, in plain Python: the release check's output
contract is written and judged in it (``harness.analysis``) without torch, which only the backends that
compute it need (``harness.backends.base`` re-exports it). Kept torch-free so that the CLI's arithmetic
commands (``plan``, ``cost``) start without importing torch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class ScoredToken:
    """One teacher-forced position: the log-probability of the token that stands there, and the
    ``k`` most likely tokens with theirs (descending), all given the tokens before it. This is what
    every stack can return alike (a server's prompt or completion logprobs, NxDI's or transformers'
    logits), so the release check's output contract is written in it (``harness.analysis.contract``).

    ``extra``: the log-probabilities of other named ids (ascending id), which the contract's reference
    and yardstick carry for the ids a side reported; ``probes``: the log-probabilities at the contract's
    fixed probe ids (``harness.analysis.contract.probe_ids``), in their order, where the side can give
    any id's (a server gives only its top-N: none)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]
    extra: tuple[tuple[int, float], ...] = ()
    probes: tuple[float, ...] = ()

    @property
    def margin(self) -> float:
        """top-1 minus top-2 log-probability: how close the greedy choice was to a tie."""
        return self.top[0][1] - self.top[1][1] if len(self.top) > 1 else math.inf

    @cached_property
    def _values(self) -> dict[int, float]:
        return {**dict(self.extra), **dict(self.top), self.token: self.logprob}

    def value(self, token: int) -> float | None:
        """This position's log-probability of ``token`` where the row holds it (None: not reported)."""
        return self._values.get(token)

    def to_list(self) -> list:
        out = [self.token, self.logprob, [list(t) for t in self.top]]
        if self.extra or self.probes:
            out += [[list(t) for t in self.extra], list(self.probes)]
        return out

    @classmethod
    def from_list(cls, row: Sequence) -> "ScoredToken":
        if not 3 <= len(row) <= 5:
            raise ValueError(f"a scored row is [token, logprob, top(, extra, probes)], got {len(row)} fields")
        token, logprob, top, *rest = row
        extra = tuple((int(i), float(v)) for i, v in rest[0]) if rest else ()
        probes = tuple(float(v) for v in rest[1]) if len(rest) > 1 else ()
        return cls(int(token), float(logprob), tuple((int(i), float(v)) for i, v in top), extra, probes)
