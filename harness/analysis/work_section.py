"""The verdict's "Work per step": each CTE / TKG benchmark's exact work on both sides (``extra_info['work']`` of
every perf round, ``harness.core.work``), where it moved, what a timing FAIL with the same work means, and the
host-work gate (``release-check --gate-work PCT``).

Why a gate on counts: on a shared CPU runner a timing gate catches a 30% slowdown but seldom a 10% one (the
per-process noise is 10-20%), while a count is exact. The gate trusts a count only where it is: each side's
counts must be the same in every one of its rounds (fresh processes), its own A/A; a benchmark whose counts
differ between rounds is not gated, and the section says so rather than passing it in silence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.pairing import SideReport
from harness.core.server_work import describe_server_change
from harness.core.work import WorkCount, describe_change, growth, unstable

GATED_SERVER = ("engine_steps", "step_tokens", "prompt_tokens", "preemptions")  # more of these: more work a batch


def side_work(report: SideReport) -> dict[str, list[WorkCount]]:
    """Benchmark name -> its counted work in each round that counted it (rounds in order)."""
    out: dict[str, list[WorkCount]] = {}
    for k in sorted(report.rounds):
        for bench in report.rounds[k]:
            work = bench.extra.get("work")
            if isinstance(work, dict) and "python_calls" in work:
                out.setdefault(bench.name, []).append(WorkCount.from_dict(work))
    return out


def server_side_work(report: SideReport) -> tuple[dict[str, list[dict[str, float]]], list[str]]:
    """Benchmark name -> its server's counts per batch in each round that read them, and why a round read none."""
    out: dict[str, list[dict[str, float]]] = {}
    why: list[str] = []
    for k in sorted(report.rounds):
        for bench in report.rounds[k]:
            work = bench.extra.get("server_work")
            if isinstance(work, dict) and isinstance(work.get("counts"), dict):
                out.setdefault(bench.name, []).append({n: float(v) for n, v in work["counts"].items()})
            elif isinstance(work, dict) and work.get("not_counted") and work["not_counted"] not in why:
                why.append(work["not_counted"])
    return out, why


@dataclass
class WorkSection:
    rows: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    served: list[dict[str, Any]] = field(default_factory=list)  # a served side's server counts per batch

    def to_dict(self) -> dict[str, Any]:
        return {"benchmarks": self.rows, "served": self.served, "reasons": self.reasons, "notes": self.notes}

    def markdown(self) -> list[str]:
        if self.served and not self.rows:
            lines = ["### Work per batch (the servers' own counts)", "",
                     "vLLM's counters on each served side's /metrics around one untimed batch after each round's "
                     "timed runs (first round; b: baseline, c: candidate). Python calls are not counted on a "
                     "served side: they would be the client's.", "",
                     "| benchmark | count | b | c |", "|---|---|---|---|"]
            for r in self.served:
                lines += [f"| `{r['benchmark']}` | {name} | {b:.6g} | {c:.6g} |" for name, (b, c) in r["counts"].items()]
            return lines + [""] + [f"- {n}" for n in self.notes] + ([""] if self.notes else [])
        if not self.rows:
            return [f"- {n}" for n in self.notes] + ([""] if self.notes else [])
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
    g = grown_from(base.python_calls, new.python_calls) or 0.0  # from none to some: grown
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
    host-work gate's tolerance in percent (None: off). A served side's client counts nothing of its engine (its
    perf rounds time whole generations through a client): its rows are its server's own counts (``served``)."""
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
        # Python calls or aten ops (docs/release-check.md): either one grown beyond PCT fails
        grown = max((g for g in (grown_from(b.python_calls, n.python_calls), grown_from(b.aten_ops, n.aten_ops))
                     if g is not None), default=0.0)
        if 100 * grown > gate_pct:
            out.reasons.append(f"host work of `{name}` grew {100 * grown:+.1f}% per step (--gate-work {gate_pct:g}%): "
                               + "; ".join(changes[:3]))
    out.notes += one_sided(base, new, "work per step", gate_pct)
    served(out, baseline, candidate, gate_pct)
    if gate_pct is not None and not out.rows and not out.served:
        out.notes.append(f"--gate-work {gate_pct:g}% gated nothing: no benchmark's work was counted on both sides")
    return out


def grown_from(base: float, new: float) -> float | None:
    """new / base - 1; from a base of zero, infinite growth where there is some (0 -> 4 preemptions), None where
    there is none."""
    return growth(base, new) if base else (math.inf if new > 0 else None)


def one_sided(base: Mapping[str, list], new: Mapping[str, list], what: str, gate_pct: float | None) -> list[str]:
    """A note for each benchmark whose ``what`` was counted on one side only (its counts lost on the other, or
    never taken there): never compared, so never a silent pass."""
    out = []
    for name in sorted(base.keys() ^ new.keys()):
        has, lacks = ("baseline", "candidate") if name in base else ("candidate", "baseline")
        gated = " (not gated: --gate-work needs both sides' counts)" if gate_pct is not None else ""
        out.append(f"`{name}`'s {what} was counted on the {has} only: the {lacks}'s rounds carry no counts of it"
                   f"{gated}")
    return out


def served(out: WorkSection, baseline: SideReport, candidate: SideReport, gate_pct: float | None) -> None:
    """A served side's rows: each count of both sides' servers per batch, where they moved, and (``gate_pct``)
    the gate on the counts that are more work for the same batch (``GATED_SERVER``), on each side's range over
    its rounds: the candidate's least beyond the baseline's most by more than PCT."""
    (base, why_b), (new, why_c) = server_side_work(baseline), server_side_work(candidate)
    for who, why in (("baseline", why_b), ("candidate", why_c)):
        out.notes += [f"the {who}'s server work was not counted: {w}" for w in why]
    out.notes += one_sided(base, new, "server work per batch", gate_pct)
    for name in sorted(base.keys() & new.keys()):
        b, n = base[name][0], new[name][0]
        changes = describe_server_change(b, n)
        out.served.append({"benchmark": name, "counts": {k: [b.get(k, 0.0), n.get(k, 0.0)] for k in sorted(b.keys() | n.keys())},
                           "rounds": [len(base[name]), len(new[name])], "changes": changes})
        if changes:
            out.notes.append(f"`{name}`'s server work per batch moved: " + "; ".join(changes[:4]))
        if gate_pct is None:
            continue
        # a server's scheduler may split a batch differently from round to round (two concurrent requests
        # arriving in one step or two): its counts are gated on their ranges, every candidate round beyond every
        # baseline round by more than PCT, so a round-to-round spread is never read as growth
        grown = []
        for k in GATED_SERVER:
            low_new = min(r.get(k, 0.0) for r in new[name])
            high_base = max(r.get(k, 0.0) for r in base[name])
            g = grown_from(high_base, low_new)  # 0 -> some: preemptions where there were none
            if g is not None and 100 * g > gate_pct:
                grown.append((k, g, high_base, low_new))
        spread = [side for side, rounds in (("baseline", base[name]), ("candidate", new[name]))
                  if len({tuple(r.get(k) for k in GATED_SERVER) for r in rounds}) > 1]
        if spread:
            out.notes.append(f"`{name}`: the {' and '.join(spread)}'s server counts differ between its rounds (its "
                             "scheduler split the batch differently): gated on their ranges")
        if grown:
            out.reasons.append(f"server work of `{name}` grew per batch (--gate-work {gate_pct:g}%, every candidate "
                               "round against every baseline round): "
                               + "; ".join(f"{k} {100 * g:+.1f}%" if math.isfinite(g) else f"{k} {b:g} -> {n:g}"
                                           for k, g, b, n in grown))
