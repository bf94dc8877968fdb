"""A seeded DNA source with structure a small model can learn in minutes, for the trained checkpoint
(``harness.carbon.training``): a background order-3 Markov chain with CpG depletion, CpG islands (a
GC-rich chain with CG enriched, entered and left as a two-state chain), tandem repeats (a short motif
copied 3-8 times) and interspersed repeats (a 30-120 bp segment copied from earlier, 1% mutated).

Everything is drawn from numpy's PCG64 under one seed, so a seed gives the same bases on any machine.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

BASES = "ACGT"
ORDER = 3


def _tables(rng: np.random.Generator, concentration: float, gc: float, cg_factor: float) -> np.ndarray:
    """Transition probabilities ``[4**ORDER, 4]`` (context in base-4, last base least significant): a
    Dirichlet draw per context around a base composition with ``gc`` G+C, C->G scaled by ``cg_factor``."""
    prior = np.array([(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2])
    table = np.empty((4 ** ORDER, 4))
    for ctx in range(4 ** ORDER):
        p = rng.dirichlet(prior * 4 * concentration)
        if ctx % 4 == 1:  # the context ends in C: CpG
            p[2] *= cg_factor
        table[ctx] = p / p.sum()
    return table


@dataclass(frozen=True)
class MarkovSource:
    """The source's parameters; ``sample`` draws a sequence."""

    seed: int = 0
    concentration: float = 0.2  # lower: more peaked transitions (0.2: ~0.58 nats a base, ~3.5 a 6-mer)
    island_enter: float = 1 / 1500  # per base
    island_leave: float = 1 / 400
    tandem_rate: float = 1 / 250  # per base: start a tandem repeat
    copy_rate: float = 1 / 400  # per base: copy an earlier segment
    mutation: float = 0.01

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.Generator(np.random.PCG64([self.seed, 1]))
        return (_tables(rng, self.concentration, 0.41, 0.25),  # background: AT-leaning, CpG depleted
                _tables(rng, self.concentration, 0.65, 1.6))  # island: GC-rich, CpG enriched

    def sample(self, n: int, rng: np.random.Generator) -> str:
        """``n`` bases."""
        cumulative = [np.cumsum(t, axis=1).tolist() for t in self.tables()]  # background, island
        out: list[int] = [int(b) for b in rng.integers(0, 4, ORDER)]
        in_island = False
        while len(out) < n:
            u = rng.random()
            if u < self.tandem_rate:
                motif = [int(b) for b in rng.integers(0, 4, int(rng.integers(2, 13)))]
                out += motif * int(rng.integers(3, 9))
                continue
            if u < self.tandem_rate + self.copy_rate and len(out) > 150:
                length = int(rng.integers(30, 121))
                start = int(rng.integers(0, len(out) - length))
                segment = out[start:start + length]
                flips = rng.random(length) < self.mutation
                out += [int(rng.integers(0, 4)) if f else b for b, f in zip(segment, flips)]
                continue
            in_island = (rng.random() > self.island_leave) if in_island else (rng.random() < self.island_enter)
            row = cumulative[in_island][out[-3] * 16 + out[-2] * 4 + out[-1]]
            out.append(min(bisect.bisect_right(row, rng.random() * row[-1]), 3))
        return "".join(BASES[b] for b in out[:n])
