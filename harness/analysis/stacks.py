"""What two stacks can be compared on: the figures both measure alike, and the configuration each ran.

A release check's sides may run different stacks (NxDI in-process, transformers, a vLLM server): a
migration from NxDI to vLLM Neuron is the check AWS asks every Trn2 team to make. A figure is gated
only where both sides measure the same thing:

- same stack, not served: the engine's own steps, as a single-stack check always gated them (CTE and
  TKG p50 of their own timed rounds, else a benchmark's median round);
- a served side on either end: the static batch of the shape sent at once (``test_e2e``) and read as a
  client reads it, under vLLM's serving names (``harness.analysis.figures.static_batch_serving_figures``):
  its end-to-end latency is gated; time to first token, time per output token and throughput reported.

Figures whose meaning is the stack's own (CTE / TKG sub-steps, the roofline fraction) keep their names,
and across stacks are shown per side, never paired.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.analysis.crossstack import ABSENT, cross_stack_section, same_stack_flags

SERVED = "openai"
# The static batch's end-to-end latency: under a busy neighbour core vLLM's CPU frontend streamed a whole
# batch in one burst (TTFT ~ E2EL ~1 s, TPOT 0.05 ms in CI's A/A check), so TTFT and TPOT are reported and
# the figure both stacks measure whole is gated (sigma ~0.08 of a pair's log ratio in that same check).
SERVED_GATED = ("median_e2el_ms",)
# figures whose definition is a stack's own: paired only between sides of the same stack
STACK_SPECIFIC = ("cte_ms_", "tkg_ms_", "tkg_roofline_fraction", "hbm_")

# How each stack measures the compared figures (shown in the verdict).
MEASURED_BY = {
    "median_ttft_ms": {"neuron": "the CTE sub-model's forward (incl. the first token) inside generate(), in-process",
                    "hf": "the prefill forward (incl. the first token) inside generate(), in-process",
                    "openai": "request sent to first streamed token, on the client's clock (HTTP included)"},
    "median_tpot_ms": {"neuron": "(E2E - TTFT) / (new tokens - 1) of each generate()",
                    "hf": "(E2E - TTFT) / (new tokens - 1) of each generate()",
                    "openai": "(E2EL - TTFT) / (new tokens - 1) of each request, client clock"},
    "median_e2el_ms": {"neuron": "one generate() of the batch", "hf": "one generate() of the batch",
                    "openai": "the batch's concurrent requests, first sent to last token"},
}

@dataclass(frozen=True)
class StackPair:
    """The two sides' backends (neuron, hf, openai)."""

    baseline: str
    candidate: str

    @property
    def served(self) -> bool:
        return SERVED in (self.baseline, self.candidate)

    @property
    def mixed(self) -> bool:
        return self.baseline != self.candidate

    def pairable(self, metric: str) -> bool:
        """Whether both sides' ``metric`` means the same thing."""
        return not self.mixed or not metric.startswith(STACK_SPECIFIC)

    def gated(self, figures: Mapping[str, Any], single_stack: Sequence[str]) -> list[str]:
        """The figures of one benchmark this pair gates: the serving pair where a side is served, else the
        single-stack rule's (``single_stack``, computed by the caller)."""
        if not self.served:
            return list(single_stack)
        return [m for m in SERVED_GATED if isinstance(figures.get(m), (int, float))]

    def comparable(self, changed: list[dict[str, str]], improved: list[str], base: Mapping[str, Any],
                   new: Mapping[str, Any]) -> tuple[list[dict[str, str]], list[str], list[dict[str, str]]]:
        """Outcome changes split by what two stacks can compare: across stacks, a test that ran (passed)
        on one side and was skipped on the other is one that exists on one stack only (the NxDI CPU tier
        on a served side, a prefill timing on a server), listed as not comparable, never an outcome change;
        a failure, an error or a missing test still is. One stack: nothing is set aside (a new skip there
        is a release that stopped running a test). Returns (changed, improved, not comparable)."""
        if not self.mixed:
            return changed, improved, []
        across = [{**c, "stack": self.candidate} for c in changed if c["candidate"] == "skipped"]
        across += [{"test": t, "baseline": base[t].outcome, "candidate": "passed", "message": base[t].message,
                    "stack": self.baseline} for t in improved if base[t].outcome == "skipped"]
        return ([c for c in changed if c["candidate"] != "skipped"],
                [t for t in improved if base[t].outcome != "skipped"], sorted(across, key=lambda c: c["test"]))

    def describe(self) -> list[str]:
        """The verdict's "Figures across stacks" section."""
        if not self.served and not self.mixed:
            return []
        lines = ["### Figures across stacks", "",
                 f"Baseline `{self.baseline}`, candidate `{self.candidate}`: "
                 + ("gated on the serving figures of the shape's static batch (`test_e2e`), which both measure:"
                    if self.served else "every figure both stacks define alike is paired:"), "",
                 f"| figure | gated | {self.baseline} (baseline) | {self.candidate} (candidate) |", "|---|---|---|---|"]
        for metric, how in MEASURED_BY.items():
            gated = "yes" if metric in SERVED_GATED and self.served else "reported"
            lines.append(f"| {metric} | {gated} | {how.get(self.baseline, '-')} | {how.get(self.candidate, '-')} |")
        if self.mixed:
            lines += ["", "Stack-specific figures (" + ", ".join(f"`{p}*`" for p in STACK_SPECIFIC)
                      + ") keep their names and are listed per side, never paired."]
        return lines + [""]


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``a.b.c`` keys (lists and scalars are leaves)."""
    if not isinstance(config, Mapping):
        return {prefix: config} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


# what names one server instance, not how it is configured
VOLATILE = ("args.port", "args.host", "endpoint")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def config_diff(base: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every flattened field whose value differs (one side lacking it included), sorted by field."""
    a, b = flatten(base), flatten(new)
    return [(k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in sorted(set(a) | set(b))
            if k not in VOLATILE and not _same(a.get(k, ABSENT), b.get(k, ABSENT))]


def drift(base: Mapping[str, Any] | None, new: Mapping[str, Any] | None, stacks: StackPair,
          limit: int = 60) -> tuple[dict[str, Any], list[str]]:
    """The verdict's "Configuration drift": every differing field on one stack, the mapped fields across
    two (the rest of each is its stack's own). Returns (verdict.json part, markdown lines)."""
    if not base or not new:
        missing = [name for name, c in (("baseline", base), ("candidate", new)) if not c]
        return ({"compared": False, "missing": missing},
                ["### Configuration drift", "", f"Not compared: no engine configuration recorded for the "
                 f"{' and '.join(missing)}.", ""])
    lines = ["### Configuration drift", ""]
    if stacks.mixed and {stacks.baseline, stacks.candidate} == {"neuron", SERVED}:
        nxdi, vllm = (base, new) if stacks.baseline == "neuron" else (new, base)
        found, section = cross_stack_section(nxdi, vllm)
        return found, lines + section
    diff = config_diff(base, new)
    flagged = [] if stacks.mixed else same_stack_flags(base, new, stacks.baseline)
    if flagged:
        lines += [f"**{len(flagged)} setting(s) that change what is computed differ**: " + "; ".join(flagged) + ".", ""]
    lines.append(f"{len(diff)} field(s) differ (defaults included; {', '.join(VOLATILE)} are each instance's own)"
                 + (":" if diff else "."))
    if diff:
        lines += ["", "| field | baseline | candidate |", "|---|---|---|"]
        lines += [f"| `{k}` | {str(a)[:80]} | {str(b)[:80]} |" for k, a, b in diff[:limit]]
        if len(diff) > limit:
            lines.append(f"| ... {len(diff) - limit} more in verdict.json | | |")
    return {"compared": True, "differences": [list(d) for d in diff], "flagged": flagged}, lines + [""]
