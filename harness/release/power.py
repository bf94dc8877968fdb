"""Gate power from measured noise: streams of real perf rounds on this machine, the noise of a pair
estimated from them, and the release check's rule simulated at that noise.

Why not subsets of one check: every subset of k pairs of one 6-pair run shares its pairs, so its
"rates" are one draw, not a rate. Instead:

1. ``stream`` runs ``--triples`` interleaved triples of fresh perf rounds (``test_tkg`` only, as a
   release check's round runs it): the baseline tree twice (A, A') and a copy with a planted
   slowdown of ``--plant`` of a TKG step (B), in a rotating order (every arm in every position, both
   orders of every pair). Triple ``k`` gives an A/A pair (A'_k / A_k) and a planted pair (B_k / A_k).
   ``--busy`` keeps one core spinning throughout (the loaded case). ``stream.json`` is rewritten
   atomically after every triple, so a stopped stream still counts.
2. ``analyse`` estimates, per stream, sigma of the per-pair log ratio (with a bootstrap interval), its
   lag-1 autocorrelation, its tails, whether the plant moves the log ratio by a constant (a
   multiplicative slowdown), then the rule's rates from the measured noise (normal at sigma, and
   resampling the measured A/A log ratios), checked against disjoint blocks of the stream's own
   pairs (independent checks, not subsets). It writes ``power.md`` (the README's table) and, with
   ``--fixture``, the measured noise the unit test of the rule's aims reads.

    python -m harness.release.power stream --nxdi-source ../shared/vendor --out /tmp/power-loaded --busy
    python -m harness.release.power analyse /tmp/power-quiet /tmp/power-loaded --out /tmp/power.md \
        --fixture fixtures/release/noise.json

``simulate`` is the same rule the verdict applies (``harness.core.sequential.decide``), fed with
drawn log ratios: the rates it gives are the design's, not an approximation of it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.verdict import DEFAULT_TOLERANCE
from harness.core.sequential import FAIL, OPEN, UNRESOLVED, Design, Series, decide, settled
from harness.core.storage import atomic_write_json, atomic_write_text
from harness.release.plant import plant_tkg_slowdown
from harness.release.children import run_logged
from harness.release.plan import CheckPlan, Side, perf_command, side_env
from harness.release.rounds import read_round

METRIC = "tkg_ms_p50"
ORDERS = list(itertools.permutations(("A", "A2", "B")))  # every arm in every position, both orders of each pair
Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


# ----------------------------------------------------------------------------------------------
# The rule at a given noise
# ----------------------------------------------------------------------------------------------

def stopped(logs: Sequence[Sequence[float]], design: Design, tolerance: float) -> tuple[list[Any], int]:
    """One check on per-figure log ratios (pair ``k`` is round ``k``), stopped as a release check stops:
    at the first look where every figure is decided, or at the last look the pairs reach (final only
    at the design's cap, so a stretch cut short by the stream's end stays open). Returns the decisions
    and the pairs taken."""
    available = min(len(row) for row in logs)
    decisions: list[Any] = []
    n = 0
    for n in (look for look in design.looks if look <= available):
        series = [Series(f"f{i}", tuple((k + 1, float(x)) for k, x in enumerate(row[:n])), tolerance)
                  for i, row in enumerate(logs)]
        decisions = decide(series, design, n, final=n >= design.max_pairs)
        if settled(decisions):
            break
    return decisions, n


def simulate(design: Design, draw: Draw, shift: float, figures: int = 1, sims: int = 2000, seed: int = 0,
             tolerance: float = DEFAULT_TOLERANCE) -> dict[str, float]:
    """Run ``sims`` checks of ``figures`` independent gated figures whose per-pair log ratios are
    ``draw(rng, (figures, pairs)) + log(1 + shift)``, each stopped by the design as the release
    check stops: the share that fail (a figure FAIL or unresolved), that fail on a figure, and the
    mean pairs taken."""
    rng = np.random.Generator(np.random.PCG64(seed))
    failed = on_figure = 0
    pairs: list[int] = []
    for _ in range(sims):
        logs = draw(rng, (figures, design.max_pairs)) + math.log1p(shift)
        decisions, n = stopped([list(row) for row in logs], design, tolerance)
        failed += any(d.state in (FAIL, UNRESOLVED) for d in decisions)
        on_figure += any(d.state == FAIL for d in decisions)
        pairs.append(n)
    return {"fail": failed / sims, "fail_on_figure": on_figure / sims, "mean_pairs": float(np.mean(pairs))}


def normal(sigma: float) -> Draw:
    return lambda rng, size: rng.normal(0.0, sigma, size)


def resampled(logs: Sequence[float]) -> Draw:
    """The measured A/A log ratios, centred, drawn with replacement: the measured tails, not a normal's."""
    centred = np.asarray(logs, dtype=float) - float(np.mean(logs))
    return lambda rng, size: rng.choice(centred, size=size, replace=True)


def walk(design: Design, logs: Sequence[float], tolerance: float = DEFAULT_TOLERANCE) -> list[tuple[str, int]]:
    """Independent checks on one measured stream: the design run on consecutive, disjoint stretches
    of its pairs (each check starts where the last stopped); returns each check's outcome and pairs."""
    out, start = [], 0
    while start + design.min_pairs <= len(logs):
        chunk = logs[start:start + design.max_pairs]
        decisions, n = stopped([list(chunk)], design, tolerance)
        state = decisions[0].state
        out.append(("open (stream ended)" if state == OPEN else state, n))
        start += n
    return out


# ----------------------------------------------------------------------------------------------
# Streams of real rounds
# ----------------------------------------------------------------------------------------------

def _round(plan: CheckPlan, side: Side, folder: Path, tag: str) -> float | None:
    bench, junit = folder / f"{tag}.json", folder / f"{tag}.xml"
    run_logged(perf_command(plan, side, bench, junit), folder / f"{tag}.log", side_env(plan, side), 1800)
    results, _ = read_round(bench)
    values = [r.figures.get(METRIC) for r in results if r.figures.get(METRIC) is not None]
    return float(values[0]) if values else None


def stream(source: Path, out: Path, triples: int, plant: float, busy: bool, runs: int) -> dict[str, Any]:
    source = source.resolve()
    out.mkdir(parents=True, exist_ok=True)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    record: dict[str, Any] = {"source": str(source), "triples": [], "busy": busy, "plant_fraction": plant,
                              "runs": runs, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "command": "python -m harness.release.power " + " ".join(sys.argv[1:])}
    try:
        sides = {"A": Side("baseline", sys.executable, source.resolve())}
        sides["A2"] = Side("baseline-again", sys.executable, source.resolve())
        plan = CheckPlan(sides["A"], sides["A2"], out, cpu=True, runs=runs, perf_select="test_tkg")
        calibration = [v for v in (_round(plan, sides["A"], out / "calibration", f"round-{i}") for i in (1, 2)) if v]
        if not calibration:
            raise RuntimeError(f"the baseline produced no {METRIC} (logs in {out / 'calibration'})")
        step = statistics.median(calibration)
        extra_ms = round(step * plant, 3)
        tree = out / "planted"
        if not tree.exists():
            plant_tkg_slowdown(source, tree, extra_ms)
        sides["B"] = Side("planted", sys.executable, tree.resolve())
        record.update({"calibration_ms": calibration, "planted_ms": extra_ms})
        for k in range(1, triples + 1):
            t0 = time.perf_counter()
            order = ORDERS[(k - 1) % len(ORDERS)]
            values = {arm: _round(plan, sides[arm], out / arm, f"round-{k}") for arm in order}
            record["triples"].append({"k": k, "order": list(order), **values})
            atomic_write_json(out / "stream.json", record)
            print(f"[power] triple {k}/{triples} ({' '.join(order)}): "
                  + ", ".join(f"{a} {values[a]:.2f} ms" if values[a] else f"{a} none" for a in ("A", "A2", "B"))
                  + f" in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        if spinner is not None:
            spinner.kill()
    record["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    atomic_write_json(out / "stream.json", record)
    return record


# ----------------------------------------------------------------------------------------------
# Analysis
# ----------------------------------------------------------------------------------------------

def lag1(x: Sequence[float]) -> float:
    a = np.asarray(x, dtype=float) - float(np.mean(x))
    return float(np.sum(a[1:] * a[:-1]) / np.sum(a * a)) if np.sum(a * a) > 0 else 0.0


def sigma_interval(x: Sequence[float], seed: int = 0, resamples: int = 4000) -> tuple[float, float, float]:
    arr = np.asarray(x, dtype=float)
    rng = np.random.Generator(np.random.PCG64(seed))
    boots = np.std(arr[rng.integers(0, arr.size, size=(resamples, arr.size))], axis=1, ddof=1)
    low, high = np.quantile(boots, [0.025, 0.975])
    return float(np.std(arr, ddof=1)), float(low), float(high)


def noise_of(record: dict[str, Any]) -> dict[str, Any]:
    """The measured noise of one stream: sigma of the A/A and planted log ratios, autocorrelation,
    tails, and whether the plant is a constant shift in log (multiplicative)."""
    rows = [t for t in record["triples"] if t.get("A") and t.get("A2") and t.get("B")]
    aa = [math.log(t["A2"] / t["A"]) for t in rows]
    ab = [math.log(t["B"] / t["A"]) for t in rows]
    base = [t["A"] for t in rows]
    s_aa, lo_aa, hi_aa = sigma_interval(aa)
    s_ab, lo_ab, hi_ab = sigma_interval(ab)
    z = (np.asarray(aa) - np.mean(aa)) / s_aa
    expected = [math.log1p(record["planted_ms"] / a) for a in base]  # an additive plant's shift, per triple
    return {"pairs": len(rows), "busy": record["busy"], "planted_ms": record["planted_ms"],
            "step_ms_median": statistics.median(base), "sigma_aa": s_aa, "sigma_aa_95": [lo_aa, hi_aa],
            "sigma_process": s_aa / math.sqrt(2), "mean_aa": float(np.mean(aa)),
            "sigma_planted": s_ab, "sigma_planted_95": [lo_ab, hi_ab], "mean_planted": float(np.mean(ab)),
            "planted_change": math.expm1(float(np.mean(ab))), "lag1_aa": lag1(aa), "lag1_baseline": lag1(base),
            "beyond_2sigma": float(np.mean(np.abs(z) > 2)), "max_abs_z": float(np.max(np.abs(z))),
            "excess_kurtosis": float(np.mean(z ** 4) - 3), "additive_shift_mean": float(np.mean(expected)),
            "corr_planted_vs_step": float(np.corrcoef(np.log(base), np.asarray(ab) - np.asarray(aa))[0, 1]),
            "aa": aa, "planted": ab, "started": record.get("started"), "finished": record.get("finished")}


ROUNDS_TABLE = (4, 6, 8, 12, 16)


def rates_table(noise: dict[str, Any], shift: float, sims: int) -> list[str]:
    """The issue's table for one stream: each design's A/A false alarms and catches of ``shift``."""
    lines = ["| design | noise model | A/A fails (3 figures) | mean pairs (A/A) | A/A fails (18 figures) | "
             f"+{100 * shift:g}% caught | mean pairs (+{100 * shift:g}%) |", "|---|---|---|---|---|---|---|"]
    designs = [("sequential 4..16", Design())]
    designs += [(f"fixed {r}", Design(min_pairs=r, max_pairs=r)) for r in ROUNDS_TABLE]
    for label, design in designs:
        for model, draw in (("normal", normal(noise["sigma_aa"])), ("measured", resampled(noise["aa"]))):
            aa3 = simulate(design, draw, 0.0, 3, sims)
            aa18 = simulate(design, draw, 0.0, 18, max(200, sims // 5), seed=1)
            caught = simulate(design, draw, shift, 1, sims, seed=2)
            lines.append(f"| {label} | {model} | {100 * aa3['fail']:.1f}% | {aa3['mean_pairs']:.1f} | "
                         f"{100 * aa18['fail']:.1f}% | {100 * caught['fail_on_figure']:.1f}% | "
                         f"{caught['mean_pairs']:.1f} |")
    return lines


def resolves(sigma: float, sims: int, aim: float = 0.95) -> float | None:
    """The smallest slowdown the default sequential design fails on a figure at least ``aim`` of the time."""
    for pct in range(10, 101, 5):
        if simulate(Design(), normal(sigma), pct / 100, 1, sims, seed=3)["fail_on_figure"] >= aim:
            return pct / 100
    return None


def analyse(folders: Sequence[Path], out: Path, sims: int, fixture: Path | None) -> str:
    command = "python -m harness.release.power " + " ".join(sys.argv[1:])
    lines = [f"Measured {dt.date.today().isoformat()}; command: `{command}`", ""]
    fixture_data: dict[str, Any] = {"schema": 1, "measured": dt.date.today().isoformat(), "streams": {}}
    for folder in folders:
        record = json.loads((folder / "stream.json").read_text())
        noise = noise_of(record)
        load = "one core kept busy" if noise["busy"] else "quiet"
        when = f"{noise['started']} .. {noise['finished']}"
        lines += [f"### {folder.name}: {load}, {noise['pairs']} triples ({when})", "",
                  f"- sigma of a pair's log ratio (A/A): {100 * noise['sigma_aa']:.1f}% (95% bootstrap "
                  f"{100 * noise['sigma_aa_95'][0]:.1f}..{100 * noise['sigma_aa_95'][1]:.1f}%), per process "
                  f"{100 * noise['sigma_process']:.1f}%; mean {100 * noise['mean_aa']:+.1f}%",
                  f"- planted {noise['planted_ms']} ms on a {noise['step_ms_median']:.2f} ms step: measured change "
                  f"{100 * noise['planted_change']:+.1f}% (an additive plant predicts "
                  f"{100 * math.expm1(noise['additive_shift_mean']):+.1f}%); sigma of the planted pairs "
                  f"{100 * noise['sigma_planted']:.1f}% (95% {100 * noise['sigma_planted_95'][0]:.1f}.."
                  f"{100 * noise['sigma_planted_95'][1]:.1f}%); correlation of (planted - A/A) with log step "
                  f"{noise['corr_planted_vs_step']:+.2f}",
                  f"- lag-1 autocorrelation: A/A log ratios {noise['lag1_aa']:+.2f}, baseline steps "
                  f"{noise['lag1_baseline']:+.2f}; tails: {100 * noise['beyond_2sigma']:.0f}% beyond 2 sigma "
                  f"(normal 4.6%), max |z| {noise['max_abs_z']:.1f}, excess kurtosis "
                  f"{noise['excess_kurtosis']:+.1f}", ""]
        lines += rates_table(noise, 0.30, sims) + [""]
        blocks4 = walk(Design(min_pairs=4, max_pairs=4), noise["aa"])
        seq_aa, seq_ab = walk(Design(), noise["aa"]), walk(Design(), noise["planted"])
        lines += [f"Independent checks on the stream's own disjoint pairs: fixed 4 on A/A "
                  f"{sum(s != 'pass' for s, _ in blocks4)} of {len(blocks4)} not passed; sequential on A/A "
                  f"{[f'{s} at {n}' for s, n in seq_aa]}; sequential on the planted pairs "
                  f"{[f'{s} at {n}' for s, n in seq_ab]}.", ""]
        smallest = resolves(noise["sigma_aa"], max(300, sims // 4))
        lines += [f"At this sigma the default design fails a slowdown of "
                  f"{'%.0f%%' % (100 * smallest) if smallest else 'more than 100%'} or more in at least 19 of 20 "
                  "checks.", ""]
        fixture_data["streams"]["loaded" if noise["busy"] else "quiet"] = {
            k: noise[k] for k in ("pairs", "sigma_aa", "sigma_aa_95", "sigma_process", "lag1_aa", "planted_change",
                                  "step_ms_median", "started", "finished")}
    text = "\n".join(lines) + "\n"
    atomic_write_text(out, text)
    if fixture is not None:
        atomic_write_json(fixture, fixture_data)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.release.power", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stream", help="interleaved triples of fresh perf rounds: A, A again, and a planted slowdown")
    s.add_argument("--nxdi-source", type=Path, required=True, help="the NxDI tree to measure (../shared/vendor)")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--triples", type=int, default=40, help="triples of rounds (default 40)")
    s.add_argument("--plant", type=float, default=0.30, help="planted slowdown, a fraction of a TKG step (default 0.30)")
    s.add_argument("--runs", type=int, default=3, help="timed runs per round, as the check's --runs (default 3)")
    s.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    a = sub.add_parser("analyse", help="noise and rates from streams")
    a.add_argument("streams", type=Path, nargs="+", help="stream --out folders")
    a.add_argument("--out", type=Path, required=True, help="the markdown report")
    a.add_argument("--sims", type=int, default=2000, help="simulated checks per cell (default 2000)")
    a.add_argument("--fixture", type=Path,
                   help="also write the measured noise here (fixtures/release/noise.json)")
    args = parser.parse_args(argv)
    if args.command == "stream":
        if args.triples < 1 or not 0 < args.plant < 10:
            parser.error("--triples must be positive and --plant a positive fraction")
        stream(args.nxdi_source, args.out, args.triples, args.plant, args.busy, args.runs)
        return 0
    print(analyse(args.streams, args.out, args.sims, args.fixture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
