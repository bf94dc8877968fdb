"""The release check's rule on simulated checks: the same ``harness.core.sequential.decide`` the verdict
runs, fed with drawn rounds, stopped as ``harness.release.rounds`` stops a check, and counted as the
verdict counts it: PASS (every gated figure passed), FAIL (a figure failed) or INCONCLUSIVE (no figure
failed and one was still open at the cap).

A check is a family of gated figures (``Family``: each with its tolerance and absolute floor) over one or
more legs (one check per model, merged into one verdict: FAIL if a leg failed, else INCONCLUSIVE if a leg
was, each leg at ``alpha / legs``). Its rounds come from a noise model (``Noise``):

- ``MultiNormal``: each process's log value of every figure normal around its measured median, with the
  measured covariance between figures (half a pair's: a pair is two processes);
- ``Rounds``: whole measured A/A pairs drawn with replacement, in either order: the measured correlation
  and tails, not a normal's;
- ``normal(sigma)``: independent figures at one sigma (the rule's own unit tests).

A planted change multiplies the candidate's values of the chosen figures by ``1 + shift``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import median
import numpy as np

from harness.core.sequential import FAIL, PASS, Design, Series, decide, settled

OUTCOMES = ("PASS", "FAIL", "INCONCLUSIVE")


@dataclass(frozen=True)
class FigureSpec:
    """A gated figure as the check pairs it (``harness.analysis.pairing``): lower is better."""

    key: str
    tolerance: float = 0.05
    floor: float | None = None


@dataclass(frozen=True)
class Family:
    """The gated figures of one leg, and the legs merged into one verdict."""

    name: str
    figures: tuple[FigureSpec, ...]
    legs: int = 1

    def __post_init__(self) -> None:
        if not self.figures or self.legs < 1:
            raise ValueError(f"family {self.name!r}: needs at least one figure and one leg")

    @property
    def size(self) -> int:
        return len(self.figures) * self.legs

    @classmethod
    def uniform(cls, figures: int, tolerance: float = 0.05) -> Family:
        return cls(f"{figures} figures", tuple(FigureSpec(f"f{i}", tolerance) for i in range(figures)))


class Noise:
    """Rounds of a baseline and a candidate: ``draw(rng, pairs, figures)`` gives two ``(pairs, figures)``
    arrays of positive values, round ``k`` of each side in row ``k``."""

    def draw(self, rng: np.random.Generator, pairs: int, figures: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


@dataclass(frozen=True)
class MultiNormal(Noise):
    """Log values normal around ``medians`` with ``covariance`` of a pair's log ratio split over its two
    processes; a family larger than the measured figures repeats them in independent blocks (other
    shapes, other models: never less independent than that)."""

    medians: tuple[float, ...]
    covariance: tuple[tuple[float, ...], ...]

    def draw(self, rng: np.random.Generator, pairs: int, figures: int) -> tuple[np.ndarray, np.ndarray]:
        m = len(self.medians)
        blocks = -(-figures // m)
        half = np.asarray(self.covariance, dtype=float) / 2.0
        logs = rng.multivariate_normal(np.zeros(m), half, size=(2, pairs, blocks), method="cholesky")
        logs = logs.reshape(2, pairs, blocks * m)[:, :, :figures]
        scale = np.tile(np.asarray(self.medians, dtype=float), blocks)[:figures]
        return scale * np.exp(logs[0]), scale * np.exp(logs[1])

    @property
    def sigmas(self) -> tuple[float, ...]:
        return tuple(math.sqrt(self.covariance[i][i]) for i in range(len(self.medians)))

    def scaled(self, factors: Sequence[float]) -> MultiNormal:
        """The same correlations with each figure's sigma multiplied by ``factors[i]``."""
        f = np.asarray(factors, dtype=float)
        cov = np.asarray(self.covariance, dtype=float) * np.outer(f, f)
        return replace(self, covariance=tuple(map(tuple, cov.tolist())))


@dataclass(frozen=True)
class Rounds(Noise):
    """Whole measured pairs (``a[k]``, ``b[k]``: every figure of triple ``k``'s two A rounds), each in either
    order, a check's pairs drawn without replacement (a random order of the measured pairs: a pair drawn
    twice would shrink the spread a check sees and make its interval overconfident) where the stream has
    enough, else with replacement; a larger family draws each block independently."""

    a: tuple[tuple[float, ...], ...]
    b: tuple[tuple[float, ...], ...]

    def draw(self, rng: np.random.Generator, pairs: int, figures: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.asarray(self.a, dtype=float), np.asarray(self.b, dtype=float)
        m = a.shape[1]
        blocks = -(-figures // m)
        if a.shape[0] >= pairs:
            pick = np.stack([rng.permutation(a.shape[0])[:pairs] for _ in range(blocks)], axis=1)
        else:
            pick = rng.integers(0, a.shape[0], size=(pairs, blocks))
        swap = rng.random((pairs, blocks, 1)) < 0.5
        first, second = a[pick], b[pick]  # (pairs, blocks, m)
        base, new = np.where(swap, second, first), np.where(swap, first, second)
        return base.reshape(pairs, blocks * m)[:, :figures], new.reshape(pairs, blocks * m)[:, :figures]


@dataclass(frozen=True)
class _Independent(Noise):
    sigma: float

    def draw(self, rng: np.random.Generator, pairs: int, figures: int) -> tuple[np.ndarray, np.ndarray]:
        logs = rng.normal(0.0, self.sigma / math.sqrt(2.0), size=(2, pairs, figures))
        return np.exp(logs[0]), np.exp(logs[1])


def normal(sigma: float) -> Noise:
    """Independent figures, each pair's log ratio normal at ``sigma`` (values around 1, no floor)."""
    return _Independent(sigma)


def leg_check(figures: Sequence[FigureSpec], design: Design, base: np.ndarray, new: np.ndarray) -> tuple[str, int]:
    """One leg as a release check runs it: at each look, the rule on the pairs so far (each figure's
    median change from those pairs, for its floor); stop at the first FAIL, or once no figure is open.
    Rounds that end before the cap end the leg "open" at the last look they reach (a measured stream)."""
    ratios = np.log(new / base).T.tolist()
    base_cols, new_cols = base.T.tolist(), new.T.tolist()
    n = 0
    for n in (look for look in design.looks if look <= base.shape[0]):
        series = []
        for i, f in enumerate(figures):
            base_med = median(base_cols[i][:n]) if f.floor is not None else math.nan
            absolute = median(new_cols[i][:n]) - base_med if f.floor is not None else 0.0
            series.append(Series(f.key, tuple(zip(range(1, n + 1), ratios[i][:n])), f.tolerance, f.floor, base_med,
                                 absolute))
        decisions = decide(series, design, n, final=n >= design.max_pairs)
        if any(d.state == FAIL for d in decisions):
            return "FAIL", n
        if settled(decisions):
            return ("PASS" if all(d.state == PASS for d in decisions) else "INCONCLUSIVE"), n
    return "open", n


def merged(outcomes: Sequence[str]) -> str:
    """Legs' verdicts as one: FAIL if any failed, else INCONCLUSIVE if any was, else PASS."""
    return "FAIL" if "FAIL" in outcomes else "INCONCLUSIVE" if "INCONCLUSIVE" in outcomes else "PASS"


@dataclass
class Rates:
    """Simulated checks of one cell: the share of each verdict, and the pairs a leg took on average."""

    sims: int
    seed: int
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    pairs: list[int] = field(default_factory=list)

    def rate(self, outcome: str) -> float:
        return self.counts[outcome] / self.sims

    @property
    def mean_pairs(self) -> float:
        return float(np.mean(self.pairs))

    def to_dict(self) -> dict[str, float]:
        return {"pass": self.rate("PASS"), "fail": self.rate("FAIL"), "inconclusive": self.rate("INCONCLUSIVE"),
                "mean_pairs": self.mean_pairs, "sims": self.sims, "seed": self.seed}

    def __getitem__(self, key: str) -> float:
        return self.to_dict()[key]


def simulate(design: Design, noise: Noise, family: Family, shift: float | Sequence[float] = 0.0,
             on: str | None = None, sims: int = 2000, seed: int = 0) -> Rates:
    """``sims`` checks of ``family`` with the candidate ``shift`` slower on one figure of the first leg
    (``on``: its key; None: the family's first figure) or on every figure of every leg (``on="all"``);
    a sequence of shifts gives each figure of every leg its own."""
    if sims < 1:
        raise ValueError(f"sims={sims} must be at least 1")
    keys = [f.key for f in family.figures]
    if isinstance(shift, (int, float)):
        if on not in (None, "all", *keys):
            raise ValueError(f"on={on!r}: give 'all' or one of the family's figures: {', '.join(keys)}")
        hit = np.asarray([on in ("all", k) for k in keys]) if on is not None else np.arange(len(keys)) == 0
        factors, every_leg = np.where(hit, 1.0 + shift, 1.0), on == "all"
    else:
        if len(shift) != len(keys):
            raise ValueError(f"{len(shift)} shifts for the family's {len(keys)} figures")
        factors, every_leg = 1.0 + np.asarray(shift, dtype=float), True
    rng = np.random.Generator(np.random.PCG64(seed))
    leg_design = replace(design, legs=family.legs)
    m = len(family.figures)
    out = Rates(sims, seed)
    for _ in range(sims):
        verdicts = []
        for leg in range(family.legs):
            base, new = noise.draw(rng, design.max_pairs, m)
            if every_leg or leg == 0:
                new = new * factors
            verdict, n = leg_check(family.figures, leg_design, base, new)
            verdicts.append(verdict)
            out.pairs.append(n)
        out.counts[merged(verdicts)] += 1
    return out
