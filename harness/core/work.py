"""Exact work counts of one engine step, and how two sides' differ: the host work a timing cannot see apart
from noise (issue 49). A Python call, an aten op and a byte a step allocates are counted, not timed, so the
same code gives the same counts in every process (measured: 2,062 calls and 432 ops per three hf decode steps
in each of three processes), on a quiet machine or a loaded one. What grew between two releases is then named
exactly: "+56 Python calls/step in neuronx_distributed_inference.utils.hf_adapter".

Pure: the counting itself is ``harness.backends.work_counter`` (it needs torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TOP = 40  # functions and ops kept per step in a record (the rest summed under "(other)")


@dataclass(frozen=True)
class WorkCount:
    """Counts per step, averaged over ``steps`` counted steps."""

    steps: int
    python_calls: float
    calls_by_function: Mapping[str, float] = field(default_factory=dict)
    aten_ops: float = 0.0
    ops_by_name: Mapping[str, float] = field(default_factory=dict)
    bytes_allocated: float = 0.0
    instructions: float | None = None
    instructions_why: str = ""  # why there is no instruction count, where there is none

    def to_dict(self, top: int = TOP) -> dict[str, Any]:
        return {"steps": self.steps, "python_calls": self.python_calls,
                "calls_by_function": kept(self.calls_by_function, top), "aten_ops": self.aten_ops,
                "ops_by_name": kept(self.ops_by_name, top), "bytes_allocated": self.bytes_allocated,
                "instructions": self.instructions, "instructions_why": self.instructions_why}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WorkCount":
        return cls(int(d["steps"]), float(d["python_calls"]), dict(d.get("calls_by_function") or {}),
                   float(d.get("aten_ops") or 0.0), dict(d.get("ops_by_name") or {}),
                   float(d.get("bytes_allocated") or 0.0), d.get("instructions"), d.get("instructions_why") or "")


def kept(counts: Mapping[str, float], top: int) -> dict[str, float]:
    """The ``top`` largest counts, the rest summed under ``(other)``, so a record stays small and still adds up."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = dict(ranked[:top])
    rest = sum(v for _, v in ranked[top:])
    if rest:
        out["(other)"] = out.get("(other)", 0.0) + rest
    return out


def per_step(totals: Mapping[str, int], steps: int) -> dict[str, float]:
    return {k: v / steps for k, v in totals.items()}


def growth(base: float, new: float) -> float | None:
    """new / base - 1, or None where the base is zero."""
    return new / base - 1.0 if base else None


def changed(base: Mapping[str, float], new: Mapping[str, float], limit: int = 5) -> list[tuple[str, float]]:
    """The entries whose count moved most (new - base, largest first), at most ``limit``."""
    deltas = [(k, new.get(k, 0.0) - base.get(k, 0.0)) for k in base.keys() | new.keys()]
    return sorted([d for d in deltas if d[1]], key=lambda d: (-abs(d[1]), d[0]))[:limit]


def describe_change(base: WorkCount, new: WorkCount) -> list[str]:
    """Where the work per step moved, in words: each count that moved, and the modules and ops that moved most."""
    lines = []
    for label, b, n in (("Python calls", base.python_calls, new.python_calls), ("aten ops", base.aten_ops, new.aten_ops),
                        ("bytes allocated", base.bytes_allocated, new.bytes_allocated)):
        if b != n:
            g = growth(b, n)
            lines.append(f"{n - b:+.4g} {label}/step ({b:.4g} -> {n:.4g}" + (f", {100 * g:+.1f}%)" if g is not None
                                                                               else ")"))
    for what, moved in (("Python calls/step in", changed(base.calls_by_function, new.calls_by_function)),
                        ("calls/step of aten", changed(base.ops_by_name, new.ops_by_name))):
        lines += [f"{d:+.4g} {what} {name}" for name, d in moved]
    return lines


def unstable(counts: list[WorkCount]) -> bool:
    """Whether one side's counts differ between its rounds (fresh processes): then they are not exact here."""
    keys = {(c.python_calls, c.aten_ops) for c in counts}
    return len(keys) > 1
