"""A release check's perf rounds: one round of one side in a fresh process, read back by its index, and
pairs of rounds (A B, B A, ...) until the sequential rule has decided every gated figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.pairing import SideReport
from harness.analysis.results import ReportError, load_results
from harness.analysis.verdict import still_open
from harness.release.children import last_error_line, read_outcomes, run_logged, session_error
from harness.release.images import side_process
from harness.release.plan import CheckPlan, Side, perf_command


def read_round(bench_json: Path) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """A perf round's results and its engines' load / compile seconds and whether they compiled
    (``model/shape`` -> record)."""
    if not bench_json.is_file():
        return [], {}
    try:
        results, manifest = load_results(bench_json)
    except ReportError:
        return [], {}
    engines: dict[str, dict[str, Any]] = {}
    for e in manifest.get("engines") or []:
        if isinstance(e, dict) and e.get("role") is None:
            record: dict[str, Any] = {k: float(e[k]) for k in ("load_s", "compile_s")
                                      if isinstance(e.get(k), (int, float))}
            if isinstance(e.get("compile"), str):
                record["compile"] = e["compile"]
            if isinstance(e.get("config"), dict):
                record["config"] = e["config"]
            engines[f"{e.get('model')}/{e.get('shape')}"] = record
    return results, engines


def run_round(plan: CheckPlan, side: Side, k: int, report: SideReport, timeout: float) -> str:
    """Round ``k`` of one side, a fresh process; its results land under index ``k`` (a round that
    left none is recorded with its exit code and last error line). Returns a progress line."""
    folder = plan.out / side.name
    bench, junit = folder / f"perf-round-{k}.json", folder / f"perf-round-{k}.xml"
    t0 = time.perf_counter()
    cmd, env = side_process(plan, side, perf_command(plan, side, bench, junit))
    rc, text = run_logged(cmd, folder / f"perf-round-{k}.log", env, timeout)
    results, engines = read_round(bench)
    outcomes = read_outcomes(junit)
    if k == 1:
        report.outcomes.update({f"{t} (perf)": o for t, o in outcomes.items()})
    report.ran.append(k)
    report.round_outcomes[k] = outcomes
    if rc != 0 or not results:
        report.round_errors[k] = session_error(rc, text, f"perf round {k}") or f"exit {rc}: {last_error_line(text)}"
    if results:
        report.rounds[k] = results
        report.engines[k] = engines
    return f"{side.name}: exit {rc}, {len(results)} benchmarks, {time.perf_counter() - t0:.0f} s"


def perf_rounds(plan: CheckPlan, reports: dict[str, SideReport], tolerances: Tolerances, confidence: float,
                timeout: float, progress: Callable[[str], None],
                focus: Callable[[str | None], None] = lambda name: None) -> None:
    """Pairs of rounds until the design has decided every gated figure; ``focus(side)`` runs before each
    round (a served check pauses the other side's server), ``focus(None)`` after the last."""
    sides = (plan.baseline, plan.candidate)

    def one(side: Side, k: int) -> str:
        focus(side.name)
        return run_round(plan, side, k, reports[side.name], timeout)

    try:
        _pairs(plan, reports, tolerances, confidence, progress, lambda k: [one(side, k) for side in
                                                                         (sides if k % 2 else sides[::-1])])
    finally:
        focus(None)


def _pairs(plan: CheckPlan, reports: dict[str, SideReport], tolerances: Tolerances, confidence: float,
           progress: Callable[[str], None], pair: Callable[[int], list[str]]) -> None:
    design = plan.design
    for k in range(1, design.max_pairs + 1):
        lines = pair(k)
        progress(f"pair {k} (at most {design.max_pairs}): " + "; ".join(lines))
        open_figures, failing = still_open(reports[plan.baseline.name], reports[plan.candidate.name], tolerances,
                                           design, confidence)
        if failing:
            progress(f"stopping after {k} pairs: {failing[0]}")
            break
        if k < design.min_pairs:
            continue
        if not open_figures:
            progress(f"every gated figure decided after {k} pairs")
            break
        if k < design.max_pairs:
            progress(f"still open after {k} pairs: {', '.join(open_figures)}")


def focus_on(servers: dict[str, Any], warm: Callable[[str], Any] | None = None) -> Callable[[str | None], None]:
    """``focus(side)`` for the perf rounds: only that side's server runs, the other's paused
    (``harness.release.served.focus``), and ``warm(side)`` sends its untimed warm-up requests once it is
    resumed, before the round starts; ``focus(None)`` resumes them all. Without servers the check
    started, nothing to pause."""
    if not servers:
        return lambda name: None
    from harness.release.served import focus

    def go(name: str | None) -> None:
        focus(servers, name)
        if name is not None and warm is not None and name in servers:
            warm(name)

    return go
