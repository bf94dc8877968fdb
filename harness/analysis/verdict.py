"""One verdict on a release: PASS, FAIL or INCONCLUSIVE (``harness.core.verdicts``), reasons first,
from what each side's runs left behind.

A release check runs the same suite in two environments (baseline, candidate) and its perf job in
rounds, each a fresh process, A and B interleaved. The verdict fails on, in this order:

1. a candidate that cannot run: its session stopped at start (an NxDI that does not import) or its
   engines could not be built (compile, load, the smoke generate), with NxDI's own error line;
2. tests whose outcome changed: passed on the baseline, and failed, errored, was skipped or is
   missing on the candidate (a new skip counts; across stacks, a test that one stack only runs, passed
   on one side and skipped on the other, is listed as not comparable instead: ``StackPair.comparable``);
3. a benchmark of the baseline that the candidate did not produce;
4. a gated figure whose change lies beyond its tolerance with confidence: the interval comes from
   the spread between the paired rounds (``harness.core.stats.paired_ratio_ci``), never from the
   samples inside one process, and a change below the figure's absolute floor never counts.

With no reason to fail, a gated figure still open at the cap makes the verdict INCONCLUSIVE, naming each
such figure, its pairs, its interval and what would decide it; a passed figure likely beyond its
tolerance is a warning (``harness.analysis.verdict_notes``), or with ``fail_on_likely`` a reason.

The figures themselves, round ``k`` of one side against round ``k`` of the other, are
``harness.analysis.pairing``'s; here they are decided (the sequential rule, Holm across them) and
the verdict rendered.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.contract import ContractResult
from harness.analysis.contract_legs import fp32_leg_ran, leg_records, legs_markdown
from harness.analysis.contract_notes import leg_caveat
from harness.analysis.pairing import FigureChange, Pairing, SideReport, fmt_value, pair_rounds
from harness.analysis.results import CaseOutcome
from harness.analysis.stacks import StackPair, drift
from harness.analysis.verdict_notes import Likely, OpenFigure, likely_worse, open_figures
from harness.core import verdicts
from harness.core.sequential import FAIL, OPEN, UNRESOLVED, Design
from harness.core.sequential import decide as sequential_decide
from harness.core.stats import CONFIDENCE

# 2: rounds paired by index, each pair's figures, the sequential design; 3: INCONCLUSIVE, warnings
VERDICT_SCHEMA = 3
DEFAULT_TOLERANCE = 0.05


@dataclass
class Verdict:
    reasons: list[str]  # what fails the check
    figures: list[FigureChange]
    outcome_changes: list[dict[str, str]]
    sides: dict[str, dict[str, Any]]
    rounds: int
    confidence: float
    tolerance: float
    mode: str
    improvements: list[str] = field(default_factory=list)
    wall_s: float | None = None
    design: Design = field(default_factory=Design)
    left_out: list[str] = field(default_factory=list)  # baseline rounds / benchmarks missing: pairs left out
    not_measured: list[str] = field(default_factory=list)
    stacks: StackPair | None = None
    contract: dict[str, ContractResult] = field(default_factory=dict)  # "model/shape" -> the output contract
    config_drift: dict[str, Any] = field(default_factory=dict)
    config_lines: list[str] = field(default_factory=list)
    not_comparable: list[dict[str, str]] = field(default_factory=list)  # tests one stack only runs
    open: list[OpenFigure] = field(default_factory=list)  # gated figures still open at the cap
    likely: list[Likely] = field(default_factory=list)  # passed figures likely beyond their tolerance
    fail_on_likely: bool = False  # those are reasons (--fail-on-likely), not warnings

    @property
    def word(self) -> str:
        return verdicts.FAIL if self.reasons else verdicts.INCONCLUSIVE if self.open else verdicts.PASS

    @property
    def passed(self) -> bool:
        return self.word == verdicts.PASS

    @property
    def warnings(self) -> list[str]:
        """Likely slowdowns the verdict did not fail on (with ``fail_on_likely`` they are reasons)."""
        return [] if self.fail_on_likely else [w.describe() for w in self.likely]

    @property
    def legs(self) -> list[str]:
        """What an output contract judged in a leg other than fp32 cannot exclude (the candidate's dtype is the
        leg: ``harness.analysis.contract_notes``), said beside the verdict's word."""
        dtypes = {s.dtype for c in self.contract.values() for s in c.sides if s.who == "candidate"}
        if fp32_leg_ran(self.contract):  # the fp32 leg ran beside it (harness.analysis.contract_legs)
            return []
        return [caveat for d in sorted(dtypes) if (caveat := leg_caveat(d))]

    def summary(self) -> str:
        """The verdict in one line: the word and why (the first reason, the open figures, the warnings)."""
        if self.reasons:
            return f"FAIL: {self.reasons[0]}" + (f" (and {len(self.reasons) - 1} more)" if len(self.reasons) > 1
                                                   else "")
        warned = f"; {len(self.warnings)} warning(s): " + "; ".join(self.warnings) if self.warnings else ""
        if self.open:
            return (f"INCONCLUSIVE: {len(self.open)} gated figure(s) still open at {self.design.max_pairs} pairs: "
                    + ", ".join(o.key for o in self.open) + warned)
        return "PASS" + (f" ({'; '.join(self.legs)})" if self.legs else "") + warned

    def to_dict(self) -> dict[str, Any]:
        d = self.design
        return {"schema": VERDICT_SCHEMA, "verdict": self.word, "reasons": self.reasons, "warnings": self.warnings,
                "contract_legs": self.legs, "output_contract_legs": leg_records(self.contract),
                "inconclusive": [o.to_dict() for o in self.open], "fail_on_likely": self.fail_on_likely,
                "mode": self.mode,
                "rounds": self.rounds, "confidence": self.confidence, "tolerance": self.tolerance,
                "design": {"min_pairs": d.min_pairs, "max_pairs": d.max_pairs, "step": d.step, "looks": list(d.looks),
                           "alpha": d.alpha, "beta": d.beta, "resolve": d.resolve, "legs": d.legs,
                           "rule": d.describe()},
                "wall_s": self.wall_s, "sides": self.sides, "outcome_changes": self.outcome_changes,
                "improvements": self.improvements, "not_comparable": self.not_comparable, "left_out": self.left_out, "not_measured": self.not_measured,
                "stacks": self.stacks.__dict__ if self.stacks else None,
                "contract": {k: c.to_dict() for k, c in self.contract.items()}, "config_drift": self.config_drift,
                "figures": [f.to_dict() for f in self.figures]}

    def markdown(self) -> str:
        lines = [f"**Warning: {w}**" for w in self.warnings] + ([""] if self.warnings else [])
        lines += [f"## Release check: {self.word}", ""] + [f"Output contract: {leg}." for leg in self.legs]
        lines += ([""] if self.legs else []) + legs_markdown(leg_records(self.contract))
        base, cand = self.sides.get("baseline", {}), self.sides.get("candidate", {})
        lines += ["| | baseline | candidate |", "|---|---|---|"]
        for key in sorted(set(base.get("versions", {})) | set(cand.get("versions", {}))):
            b, c = base.get("versions", {}).get(key, "-"), cand.get("versions", {}).get(key, "-")
            if not isinstance(b, (dict, list)) and not isinstance(c, (dict, list)):  # neuron_ls, pip_freeze: JSON only
                lines.append(f"| {key} | {b} | {c} |")
        lines += ["", f"Mode: {self.mode}; perf rounds (fresh processes, A B / B A): {self.rounds} run, "
                      f"{base.get('rounds', 0)} with baseline results, {cand.get('rounds', 0)} with candidate results; "
                      f"tolerance {100 * self.tolerance:g}%; {self.design.describe()}.", ""]
        if self.reasons:
            lines += ["### Reasons", ""] + [f"{i}. {r}" for i, r in enumerate(self.reasons, 1)] + [""]
        if self.open:
            lines += [f"### Still open at --max-rounds {self.design.max_pairs} (INCONCLUSIVE: neither a pass nor a "
                      "regression)", ""] + [f"{i}. {o.describe()}" for i, o in enumerate(self.open, 1)] + [""]
        for key, contract in self.contract.items():
            lines += [f"<!-- output contract of {key} -->"] + contract.markdown()
        lines += self.config_lines
        if self.stacks is not None:
            lines += self.stacks.describe()
        if self.left_out:
            lines += ["### Pairs left out (the baseline left no result)", ""] + [f"- {n}" for n in self.left_out] + [""]
        if self.outcome_changes:
            lines += ["### Tests whose outcome changed", "", "| test | baseline | candidate | message |",
                      "|---|---|---|---|"]
            lines += [f"| `{c['test']}` | {c['baseline']} | {c['candidate']} | {c['message'][:160]} |"
                      for c in self.outcome_changes[:50]]
            if len(self.outcome_changes) > 50:
                lines.append(f"| ... {len(self.outcome_changes) - 50} more in verdict.json | | | |")
            lines.append("")
        if self.not_comparable:
            lines += [f"### Not comparable across stacks ({len(self.not_comparable)} tests one stack only runs)", "",
                      "| test | baseline | candidate | why |", "|---|---|---|---|"]
            lines += [f"| `{c['test']}` | {c['baseline']} | {c['candidate']} | {c['message'][:160]} |"
                      for c in self.not_comparable[:50]]
            lines.append("")
        gated = [f for f in self.figures if f.gated]
        reported = [f for f in self.figures if not f.gated]
        if gated:
            lines += ["### Gated figures", ""] + _figure_table(gated, {w.key for w in self.likely}) + [""]
        if self.not_measured:
            lines += ["### Not measured", ""] + [f"- {n}" for n in self.not_measured] + [""]
        if reported:
            lines += ["<details><summary>Reported, not gated (derived from the same samples, or timed by the "
                      f"engine): {len(reported)} figures</summary>", ""]
            lines += _figure_table(reported) + ["", "</details>", ""]
        lines.append("Each pair's figures are in verdict.json (`figures[].pairs`).")
        return "\n".join(lines)


def _gate_cell(f: FigureChange, likely: Collection[str] = ()) -> str:
    d = f.decision
    if not f.gated or d is None:
        return "reported"
    if d.state == FAIL:
        return f"**FAIL** at {d.at_pairs} pairs" if d.at_pairs else "**FAIL**"
    if d.state == UNRESOLVED:
        return f"**open** after {len(f.base)} pairs (inconclusive)"
    cell = (f"pass at {d.at_pairs} pairs (tol {100 * f.tolerance:g}%)" if d.at_pairs else
            f"pass (tol {100 * f.tolerance:g}%)")
    return cell + (", **likely slower**" if f"{f.benchmark} {f.metric}" in likely else "")


def _figure_table(figures: Sequence[FigureChange], likely: Collection[str] = ()) -> list[str]:
    lines = ["| benchmark | metric | baseline | candidate | change | interval | pairs | gate |",
             "|---|---|---|---|---|---|---|---|"]
    for f in figures:
        bounds = f.bounds
        interval = f"{100 * bounds[0]:+.1f}% .. {100 * bounds[1]:+.1f}%" if bounds else "-"
        change = f"{100 * f.change:+.1f}%" if f.change is not None else "-"
        lines.append(f"| `{f.benchmark}` | {f.metric} | {fmt_value(median(f.base))} | {fmt_value(median(f.new))} | {change} | "
                     f"{interval} | {len(f.base)} | {_gate_cell(f, likely)} |")
    return lines


def cannot_run(side: SideReport) -> list[str]:
    """Why a side could not run at all: its session errors, then the first engine error of its
    tests (an NxDI build that cannot compile, load or generate fails every engine test alike)."""
    reasons = list(side.session_errors)
    for test, outcome in side.outcomes.items():
        if test.endswith(" (perf)"):
            continue  # one perf round's failure is that round's (a lost pair, or a reason), not the side's
        if outcome.outcome in ("error", "failed") and "BackendError" in outcome.message:
            reasons.append(outcome.message.split("BackendError: ", 1)[-1].rstrip('"') + f" (first seen in {test})")
            break
    return reasons


def outcome_changes(base: Mapping[str, CaseOutcome],
                    new: Mapping[str, CaseOutcome]) -> tuple[list[dict[str, str]], list[str]]:
    """Tests that passed on the baseline and did not on the candidate (missing counts), and the
    tests that newly pass (reported, never failing)."""
    changed, improved = [], []
    for test in sorted(base):
        b, n = base[test], new.get(test)
        if b.outcome == "passed" and (n is None or n.outcome != "passed"):
            changed.append({"test": test, "baseline": "passed", "candidate": n.outcome if n else "missing",
                            "message": n.message if n else "not collected on the candidate"})
        elif b.outcome != "passed" and n is not None and n.outcome == "passed":
            improved.append(test)
    return changed, improved


def judge(baseline: SideReport, candidate: SideReport, tolerances: Tolerances, confidence: float, design: Design,
          final: bool) -> Pairing:
    """The pairing, with the sequential rule's decision on every gated figure (Holm across them)."""
    pairing = pair_rounds(baseline, candidate, tolerances, confidence)
    sequential = [i for i, f in enumerate(pairing.figures) if f.gated and f.decision is None]
    done = max(set(baseline.rounds_run()) | set(candidate.rounds_run()), default=0)
    decisions = sequential_decide([pairing.figures[i].series() for i in sequential], design, done, final)
    for i, d in zip(sequential, decisions):
        pairing.figures[i] = replace(pairing.figures[i], decision=d)
    return pairing


def still_open(baseline: SideReport, candidate: SideReport, tolerances: Tolerances, design: Design,
               confidence: float = CONFIDENCE) -> tuple[list[str], list[str]]:
    """The gated figures no look has decided yet (the check adds a pair while any is open), and the
    reasons that already fail the check (the candidate did not produce a round: more pairs cannot
    change the verdict)."""
    pairing = judge(baseline, candidate, tolerances, confidence, design, final=False)
    return [f"{f.benchmark} {f.metric}" for f in pairing.figures if f.gated and f.state == OPEN], pairing.reasons


def decide(baseline: SideReport, candidate: SideReport, tolerances: Tolerances | None = None,
           confidence: float = CONFIDENCE, mode: str = "", design: Design | None = None,
           contract: Mapping[str, ContractResult] | None = None, fail_on_likely: bool = False) -> Verdict:
    """``contract``: the output contract per "model/shape" (``harness.analysis.contract``), its reasons
    failing the check; the configuration drift is read from each side's ``config``. ``fail_on_likely``:
    a passed figure likely beyond its tolerance fails the check (else it is a warning)."""
    tolerances = tolerances or Tolerances(default=DEFAULT_TOLERANCE)
    if design is None:  # one look at the rounds run (a check that ran its own design passes it)
        n = max(3, len(set(baseline.rounds_run()) | set(candidate.rounds_run())))
        design = Design(min_pairs=n, max_pairs=n)
    reasons = [f"the candidate cannot run: {r}" for r in cannot_run(candidate)]
    contract = dict(contract or {})
    reasons += [f"output contract ({key}): {r}" for key, c in contract.items() for r in c.reasons]
    stacks = StackPair(baseline.backend, candidate.backend)
    drift_json, drift_lines = drift(baseline.config, candidate.config, stacks)
    changed, improved, across = stacks.comparable(*outcome_changes(baseline.outcomes, candidate.outcomes),
                                                  baseline.outcomes, candidate.outcomes)
    if changed:
        shown = ", ".join(f"{c['test']} ({c['candidate']})" for c in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        reasons.append(f"{len(changed)} test(s) passed on the baseline and not on the candidate: {shown}{more}")
    if baseline.rounds and not candidate.rounds:
        reasons.append(f"the candidate's perf job produced results in none of the {len(baseline.rounds)} rounds the "
                       "baseline's did")
    pairing = judge(baseline, candidate, tolerances, confidence, design, final=True)
    if candidate.rounds:
        reasons += pairing.reasons
    reasons += [f.describe() for f in pairing.figures if f.regressed]
    likely = likely_worse(pairing.figures, design)
    if fail_on_likely:
        reasons += [f"{w.describe()} (--fail-on-likely)" for w in likely]
    sides = {side.name: {"backend": side.backend, "dtype": side.dtype, "versions": side.versions,
                         "tests": len(side.outcomes),
                         "rounds": len(side.rounds),
                         "rounds_run": side.rounds_run(), "round_errors": {str(k): v for k, v in
                                                                           side.round_errors.items()},
                         "session_errors": side.session_errors, "config": side.config}
             for side in (baseline, candidate)}
    ran = sorted(set(baseline.rounds_run()) | set(candidate.rounds_run()))
    return Verdict(reasons, pairing.figures, changed, sides, len(ran), confidence, tolerances.default,
                   mode, improved, design=design, left_out=pairing.left_out, not_measured=pairing.not_measured,
                   stacks=stacks, contract=contract, config_drift=drift_json, config_lines=drift_lines,
                   not_comparable=across, open=open_figures(pairing.figures, design), likely=likely,
                   fail_on_likely=fail_on_likely)


def merge(legs: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> dict[str, Any]:
    """Several legs' ``verdict.json`` (one per model, say) as one: FAIL if any leg failed, else
    INCONCLUSIVE if any leg was, else PASS; each reason, open figure and warning prefixed with its leg."""
    def each(key: str) -> list[str]:
        return [f"{label}: {x.get('text', '') if isinstance(x, Mapping) else x}" for label, v in zip(labels, legs)
                for x in v.get(key) or []]

    return {"schema": VERDICT_SCHEMA, "verdict": verdicts.worst(v.get("verdict") for v in legs),
            "reasons": each("reasons"), "inconclusive": each("inconclusive"), "warnings": each("warnings"),
            "legs": {label: {"verdict": v.get("verdict"), "sides": v.get("sides"), "rounds": v.get("rounds")}
                     for label, v in zip(labels, legs)}}


def merged_markdown(merged: Mapping[str, Any]) -> str:
    warnings = merged.get("warnings") or []
    lines = [f"**Warning: {w}**" for w in warnings] + ([""] if warnings else [])
    lines += [f"## Release check (all legs): {merged['verdict']}", "", "| leg | verdict |", "|---|---|"]
    lines += [f"| {leg} | {v['verdict']} |" for leg, v in merged["legs"].items()]
    if merged["reasons"]:
        lines += ["", "### Reasons", ""] + [f"{i}. {r}" for i, r in enumerate(merged["reasons"], 1)]
    if merged.get("inconclusive"):
        lines += ["", "### Still open (INCONCLUSIVE: neither a pass nor a regression)", ""]
        lines += [f"{i}. {r}" for i, r in enumerate(merged["inconclusive"], 1)]
    return "\n".join(lines) + "\n"
