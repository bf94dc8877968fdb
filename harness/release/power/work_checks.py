"""A stream of whole host-work gate checks (issue 49): ``release-check --neuron-cpu --gate-work PCT`` run again
and again, each a fresh check of its own (fresh processes, fresh output), alternating an A/A (the same NxDI tree
on both sides) with a planted check (the candidate a copy of the tree whose TKG step makes ``calls`` more Python
calls, ``harness.release.plant.plant_nxdi_host_work``). The claim "caught at the first look in 20 of 20, and 20
of 20 A/As read no difference" is a count over independent checks, not over subsets of one run, so each check's
outcome is recorded as the check itself wrote it (its exit, its verdict's reasons and work rows).

The record is rewritten atomically after every check, so a stopped stream still counts what it ran, with the
load each check ran under (the work counts are exact under any load; the timing half may be INCONCLUSIVE on a
busy box, which the record keeps).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.core.load import loadavg
from harness.core.storage import atomic_write_json
from harness.release.plant import plant_nxdi_host_work

ARMS = ("aa", "planted")
SCHEMA = 1


def check_command(python: str, baseline: Path, candidate: Path, out: Path, gate_pct: float, rounds: int) -> list[str]:
    """One work-gate check as a user runs it: TKG only, no conformance half, the first look at ``rounds`` pairs."""
    return [python, "-m", "harness.cli", "release-check", "--neuron-cpu", "--baseline-nxdi-source", str(baseline),
            "--candidate-nxdi-source", str(candidate), "--out", str(out), "--no-conformance", "--perf-select",
            "test_tkg", "--runs", "2", "--rounds", str(rounds), "--gate-work", f"{gate_pct:g}%"]


def outcome(arm: str, rc: int, verdict: Mapping[str, Any], gate_pct: float, rounds: int) -> dict[str, Any]:
    """One check's line: what it decided, what its work gate said, and whether that is what the arm requires
    (an A/A: no work reason and no work difference; planted: the gate fails it at the first look, ``rounds`` pairs,
    naming the planted function)."""
    work = verdict.get("work") or {}
    tkg = next((b for b in work.get("benchmarks", []) if "test_tkg" in b.get("benchmark", "")), None)
    gate = [r for r in verdict.get("reasons", []) if f"--gate-work {gate_pct:g}%" in r]
    line: dict[str, Any] = {"arm": arm, "exit": rc, "verdict": verdict.get("verdict"), "rounds": verdict.get("rounds"),
                            "calls": tkg["calls"] if tkg else None, "ops": tkg["ops"] if tkg else None,
                            "changes": tkg["changes"][:3] if tkg else None, "work_reasons": gate,
                            "work_notes": work.get("notes", [])}
    if arm == "aa":
        line["as_required"] = bool(tkg) and not gate and not tkg["changes"] and tkg["calls"][0] == tkg["calls"][1]
    else:
        line["as_required"] = rc == 1 and bool(gate) and "_planted_host_work" in gate[0] and verdict.get("rounds") == rounds
    return line


def stream(python: str, source: Path, out: Path, record: Path, checks: int, calls: int, gate_pct: float,
           rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """``checks`` of each arm, alternating (A/A first), each into its own folder under ``out``."""
    planted = plant_nxdi_host_work(source, out / "planted-tree", calls)
    state: dict[str, Any] = {"schema": SCHEMA, "stack": "neuron-cpu", "python": python, "source": str(source),
                             "planted_calls": calls, "gate_pct": gate_pct, "rounds": rounds,
                             "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                             "command": " ".join(sys.argv), "checks": []}
    for k in range(checks):
        for arm in ARMS:
            folder = out / f"{arm}-{k + 1:02d}"
            cmd = check_command(python, source, planted if arm == "planted" else source, folder, gate_pct, rounds)
            t0, load0 = time.perf_counter(), loadavg()
            r = subprocess.run(cmd, capture_output=True, text=True)
            (out / f"{arm}-{k + 1:02d}.log").write_text(r.stdout + r.stderr)
            path = folder / "verdict.json"
            verdict = json.loads(path.read_text()) if path.is_file() else {}
            line = outcome(arm, r.returncode, verdict, gate_pct, rounds)
            line.update({"check": k + 1, "wall_s": round(time.perf_counter() - t0, 1),
                         "loadavg": [list(load0) if load0 else None, list(loadavg() or ()) or None]})
            state["checks"].append(line)
            state["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            atomic_write_json(record, state)
            progress(f"{arm} {k + 1}/{checks}: exit {r.returncode}, {line['verdict']}, calls {line['calls']}, "
                     f"{'as required' if line['as_required'] else 'NOT as required'} ({line['wall_s']:.0f} s, "
                     f"load {(line['loadavg'][1] or [float('nan')])[0]:.1f})")
    return state


def tally(state: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Each arm's (checks as required, checks run)."""
    out = {}
    for arm in ARMS:
        lines = [c for c in state.get("checks", []) if c.get("arm") == arm]
        out[arm] = (sum(1 for c in lines if c.get("as_required")), len(lines))
    return out
