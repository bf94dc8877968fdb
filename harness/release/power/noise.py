"""The noise of a pair, from a stream's record (``harness.release.power.streams``): per gated figure the
sigma of a pair's log ratio with a bootstrap interval, the correlation between the figures' log ratios
with theirs, the planted arm's change, and the load the stream ran under; and the noise models
(``harness.release.power.simulation``) built from them.

The bootstrap resamples whole triples (every figure of a round together), so the intervals on the
correlations are those of the rounds as measured. What a figure's interval says is how far its sigma
could be from the measured one on this many triples; the table also runs the rule at the upper end.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.storage import load_json
from harness.release.power.simulation import Family, FigureSpec, MultiNormal, Rounds

RESAMPLES = 4000


@dataclass(frozen=True)
class Stream:
    """One stream's figures (gated, and a served side's reported serving figures), and per complete triple
    each arm's values, ``(triples, figures)``."""

    name: str
    record: dict[str, Any]
    specs: tuple[FigureSpec, ...]
    metrics: tuple[str, ...]
    gated: tuple[bool, ...]
    a: np.ndarray
    a2: np.ndarray
    b: np.ndarray

    @property
    def triples(self) -> int:
        return int(self.a.shape[0])

    @property
    def aa(self) -> np.ndarray:
        """A/A log ratios, ``(triples, figures)``."""
        return np.log(self.a2 / self.a)

    @property
    def planted(self) -> np.ndarray:
        return np.log(self.b / self.a)

    @property
    def label(self) -> str:
        """The record's name less ``stream-``: ``cpu-quiet``, ``served-loaded``."""
        return self.name.removeprefix("stream-")


def read_stream(path: Path) -> Stream:
    """A stream's figures (in the record's order) over the triples where every arm has all of them (a
    positive value: a ratio needs one)."""
    record = load_json(path, ValueError, "power stream record")
    if record.get("schema") != 2 or not isinstance(record.get("figures"), dict):
        raise ValueError(f"{path}: not a power stream record of schema 2 (python -m harness.release.power stream)")
    figs = record["figures"]
    rows = [t for t in record["triples"] if all(v is not None and v > 0 for arm in ("A", "A2", "B") for v in t[arm])]
    if len(rows) < 4:
        raise ValueError(f"{path}: {len(rows)} complete triples; the noise of a pair needs at least 4")
    arrays = [np.asarray([t[arm] for t in rows], dtype=float) for arm in ("A", "A2", "B")]
    return Stream(path.stem, record, tuple(FigureSpec(k, f["tolerance"], f["floor"]) for k, f in figs.items()),
                  tuple(f["metric"] for f in figs.values()), tuple(bool(f["gated"]) for f in figs.values()), *arrays)


def bootstrap(rows: np.ndarray, statistic: Any, seed: int = 0, resamples: int = RESAMPLES) -> np.ndarray:
    """``statistic`` of ``resamples`` resamples of the rows (whole triples), stacked."""
    rng = np.random.Generator(np.random.PCG64(seed))
    picks = rng.integers(0, rows.shape[0], size=(resamples, rows.shape[0]))
    return np.stack([statistic(rows[p]) for p in picks])


def correlation(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(x, rowvar=False)
    return np.nan_to_num(np.atleast_2d(c), nan=0.0)


def lag1(x: Sequence[float]) -> float:
    a = np.asarray(x, dtype=float) - float(np.mean(x))
    return float(np.sum(a[1:] * a[:-1]) / np.sum(a * a)) if np.sum(a * a) > 0 else 0.0


def measure(stream: Stream) -> dict[str, Any]:
    """The noise of one stream: per figure sigma (95% bootstrap), median, planted change, lag-1 and tails;
    the correlation matrix of the A/A log ratios (95% bootstrap per entry); the load it ran under."""
    aa = stream.aa
    sig = np.std(aa, axis=0, ddof=1)
    boots = bootstrap(aa, lambda r: np.std(r, axis=0, ddof=1))
    lo, hi = np.quantile(boots, [0.025, 0.975], axis=0)
    corr = correlation(aa)
    cboots = bootstrap(aa, correlation, seed=1)
    clo, chi = np.quantile(cboots, [0.025, 0.975], axis=0)
    medians = np.median(np.concatenate([stream.a, stream.a2]), axis=0)
    z = (aa - aa.mean(axis=0)) / np.where(sig > 0, sig, 1.0)
    planted = stream.planted.mean(axis=0)
    figures = []
    for i, spec in enumerate(stream.specs):
        figures.append({"key": spec.key, "metric": stream.metrics[i], "gated": stream.gated[i], "tolerance": spec.tolerance,
                        "floor": spec.floor, "median": float(medians[i]), "sigma": float(sig[i]),
                        "sigma_95": [float(lo[i]), float(hi[i])], "mean_aa": float(aa[:, i].mean()),
                        "planted_change": math.expm1(float(planted[i])), "lag1": lag1(aa[:, i]),
                        "beyond_2sigma": float(np.mean(np.abs(z[:, i]) > 2)), "max_abs_z": float(np.max(np.abs(z[:, i])))})
    triples = stream.record["triples"]
    others = [t["other_cpus"] for t in triples if t.get("other_cpus") is not None]
    loads = [t["loadavg1"] for t in triples if t.get("loadavg1") is not None]
    return {"label": stream.label, "triples": stream.triples, "busy": stream.record["busy"], "stack": stream.record["stack"],
            "started": stream.record.get("started"), "finished": stream.record.get("finished"),
            "minutes": round(sum(t["s"] for t in triples) / 60.0, 1), "plant": stream.record.get("plant"),
            "load": {"other_cpus_mean": round(statistics.mean(others), 2) if others else None,
                     "other_cpus_range": [min(others), max(others)] if others else None,
                     "loadavg1_mean": round(statistics.mean(loads), 2) if loads else None,
                     "loadavg1_range": [min(loads), max(loads)] if loads else None,
                     "stream": stream.record.get("load")},
            "figures": figures, "correlation": corr.round(4).tolist(),
            "correlation_95": [clo.round(4).tolist(), chi.round(4).tolist()]}


def gated(noise: Mapping[str, Any]) -> list[int]:
    return [i for i, f in enumerate(noise["figures"]) if f["gated"]]


def multinormal(noise: Mapping[str, Any], upper: bool = False) -> MultiNormal:
    """The measured medians, sigmas and correlations of the gated figures as a normal model (``upper``:
    every sigma at the upper end of its 95% interval)."""
    keep = gated(noise)
    figs = [noise["figures"][i] for i in keep]
    sig = np.asarray([f["sigma_95"][1] if upper else f["sigma"] for f in figs], dtype=float)
    corr = np.asarray(noise["correlation"], dtype=float)[np.ix_(keep, keep)]
    cov = corr * np.outer(sig, sig)
    return MultiNormal(tuple(f["median"] for f in figs), tuple(map(tuple, cov.tolist())))


def rounds(stream: Stream) -> Rounds:
    """The stream's measured A/A pairs of its gated figures, whole."""
    keep = [i for i, g in enumerate(stream.gated) if g]
    return Rounds(tuple(map(tuple, stream.a[:, keep].tolist())), tuple(map(tuple, stream.a2[:, keep].tolist())))


def family_of(noise: Mapping[str, Any], name: str, legs: int = 1, shapes: int = 1) -> Family:
    """The gated figures of one leg: the measured ones, in the stream's order (the noise models' order),
    repeated for ``shapes`` shapes, over ``legs`` legs."""
    figs = [noise["figures"][i] for i in gated(noise)]
    specs = [FigureSpec(f["key"] + (f" (shape {s + 1})" if shapes > 1 else ""), f["tolerance"], f["floor"])
             for s in range(shapes) for f in figs]
    return Family(name, tuple(specs), legs)


def key_of(noise: Mapping[str, Any], family: Family, metric: str) -> str:
    """The key, in ``family``, of the first figure whose metric is ``metric`` (where a change is planted)."""
    figs = [noise["figures"][i] for i in gated(noise)]
    index = next((i for i, f in enumerate(figs) if f["metric"] == metric), None)
    if index is None:
        raise ValueError(f"no gated {metric} among {', '.join(f['metric'] for f in figs)}")
    return family.figures[index].key
