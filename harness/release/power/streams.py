"""Streams of real perf rounds for gate power: interleaved triples of fresh rounds of the check's own perf
job, measuring every figure the check gates (and a served side's reported TTFT / TPOT beside them).

A triple is three arms, each a fresh round: the baseline twice (A, A') and a copy with a planted slowdown
(B), in a rotating order (every arm in every position, both orders of every pair). Triple ``k`` gives an
A/A pair (A'_k / A_k) and a planted pair (B_k / A_k) for every figure at once, so the figures' noise and
the correlation between them come from the same rounds. Which figures the check gates is asked of the
check itself: two calibration rounds of A are paired by ``harness.analysis.pairing`` as a release check
pairs them, and every figure it gates is recorded, with its tolerance and floor.

- NxDI's CPU mode (``cpu``): each arm an NxDI tree, B the tree with ``--plant`` of a TKG step planted as
  CPU work (``harness.release.plant``); the round is the check's perf job (carbon-tiny smoke, 5 runs,
  process CPU time, one torch thread).
- A served side (``served``): each arm its own vLLM server in the given interpreter, as a check starts one
  per side, the others paused (SIGSTOP) during each round; B's server has every model-runner step planted
  slower by ``--plant`` of a decode step. After each resume the arm's server gets the check's untimed
  warm-up batches (``harness.release.served.warm_up``) before its round, as in a check.

The record (compact: the figures once, then one line per triple with each arm's values and the load the
triple ran under: other processes' CPU share and the load average, as a run manifest's ``load``) is
rewritten atomically after every triple, so a stopped stream still counts. ``--minutes`` bounds a
stream's length: no triple starts that would end past it at the pace so far.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.pairing import FigureChange, SideReport, pair_rounds
from harness.analysis.results import ReportError, load_results
from harness.analysis.stacks import StackPair
from harness.core.load import loadavg, run_load, snapshot
from harness.core.storage import atomic_write_text
from harness.release.children import run_logged
from harness.release.plan import CheckPlan, Side, perf_command, side_env
from harness.release.rounds import read_round

ARMS = ("A", "A2", "B")
ORDERS = list(itertools.permutations(ARMS))  # every arm in every position, both orders of each pair
REPORTED = ("median_ttft_ms", "median_tpot_ms", "median_e2el_ms")  # a served side's serving figures, gated or not
SIGNIFICANT = 6


@dataclass(frozen=True)
class Figure:
    """One figure a stream records, as the check pairs it: ``key`` is the verdict's name for it."""

    benchmark: str
    metric: str
    gated: bool
    tolerance: float
    floor: float | None
    direction: str

    @property
    def key(self) -> str:
        return f"{self.benchmark} {self.metric}"

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "metric": self.metric, "gated": self.gated,
                "tolerance": self.tolerance, "floor": self.floor, "direction": self.direction}


def round_values(bench_json: Path) -> tuple[dict[str, float], dict[str, Any] | None]:
    """Every figure of one round by its key (benchmark figures, engines' ``load_s``), and its run manifest's
    ``load``; empty where the round left nothing."""
    results, engines = read_round(bench_json)
    out = {f"{r.name} {m}": float(v) for r in results for m, v in r.figures.items()}
    out.update({f"engine {e} load_s": rec["load_s"] for e, rec in engines.items() if "load_s" in rec})
    try:
        manifest = load_results(bench_json)[1] if bench_json.is_file() else {}
    except ReportError:
        manifest = {}
    return out, manifest.get("load") if isinstance(manifest.get("load"), dict) else None


def figures_of(plan: CheckPlan, first: Path, second: Path, backend: str) -> list[Figure]:
    """The figures a release check pairs from two rounds of one side, as ``pair_rounds`` pairs them: every
    gated one, and the serving figures (reported where not gated), in the check's order."""
    reports = []
    for name, bench in (("baseline", first), ("candidate", second)):
        results, engines = read_round(bench)
        if not results:
            raise RuntimeError(f"calibration round {bench} left no results (log beside it)")
        reports.append(SideReport(name, backend=backend, rounds={1: results}, engines={1: engines}, ran=[1]))
    pairing = pair_rounds(reports[0], reports[1], Tolerances(), 0.95, StackPair(backend, backend))
    keep: list[FigureChange] = [f for f in pairing.figures if f.gated or f.metric in REPORTED]
    if not any(f.gated for f in keep):
        raise RuntimeError(f"the calibration rounds of {plan.out} gate no figure")
    return [Figure(f.benchmark, f.metric, f.gated, f.tolerance, f.floor, f.direction) for f in keep]


def _compact(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.{SIGNIFICANT}g}")


def write_record(path: Path, record: dict[str, Any]) -> None:
    """The record as JSON with one line per triple (compact, and a diff shows which triples changed)."""
    head = {k: v for k, v in record.items() if k != "triples"}
    body = ",\n".join("    " + json.dumps(t, separators=(",", ":")) for t in record["triples"])
    text = json.dumps(head, indent=1)[:-2] + ',\n "triples": [\n' + body + "\n ]\n}\n"
    json.loads(text)  # the hand-joined layout is still JSON
    atomic_write_text(path, text)


@dataclass
class Arms:
    """How to run one round of each arm: ``run(arm, tag)`` returns the round's benchmark JSON."""

    plan: CheckPlan
    sides: dict[str, Side]
    before: Callable[[str], None] = lambda arm: None

    def run(self, arm: str, folder: Path, tag: str) -> Path:
        self.before(arm)
        side = self.sides[arm]
        bench, junit = folder / arm / f"{tag}.json", folder / arm / f"{tag}.xml"
        run_logged(perf_command(self.plan, side, bench, junit), folder / arm / f"{tag}.log",
                   side_env(self.plan, side), 1800)
        return bench


def run_triples(arms: Arms, record: dict[str, Any], figures: Sequence[Figure], path: Path, triples: int,
                minutes: float) -> None:
    """Up to ``triples`` triples, none started that would end past ``minutes`` at the pace so far."""
    keys = [f.key for f in figures]
    t_start = time.monotonic()
    for k in range(1, triples + 1):
        spent = [t["s"] for t in record["triples"]]
        if spent and time.monotonic() - t_start + statistics.mean(spent) > 60 * minutes:
            record["stopped"] = f"the {minutes:g}-minute budget: {k - 1} triples"
            break
        t0, before = time.perf_counter(), snapshot()
        order = ORDERS[(k - 1) % len(ORDERS)]
        row: dict[str, Any] = {"k": k, "order": list(order)}
        for arm in order:
            values, _ = round_values(arms.run(arm, arms.plan.out, f"round-{k}"))
            row[arm] = [_compact(values.get(key)) for key in keys]
        load = run_load(before, snapshot(), os.cpu_count(), loadavg())
        row["s"] = round(time.perf_counter() - t0, 1)
        row["other_cpus"], row["loadavg1"] = load["other_cpus"], round(load["loadavg"][0], 2) if load["loadavg"] else None
        record["triples"].append(row)
        write_record(path, record)
        print(f"[power] triple {k}/{triples} ({' '.join(order)}) in {row['s']:.0f} s, other CPUs {row['other_cpus']}",
              file=sys.stderr, flush=True)


def stream(arms: Arms, path: Path, triples: int, plant: Callable[[dict[str, float]], tuple[Side, dict[str, Any]]],
           busy: bool, minutes: float, what: dict[str, Any]) -> dict[str, Any]:
    """Calibrate (two rounds of A: the figures and the planted arm's size), then the triples; ``busy``
    keeps one core spinning throughout. The record is at ``path``, rewritten after every triple."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    start = snapshot()
    record: dict[str, Any] = {"schema": 2, **what, "busy": busy, "runs": arms.plan.runs,
                              "models": list(arms.plan.models), "shapes": list(arms.plan.shapes),
                              "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "command": "python -m harness.release.power " + " ".join(sys.argv[1:])}
    try:
        cal = [arms.run("A", arms.plan.out / "calibration", f"round-{i}") for i in (1, 2)]
        figures = figures_of(arms.plan, cal[0], cal[1], arms.sides["A"].backend)
        first = round_values(cal[0])[0]
        arms.sides["B"], record["plant"] = plant(first)
        record["figures"] = {f.key: f.to_dict() for f in figures}
        record["triples"] = []
        run_triples(arms, record, figures, path, triples, minutes)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    record["load"] = run_load(start, snapshot(), os.cpu_count(), loadavg())
    record["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_record(path, record)
    return record


def step_ms(values: dict[str, float], metric: str) -> float:
    found = [v for k, v in values.items() if k.endswith(f" {metric}")]
    if not found:
        raise RuntimeError(f"the calibration round has no {metric} to size the plant by")
    return statistics.median(found)


def cpu_arms(source: Path, out: Path, runs: int, models: Sequence[str], shapes: Sequence[str],
             fraction: float) -> tuple[Arms, Callable[[dict[str, float]], tuple[Side, dict[str, Any]]]]:
    """NxDI's CPU mode: the arms are NxDI trees run by this interpreter; B plants ``fraction`` of a TKG step."""
    from harness.release.plant import plant_tkg_slowdown

    source = source.resolve()
    sides = {"A": Side("A", sys.executable, source), "A2": Side("A2", sys.executable, source)}
    plan = CheckPlan(sides["A"], sides["A2"], out, models=tuple(models), shapes=tuple(shapes), cpu=True, runs=runs)

    def plant(first: dict[str, float]) -> tuple[Side, dict[str, Any]]:
        extra = round(step_ms(first, "tkg_ms_p50") * fraction, 3)
        tree = out / "planted"
        if not tree.exists():
            plant_tkg_slowdown(source, tree, extra)
        return Side("B", sys.executable, tree.resolve()), {"fraction": fraction, "ms": extra,
                                                           "what": "CPU work in every TKG step"}

    return Arms(plan, sides), plant


def served_arms(python: str, out: Path, runs: int, models: Sequence[str], shapes: Sequence[str], fraction: float,
                servers: dict[str, Any], progress: Callable[[str], None]
                ) -> tuple[Arms, Callable[[dict[str, float]], tuple[Side, dict[str, Any]]]]:
    """A served side: each arm its own vLLM server in ``python`` (started here, stopped by the caller through
    ``servers``), only the round's arm running; B's server plants ``fraction`` of a decode step."""
    from harness.release.plant import plant_served_step_slowdown
    from harness.release.plan import served_name
    from harness.release.served import focus, ready, served_checkpoint, spawn, warm_rows, warm_up

    base = CheckPlan(Side("A", python, backend="openai"), Side("A2", python, backend="openai"), out,
                     models=tuple(models), shapes=tuple(shapes), runs=runs)
    checkpoint = served_checkpoint(base.models, None, None)

    def start(arm: str, env: dict[str, str]) -> Side:
        server = spawn(arm, python, env, checkpoint, served_name(base), None, out / arm / "vllm-server.log", (),
                       progress)
        servers[arm] = server
        ready(arm, server, progress)
        focus(servers, None)
        return replace(base.baseline, name=arm, endpoint=server.url, dtype="fp32", started=True, env=tuple(env.items()))

    sides = {arm: start(arm, {}) for arm in ("A", "A2")}
    plan = replace(base, baseline=sides["A"], candidate=sides["A2"])

    batches = warm_rows(checkpoint, plan.shapes)

    def before(arm: str) -> None:  # as the check's focus: only this arm's server runs, warmed once resumed
        focus(servers, arm)
        failed = warm_up(servers[arm], served_name(plan), batches)
        if failed:
            progress(f"{arm}: {len(failed)} warm-up request(s) failed ({failed[0]})")

    arms = Arms(plan, sides, before)

    def plant(first: dict[str, float]) -> tuple[Side, dict[str, Any]]:
        extra = round(step_ms(first, "median_tpot_ms") * fraction, 3)
        hook = plant_served_step_slowdown(out / "planted", extra)
        sides["B"] = start("B", {"PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])})
        return sides["B"], {"fraction": fraction, "ms": extra, "what": "a spin before every model-runner step"}

    return arms, plant
