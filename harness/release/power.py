"""Gate power, measured on this machine in NxDI's CPU mode: how often the release check's rule calls
identical code a regression (A/A), and how often it catches a planted TKG slowdown.

One long release check per configuration (A/A, and copies of the tree with a planted slowdown of
about 5%, 10% and 30% of a TKG step) collects ``--pairs`` interleaved round pairs of ``test_tkg``;
every subset of ``k`` pairs is then a release check of ``k`` rounds, judged by the verdict's own rule
(``harness.analysis.verdict``), so one run of each configuration estimates the rates for every ``k``.

    python -m harness.release.power --nxdi-source ../shared/vendor --out /tmp/power [--busy]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.analysis.verdict import DEFAULT_TOLERANCE, FigureChange, floor_of
from harness.core.stats import CONFIDENCE, paired_ratio_ci
from harness.core.storage import atomic_write_json, atomic_write_text
from harness.release.plant import plant_tkg_slowdown
from harness.release.run import child_env

CHECK = ("--no-conformance", "--perf-select", "test_tkg", "--runs", "3")
SLOWDOWNS = (0.05, 0.10, 0.30)  # of the baseline's TKG step


def long_check(source: Path, candidate: Path, pairs: int, out: Path) -> tuple[list[float], list[float], float]:
    """The per-round tkg_ms_p50 of both sides over ``pairs`` interleaved rounds, and the wall time."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "harness.cli", "release-check", "--neuron-cpu", "--baseline-nxdi-source", str(source),
           "--candidate-nxdi-source", str(candidate), "--out", str(out), "--force", "--rounds", str(pairs), *CHECK]
    r = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=7200)
    verdict_file = out / "verdict.json"
    if not verdict_file.is_file():
        raise RuntimeError(f"release-check wrote no verdict (exit {r.returncode}): {r.stderr[-2000:]}")
    figures = json.loads(verdict_file.read_text())["figures"]
    tkg = next(f for f in figures if f["metric"] == "tkg_ms_p50" and f["gated"])
    return tkg["baseline"], tkg["candidate"], time.perf_counter() - start


def fires(base: list[float], new: list[float], tolerance: float, confidence: float) -> bool:
    change = FigureChange("tkg", "tkg_ms_p50", tuple(base), tuple(new), "max", tolerance, True,
                          paired_ratio_ci(base, new, confidence), floor_of("tkg_ms_p50"), confidence)
    return change.regressed


def rates(base: list[float], new: list[float], k: int, tolerance: float, confidence: float) -> float:
    subsets = list(itertools.combinations(range(len(base)), k))
    hits = sum(fires([base[i] for i in s], [new[i] for i in s], tolerance, confidence) for s in subsets)
    return hits / len(subsets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.release.power", description=__doc__.splitlines()[0])
    parser.add_argument("--nxdi-source", type=Path, required=True, help="the NxDI tree to check against itself")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=8, help="interleaved round pairs per configuration (default 8)")
    parser.add_argument("--ks", default="3,4,5", help="round counts to estimate the rates for (default 3,4,5)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        rows: dict[str, Any] = {}
        base, new, wall = long_check(args.nxdi_source, args.nxdi_source, args.pairs, args.out / "aa")
        rows["A/A"] = {"planted_ms": 0.0, "baseline": base, "candidate": new, "wall_s": wall}
        step_ms = statistics.median(base)
        for fraction in SLOWDOWNS:
            extra = round(step_ms * fraction, 3)
            tree = plant_tkg_slowdown(args.nxdi_source, args.out / f"planted-{fraction:g}", extra)
            base, new, wall = long_check(args.nxdi_source, tree, args.pairs, args.out / f"check-{fraction:g}")
            rows[f"+{100 * fraction:g}%"] = {"planted_ms": extra, "baseline": base, "candidate": new, "wall_s": wall}
    finally:
        if busy is not None:
            busy.kill()
    lines = ["| candidate | planted ms/step | measured change | " + " | ".join(f"fails at {k} rounds" for k in ks) + " |",
             "|---|---|---|" + "---|" * len(ks)]
    for label, row in rows.items():
        change = statistics.median(row["candidate"]) / statistics.median(row["baseline"]) - 1
        cells = [f"{rates(row['baseline'], row['candidate'], k, DEFAULT_TOLERANCE, CONFIDENCE):.0%}" for k in ks]
        lines.append(f"| {label} | {row['planted_ms']:g} | {100 * change:+.1f}% | " + " | ".join(cells) + " |")
    per_round = statistics.median(r["wall_s"] / (2 * args.pairs) for r in rows.values())
    lines.append("")
    lines.append(f"{args.pairs} interleaved pairs per configuration{' with one core kept busy' if args.busy else ''}; "
                 f"every subset of k pairs judged by the verdict's rule (tolerance {100 * DEFAULT_TOLERANCE:g}%, "
                 f"{100 * CONFIDENCE:g}% confidence); one perf round (a fresh process per side) took "
                 f"{per_round:.0f} s.")
    atomic_write_json(args.out / "power.json", {"pairs": args.pairs, "busy": args.busy, "rows": rows})
    atomic_write_text(args.out / "power.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
