"""Series built from the real harness runs in ``fixtures/history/real`` (20 runs of ``pytest -m perf
tests/perf/test_latency.py --carbon-shape smoke`` on carbon-tiny, CPU, timed in process CPU time as a
release check times them, on this shared 2-core machine under the other jobs' varying load; see
fixtures/history/README.md). A planted change scales a real run's time figures: the noise of every
point is the recorded runs' own."""

from __future__ import annotations

import copy
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from harness.core.metrics import METRICS
from harness.core.paths import FIXTURES_DIR

REAL = FIXTURES_DIR / "history" / "real"
TKG_FIGURES = ("tkg_ms_p50", "tkg_ms_p99")  # the TKG path's own figures
TIME_FIGURES = tuple(k for k, d in METRICS.items() if d == "max" and k.endswith("_ms_p50"))


def real_runs() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(REAL.glob("run-*.json"))]


def recorded_noise(benchmark: str = "test_tkg", figure: str = "tkg_ms_p50") -> float:
    """The standard deviation of log(figure) across the real runs: the run-to-run noise of this box
    (about 0.10 for TKG p50, as fixtures/release/noise.json's sigma 0.11 under load)."""
    values = [next(b["extra_info"][figure] for b in r["benchmarks"] if b["name"].startswith(benchmark))
              for r in real_runs()]
    return statistics.stdev(math.log(v) for v in values)


def planted(out: Path, factor: Callable[[int], float], figures: tuple[str, ...] = TIME_FIGURES,
            release: Callable[[int], str] | None = None, runs: int | None = None) -> list[Path]:
    """The real runs in their order, run ``i`` (from 1) with ``figures`` scaled by ``factor(i)`` and, with
    ``release``, its NxDI version (``neuronx-distributed-inference``) set to ``release(i)``; written as
    ``out/run-NN.json``. A benchmark whose scaled figure is its timed rounds' median (test_cte's and test_tkg's
    ``*_ms_p50``) has its rounds' ``stats`` scaled alike: they are the same rounds (records.round_minimums)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, data in enumerate(real_runs()[:runs], 1):
        data = copy.deepcopy(data)
        for b in data["benchmarks"]:
            if any(math.isclose(b["extra_info"].get(k, math.nan), 1000 * b["stats"]["median"], rel_tol=1e-9)
                   for k in figures):
                b["stats"] = {k: v * factor(i) if k in ("min", "median", "mean") else v for k, v in b["stats"].items()}
            for k in figures:
                if isinstance(b["extra_info"].get(k), (int, float)):
                    b["extra_info"][k] *= factor(i)
        if release is not None:
            data["carbon_harness"]["versions"]["neuronx-distributed-inference"] = release(i)
        path = out / f"run-{i:02d}.json"
        path.write_text(json.dumps(data))
        paths.append(path)
    return paths


def aa(out: Path) -> list[Path]:
    return planted(out, lambda i: 1.0)


def step(out: Path, at: int = 11, size: float = 0.10) -> list[Path]:
    return planted(out, lambda i: 1.0 + size if i >= at else 1.0)


def drift(out: Path, releases: int = 5, per_release: int = 4, slower: float = 0.03) -> list[Path]:
    """``releases`` releases of ``per_release`` runs each, each release's TKG path ``slower`` than the one
    before (compounded)."""
    def k(i: int) -> int:
        return (i - 1) // per_release

    return planted(out, lambda i: (1 + slower) ** k(i), TKG_FIGURES, lambda i: f"0.{8 + k(i)}.0",
                   runs=releases * per_release)
