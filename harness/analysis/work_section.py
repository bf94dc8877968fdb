"""The verdict's "Work per step": each CTE / TKG benchmark's exact work on both sides (``extra_info['work']`` of
every perf round, ``harness.core.work``), where it moved, what a timing FAIL with the same work means, and the
host-work gate (``release-check --gate-work PCT``).

Why a gate on counts: on a shared CPU runner a timing gate catches a 30% slowdown but seldom a 10% one (the
per-process noise is 10-20%), while a count is exact. The gate trusts a count only where it is: each side's
counts must be the same in every one of its rounds (fresh processes), its own A/A; a benchmark whose counts
differ between rounds is not gated, and the section says so rather than passing it in silence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.pairing import SideReport
from harness.core.work import WorkCount, describe_change, growth, unstable


def side_work(report: SideReport) -> dict[str, list[WorkCount]]:
    """Benchmark name -> its counted work in each round that counted it (rounds in order)."""
    out: dict[str, list[WorkCount]] = {}
    for k in sorted(report.rounds):
        for bench in report.rounds[k]:
            work = bench.extra.get("work")
            if isinstance(work, dict) and "python_calls" in work:
                out.setdefault(bench.name, []).append(WorkCount.from_dict(work))
    return out


@dataclass
class WorkSection:
    rows: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"benchmarks": self.rows, "reasons": self.reasons, "notes": self.notes}

    def markdown(self) -> list[str]:
        if not self.rows:
            return []
        lines = ["### Work per step", "", "Exact counts of one step (b: baseline, c: candidate), from an untimed pass "
                 "after each CTE / TKG benchmark's timed rounds, in its first round.", "",
                 "| benchmark | Python calls (b / c) | aten ops (b / c) | bytes (b / c) | rounds (b / c) |",
                 "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| `{r['benchmark']}` | {r['calls'][0]:.6g} / {r['calls'][1]:.6g} | {r['ops'][0]:.6g} / "
                         f"{r['ops'][1]:.6g} | {r['bytes'][0]:.6g} / {r['bytes'][1]:.6g} | {r['rounds'][0]} / "
                         f"{r['rounds'][1]} |")
        lines.append("")
        for r in self.rows:
            if r["changes"]:
                lines += [f"Where `{r['benchmark']}`'s work moved:", ""] + [f"- {c}" for c in r["changes"]] + [""]
        return lines + [f"- {n}" for n in self.notes] + ([""] if self.notes else [])


EXPLAINS = 0.25  # work that grew by less than a quarter of the slowdown does not explain it


def timing_note(name: str, base: WorkCount, new: WorkCount, changes: list[str], slower: float | None) -> str:
    """What a timing FAIL's work says: the same work, or a change too small to explain the slowdown (ops and
    bytes equal, Python calls grown by less than ``EXPLAINS`` of it: a planted sleep or spin is a call or a few
    more), so kernels, environment or machine; else the work that grew."""
    g = growth(base.python_calls, new.python_calls) or 0.0
    same_ops = (base.aten_ops, base.bytes_allocated) == (new.aten_ops, new.bytes_allocated)
    if not changes or (same_ops and slower is not None and abs(g) < EXPLAINS * slower):
        moved = f" (Python calls {100 * g:+.2f}%, against {100 * slower:+.1f}% slower)" if changes and slower else ""
        return f"`{name}` failed on timing with the same work per step{moved}: same work, slower: kernels, " \
               "environment or machine"
    return f"`{name}` failed on timing, and its work per step grew: {changes[0]}"


def work_section(baseline: SideReport, candidate: SideReport, timing_failed: Mapping[str, float | None] | None = None,
                 gate_pct: float | None = None) -> WorkSection:
    """The section for two sides; ``timing_failed``: each benchmark a timing figure failed, and how much slower
    (its relative change); ``gate_pct``: the
    host-work gate's tolerance in percent (None: off). A served side counts nothing (its perf rounds time
    whole generations through a client): it has no rows."""
    base, new = side_work(baseline), side_work(candidate)
    failed = dict(timing_failed or {})
    out = WorkSection()
    for name in sorted(base.keys() & new.keys()):
        b, n = base[name][0], new[name][0]
        changes = describe_change(b, n)
        out.rows.append({"benchmark": name, "calls": [b.python_calls, n.python_calls], "ops": [b.aten_ops, n.aten_ops],
                         "bytes": [b.bytes_allocated, n.bytes_allocated],
                         "rounds": [len(base[name]), len(new[name])], "changes": changes})
        if name in failed:
            out.notes.append(timing_note(name, b, n, changes, failed[name]))
        if gate_pct is None:
            continue
        shaky = [side for side, counts in (("baseline", base[name]), ("candidate", new[name])) if unstable(counts)]
        if shaky:
            out.notes.append(f"`{name}` not gated on host work: the {' and '.join(shaky)}'s counts differ between "
                             "its rounds, so they are not exact here")
            continue
        grown = max((g for g in (growth(b.python_calls, n.python_calls), growth(b.aten_ops, n.aten_ops))
                     if g is not None), default=0.0)
        if 100 * grown > gate_pct:
            out.reasons.append(f"host work of `{name}` grew {100 * grown:+.1f}% per step (--gate-work {gate_pct:g}%): "
                               + "; ".join(changes[:3]))
    if gate_pct is not None:
        missing = sorted((base.keys() | new.keys()) - (base.keys() & new.keys()))
        out.notes += [f"`{m}` not gated on host work: counted on one side only" for m in missing]
    return out
