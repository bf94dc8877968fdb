"""The output contract judged across stacks: each side against the fp32 reference, and the two sides
against each other (``harness.workloads.contract`` writes what each side returned).

Held to the reference, per the side's dtype (``fixtures/contract/tolerances.json``): every
teacher-forced log-probability within ``max_abs`` nats of the reference's, and the same top-1 token
wherever the reference's top-1 / top-2 margin exceeds ``2 * max_abs`` (below that a bf16 rounding may
flip a near-tie, and no fixed tolerance on logits can say otherwise). Between the sides: their greedy
tokens, and at the first position they differ, each side's top-2 margin there (both were conditioned
on the same prefix); a divergence where either margin exceeds the looser side's ``2 * max_abs`` is a
real difference in what the stacks compute, not a tie broken two ways.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import pstdev
from typing import Any

from harness.backends.base import ScoredToken
from harness.core.paths import REPO_ROOT

TOLERANCES_FILE = REPO_ROOT / "fixtures" / "contract" / "tolerances.json"
SCORED_FROM = 2  # the first position a contract scores (harness.workloads.contract.SCORED_FROM, asserted there)


class ContractError(ValueError):
    """A contract file or tolerances file that cannot be judged (named, with what is accepted)."""


def load_tolerances(path: Path = TOLERANCES_FILE) -> dict[str, float]:
    """``max_abs`` per dtype; a dtype without a positive finite ``max_abs`` is refused by name."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ContractError(f"{path}: cannot read the contract tolerances ({exc})") from None
    out = {}
    for dtype, entry in raw.items():
        if dtype.startswith("_"):
            continue
        value = entry.get("max_abs") if isinstance(entry, dict) else None
        unknown = sorted(set(entry) - {"max_abs"}) if isinstance(entry, dict) else []
        if unknown or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ContractError(f"{path}: {dtype!r} must be {{\"max_abs\": <positive nats>}}, got {entry!r}")
        out[dtype] = float(value)
    if "fp32" not in out:
        raise ContractError(f"{path}: needs at least an 'fp32' entry")
    return out


def tolerance_of(dtype: str, tolerances: Mapping[str, float]) -> float:
    if dtype not in tolerances:
        raise ContractError(f"no contract tolerance for dtype {dtype!r}; known: {', '.join(sorted(tolerances))} "
                            f"(add it to {TOLERANCES_FILE})")
    return tolerances[dtype]


def _rows(prompt: Mapping[str, Any], key: str) -> list[ScoredToken]:
    return [ScoredToken.from_list(r) for r in prompt[key]]


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@dataclass(frozen=True)
class Agreement:
    """One side's scored positions against another's (or the reference's), over the same sequence."""

    positions: int
    max_abs: float
    mean_abs: float
    sigma_ratio: float  # std of the differences / std of the reference's log-probabilities
    top1_checked: int  # positions whose reference margin exceeds the near-tie bound
    top1_agree: int
    worst: str  # where max_abs was found
    first_top1_break: str | None

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def agreement(side: Mapping[str, Any], ref: Mapping[str, Any], tie: float) -> Agreement:
    """``side``'s ``scored`` rows against ``ref``'s, prompt by prompt (both scored the same sequence)."""
    diffs, ref_values, worst, checked, agree, first_break = [], [], (0.0, ""), 0, 0, None
    by_name = {p["name"]: p for p in side["prompts"]}
    for rp in ref["prompts"]:
        sp = by_name.get(rp["name"])
        if sp is None or sp["scored_greedy"] != rp["scored_greedy"] or sp["prompt_ids"] != rp["prompt_ids"]:
            raise ContractError(f"prompt {rp['name']!r}: the two contracts scored different sequences (a contract "
                                "written without this reference)")
        for j, (s, r) in enumerate(zip(_rows(sp, "scored"), _rows(rp, "scored"))):
            d = abs(s.logprob - r.logprob)
            diffs.append(s.logprob - r.logprob)
            ref_values.append(r.logprob)
            if d > worst[0]:
                worst = (d, f"{rp['name']} position {j + SCORED_FROM}")
            if r.margin > tie:
                checked += 1
                if s.top[0][0] == r.top[0][0]:
                    agree += 1
                elif first_break is None:
                    first_break = (f"{rp['name']} position {j + SCORED_FROM}: top-1 {s.top[0][0]} where the reference has "
                                   f"{r.top[0][0]} (reference margin {r.margin:.3g} nats)")
    spread = pstdev(ref_values) if len(ref_values) > 1 else 0.0
    return Agreement(len(diffs), worst[0], sum(map(abs, diffs)) / max(1, len(diffs)),
                     pstdev(diffs) / spread if spread > 0 and len(diffs) > 1 else 0.0, checked, agree, worst[1],
                     first_break)


@dataclass(frozen=True)
class Divergence:
    """The first position where the two sides' greedy tokens differ, on one prompt."""

    prompt: str
    position: int  # index among the generated tokens
    baseline: tuple[tuple[int, float], ...]  # each side's top-2 there (same prefix on both)
    candidate: tuple[tuple[int, float], ...]

    @property
    def margins(self) -> tuple[float, float]:
        return tuple(ScoredToken(t[0][0], t[0][1], t).margin for t in (self.baseline, self.candidate))  # type: ignore

    def describe(self) -> str:
        b, c = self.baseline, self.candidate
        mb, mc = self.margins
        return (f"{self.prompt}: first divergent token at generated position {self.position}: baseline {b[0][0]} "
                f"(top-2 margin {mb:.3g} nats over {b[1][0]}), candidate {c[0][0]} (margin {mc:.3g} over {c[1][0]})")


def divergences(base: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[Divergence], int]:
    """Per prompt, the first divergent greedy token (if any), and how many prompts matched exactly."""
    out, same = [], 0
    by_name = {p["name"]: p for p in new["prompts"]}
    for bp in base["prompts"]:
        np_ = by_name.get(bp["name"])
        if np_ is None:
            continue
        k = shared_prefix(bp["greedy"], np_["greedy"])
        if k == len(bp["greedy"]) == len(np_["greedy"]):
            same += 1
            continue
        out.append(Divergence(bp["name"], k, _rows(bp, "own")[k].top, _rows(np_, "own")[k].top))
    return out, same


@dataclass
class ContractResult:
    """The contract's verdict lines: ``reasons`` fail the check (the candidate broke it), ``notes`` are
    shown (the baseline off the reference, near-tie divergences)."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)  # per side (and between them)
    divergences: list[Divergence] = field(default_factory=list)
    identical: int = 0
    prompts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"reasons": self.reasons, "notes": self.notes, "agreement": self.table,
                "identical_prompts": self.identical, "prompts": self.prompts,
                "divergences": [{"prompt": d.prompt, "position": d.position, "baseline_top2": d.baseline,
                                 "candidate_top2": d.candidate, "margins": d.margins} for d in self.divergences]}

    def markdown(self) -> list[str]:
        if not self.table:  # nothing compared: why (not measured, a side wrote none, different weights)
            return ["### Output contract", ""] + [f"- {n}" for n in self.reasons + self.notes] + [""]
        lines = ["### Output contract (each side against the fp32 reference, and against each other)", "",
                 f"Greedy tokens identical on {self.identical} of {self.prompts} DNA prompts.", "",
                 "| comparison | dtype | positions | max abs Δ log-prob | mean abs Δ | σ ratio | top-1 agreement | "
                 "within | where |", "|---|---|---|---|---|---|---|---|---|"]
        for row in self.table:
            a = row["agreement"]
            lines.append(f"| {row['what']} | {row['dtype']} | {a['positions']} | {a['max_abs']:.3g} | "
                         f"{a['mean_abs']:.3g} | {a['sigma_ratio']:.3g} | {a['top1_agree']}/{a['top1_checked']} | "
                         f"{row['bound']} | {a['worst'] or '-'} |")
        lines += [""] + [f"- {d.describe()}" for d in self.divergences] + [f"- {n}" for n in self.notes]
        return lines + [""]


def consistency_breaks(contract: Mapping[str, Any], max_abs: float) -> list[str]:
    """Where a side contradicts itself: a greedy token that is not its own teacher-forced top-1 (beyond a
    near-tie of ``2 * max_abs``), or the same position scored two ways (prompt + continuation, and from
    the first token) differing by more than ``max_abs``: a KV cache, a prefill path or a sampler that
    disagrees with the model's own forward pass."""
    breaks: list[str] = []
    for p in contract["prompts"]:
        own = [ScoredToken.from_list(r) for r in p["own"]]
        for j, (token, row) in enumerate(zip(p["greedy"], own)):
            if row.top[0][0] != token and row.logprob < row.top[0][1] - 2 * max_abs:
                breaks.append(f"{p['name']}: greedy token {j} is {token}, but teacher-forced its top-1 is "
                              f"{row.top[0][0]} by {row.top[0][1] - row.logprob:.3g} nats")
        if p["scored_greedy"] == p["greedy"]:
            offset = len(p["prompt_ids"]) - SCORED_FROM
            along = [ScoredToken.from_list(r) for r in p["scored"][offset:]]
            worst = max((abs(a.logprob - b.logprob) for a, b in zip(own, along)), default=0.0)
            if worst > max_abs:
                breaks.append(f"{p['name']}: the generated positions scored after the prompt and scored from the "
                              f"first token differ by {worst:.3g} nats (> {max_abs:g})")
    return breaks



def judge_contract(base: Mapping[str, Any], new: Mapping[str, Any], ref: Mapping[str, Any],
                   tolerances: Mapping[str, float]) -> ContractResult:
    """Both sides against the reference (their own consistency first), then against each other. A
    candidate off the reference, or diverging from the baseline beyond a near-tie, fails the check; the
    baseline off the reference is shown (the release under test is the candidate)."""
    out = ContractResult(prompts=len(ref["prompts"]))
    fingerprints = {c.get("checkpoint_fingerprint") for c in (base, new, ref)}
    if len(fingerprints) > 1:
        out.reasons.append("the contract ran on different weights (checkpoint fingerprints "
                           f"{', '.join(sorted(map(str, fingerprints)))}): give both sides the same --cache-dir or "
                           "--model-root")
        return out
    ties = {}
    for name, side in (("baseline", base), ("candidate", new)):
        bound = tolerance_of(str(side["dtype"]), tolerances)
        ties[name] = bound
        found = agreement(side, ref, 2 * bound)
        out.table.append({"what": f"{name} ({side['backend']}) vs reference", "dtype": side["dtype"],
                          "bound": f"{bound:g}", "agreement": found.to_dict()})
        problems = consistency_breaks(side, bound)
        if found.max_abs > bound:
            problems.append(f"log-probabilities differ from the fp32 reference by up to {found.max_abs:.3g} nats "
                            f"(> {bound:g} for {side['dtype']}) at {found.worst}")
        if found.first_top1_break:
            problems.append(f"top-1 differs from the fp32 reference at {found.first_top1_break}")
        for problem in problems:
            line = f"the {name} ({side['backend']}, {side['dtype']}) breaks the output contract: {problem}"
            (out.reasons if name == "candidate" else out.notes).append(line)
    between = agreement(new, base, 2 * max(ties.values()))
    out.table.append({"what": "candidate vs baseline", "dtype": f"{new['dtype']} / {base['dtype']}",
                      "bound": "-", "agreement": between.to_dict()})
    out.divergences, out.identical = divergences(base, new)
    tie = 2 * max(ties.values())
    for d in out.divergences:
        if max(d.margins) > tie:
            out.reasons.append(f"greedy tokens differ beyond a near-tie (margin > {tie:g} nats): {d.describe()}")
        else:
            out.notes.append(f"a near-tie broken two ways (both margins within {tie:g} nats) on {d.prompt}")
    return out
