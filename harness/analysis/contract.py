"""The output contract judged across stacks: each side against the fp32 transformers reference, with a
correct-precision yardstick as the measure of what rounding alone does (``harness.analysis.threeway``).

Three computations of the same token sequences: the side under test (its own environment), the fp32
reference and the yardstick (transformers in the side's dtype on the same weights; for an fp32 side
another fp32 path: one full forward pass with eager attention), the last two computed in the check's own
interpreter (``harness.workloads.threeway``), so no package of either side reaches what it is judged by.

The data a side supplies (``harness.workloads.contract`` writes it; schema 2), one JSON object:

    {"schema": 2, "backend": "hf", "dtype": "bf16", "model": ..., "shape": ..., "checkpoint_fingerprint": ...,
     "top_k": 1000, "probe_ids": [...], "pad_token_id": 151643, "new_tokens": 16,
     "prompts": [{"name": "balanced", "prompt_ids": [...],    # this side's own tokenization
                  "greedy": [...],                           # its greedy tokens, EOS ignored
                  "sequences": {KIND: {"tokens": [...], "from": F, "rows": [ROW, ...], "fns": [[24 floats], ...]}},
                  "eos": {"eos_token_id": E, "stop": S, "tokens": [...]},       # optional
                  "padded": {"pad": P, "greedy": [...], "rows": [ROW, ...]},    # optional (no rows: why,
                                                                      # in "rows_not_measured")
                  "batched": {"rows_of": ["cut", "own"], "rows": [[ROW, ...], [ROW, ...]]}}],  # optional, as padded
     "stack": "transformers 5.24.0"}                                  # optional

A sequence is the full token list; ``rows[j]`` scores ``tokens[F + j]`` given ``tokens[:F + j]``.
``ROW`` is ``[token, logprob, [[id, logprob], ...top-k descending], extra, probes]`` (``ScoredToken``;
``extra`` and ``probes`` optional): the log-probability (natural log, normalised over the whole
vocabulary) of the token at that position and of the side's top-k there. The kinds:

- ``scored``: the reference's prompt and greedy tokens, from the prompt's third token (every side alike);
- ``own``: this side's prompt and its own greedy tokens, from the first generated one. On transformers and
  NxDI these rows are teacher-forced through the decode path; a served side supplies the logprobs of its
  own generated tokens (completion ``logprobs``, top-k per position), which the reference then scores
  teacher-forced on that same sequence: its decode path is judged position by position;
- ``cut``: the prompt less its last P tokens and the greedy tokens from it (the padded-row check's rows).

``fns`` (optional, per row): the 24 FNS log-marginals log P(base b at 6-mer position j), j-major, A C G T.
``probe_ids``: the contract's fixed ids spread over the vocabulary (``harness.core.contract_format``), read at every row
where a side can read any id (a server returns its top-N only: it leaves them out; the "all" tier is then
not measured for it). ``eos``: the same prompt generated through the stack's own stopping rule with
``E = greedy[S]`` (its first occurrence) as EOS; it must stop there. ``padded``: the ``cut`` prompt
right-padded with P pad ids, greedy: it must equal the unpadded one up to a near-tie; its ``rows`` score the
``cut`` sequence's greedy tokens through the padded row (``Engine.score_padded``), held to the unpadded ``cut``
rows position by position. ``batched`` (a shape of batch size 2 or more): the ``cut`` prompt and the whole
prompt in one batch of mixed lengths (``Engine.score_batched``), each row scoring the greedy tokens of the
sequence kind ``rows_of`` names, held to that kind's unpadded rows position by position. A server's batch is
concurrent requests (it never pads): its ``own`` prompt decoded beside one 4 tokens longer, ``"concurrent":
true``, its decode-step rows as far as its greedy tokens agree with its own (``diverged_at``: the first that
does not, where one does). A prompt may carry
the ``own`` sequence alone (the long prompt of a ``long_prompt`` shape). ``stack``: the side's transformers where it runs transformers (the judge says when
that is the very code of its yardstick or reference).

The reference and yardstick files (``harness.workloads.threeway``) have the same shape, the same
sequences, and rows over the whole vocabulary: their top-k and, in ``extra``, every id the other two
computations reported there; the reference's ``greedy`` is its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.contract_notes import legs_note, reach_note
from harness.analysis.side_rows import batched_rows, padded_rows
from harness.analysis.threeway import (TIERS, Aligned, Criterion, Finding, PaddedSpread, Spread, margin_noise,
                                      padded_spread, spread)
from harness.core.contract_format import CONTRACT_SCHEMA, KINDS, ContractError, probe_ids  # noqa: F401 (the format's API)
from harness.core.paths import REPO_ROOT
from harness.core.scored import ScoredToken

TOLERANCES_FILE = REPO_ROOT / "fixtures" / "contract" / "tolerances.json"


def _positive(path: Path, where: str, value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ContractError(f"{path}: {where} must be a positive number, got {value!r}")
    return float(value)


CRITERION_KEYS = {"sigma_ratio", "tier_factor", "tie_factor", "fns_sigma_ratio", "sigma_floor", "abs_floor",
                  "margin_floor", "position_ratio", "pad_factor", "tie_position_factor", "sigma_tokens", "bias_t"}
OPTIONAL_KEYS = {"sigma_tokens", "bias_t"}  # absent: 50 tokens; the signed bias shown, not gated


def load_tolerances(path: Path = TOLERANCES_FILE) -> dict[str, Criterion]:
    """The criterion per dtype; an entry ``{"same_as": DTYPE}`` (a server of unstated dtype) borrows one.
    Any missing, unknown or non-positive field is refused by name."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ContractError(f"{path}: cannot read the contract tolerances ({exc})") from None
    if not isinstance(raw, dict):
        raise ContractError(f"{path}: must hold a JSON object of dtype -> criterion")
    out: dict[str, Criterion] = {}
    aliases = {}
    for dtype, entry in raw.items():
        if dtype.startswith("_"):
            continue
        if not isinstance(entry, dict):
            raise ContractError(f"{path}: {dtype!r} must be an object, got {entry!r}")
        if set(entry) == {"same_as"}:
            aliases[dtype] = entry["same_as"]
            continue
        missing, unknown = CRITERION_KEYS - set(entry) - OPTIONAL_KEYS, set(entry) - CRITERION_KEYS
        if missing or unknown:
            raise ContractError(f"{path}: {dtype!r} needs {', '.join(sorted(CRITERION_KEYS))}; missing "
                                f"{sorted(missing)}, unknown {sorted(unknown)}")
        tiers = entry["tier_factor"]
        if not isinstance(tiers, dict) or set(tiers) != set(TIERS):
            raise ContractError(f"{path}: {dtype!r} tier_factor must have exactly the tiers {', '.join(TIERS)}, "
                                f"got {tiers!r}")
        out[dtype] = Criterion(dtype, _positive(path, f"{dtype}.sigma_ratio", entry["sigma_ratio"]),
                               {k: _positive(path, f"{dtype}.tier_factor.{k}", v) for k, v in tiers.items()},
                               _positive(path, f"{dtype}.tie_factor", entry["tie_factor"]),
                               _positive(path, f"{dtype}.fns_sigma_ratio", entry["fns_sigma_ratio"]),
                               _positive(path, f"{dtype}.sigma_floor", entry["sigma_floor"]),
                               _positive(path, f"{dtype}.abs_floor", entry["abs_floor"]),
                               _positive(path, f"{dtype}.margin_floor", entry["margin_floor"]),
                               _positive(path, f"{dtype}.position_ratio", entry["position_ratio"]),
                               _positive(path, f"{dtype}.pad_factor", entry["pad_factor"]),
                               _positive(path, f"{dtype}.tie_position_factor", entry["tie_position_factor"]),
                               int(_positive(path, f"{dtype}.sigma_tokens", entry.get("sigma_tokens", 50))),
                               _positive(path, f"{dtype}.bias_t", entry["bias_t"]) if "bias_t" in entry else math.inf)
    for dtype, target in aliases.items():
        if target not in out:
            raise ContractError(f"{path}: {dtype!r} is the same as {target!r}, which has no criterion")
        out[dtype] = out[target]
    if "fp32" not in out:
        raise ContractError(f"{path}: needs at least an 'fp32' entry")
    return out


def criterion_of(dtype: str, tolerances: Mapping[str, Criterion]) -> Criterion:
    if dtype not in tolerances:
        raise ContractError(f"no contract criterion for dtype {dtype!r}; known: {', '.join(sorted(tolerances))} "
                            f"(calibrate one into {TOLERANCES_FILE})")
    return tolerances[dtype]


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _by_name(contract: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {p["name"]: p for p in contract["prompts"]}


def align(target: Mapping[str, Any], reference: Mapping[str, Any], yardstick: Mapping[str, Any]) -> list[Aligned]:
    """The three computations' rows of every sequence kind the target supplied; a reference or yardstick
    that scored another sequence is refused (it was computed for another side)."""
    ref, yard = _by_name(reference), _by_name(yardstick)
    out = []
    for kind in KINDS:
        a = Aligned(kind)
        for p in target["prompts"]:
            seq = p.get("sequences", {}).get(kind)
            if seq is None:
                continue
            for who, other in (("reference", ref), ("yardstick", yard)):
                theirs = other.get(p["name"], {}).get("sequences", {}).get(kind)
                if theirs is None or theirs["tokens"] != seq["tokens"] or theirs["from"] != seq["from"]:
                    raise ContractError(f"prompt {p['name']!r}: the {who} did not score this side's {kind} sequence "
                                        "(computed for another side)")
            rs, ys = ref[p["name"]]["sequences"][kind], yard[p["name"]]["sequences"][kind]
            for j, (t, r, y) in enumerate(zip(seq["rows"], rs["rows"], ys["rows"])):
                a.rows.append((p["name"], seq["from"] + j, ScoredToken.from_list(t), ScoredToken.from_list(r),
                               ScoredToken.from_list(y)))
            if seq.get("fns") and rs.get("fns") and ys.get("fns"):
                for j, (t, r, y) in enumerate(zip(seq["fns"], rs["fns"], ys["fns"])):
                    a.fns.append((p["name"], seq["from"] + j, t, r, y))
        if a.rows:
            out.append(a)
    return out


@dataclass
class SideJudgement:
    """One side against the reference, with its yardstick."""

    who: str
    backend: str
    dtype: str
    yardstick: str
    criterion: Criterion
    tie_allowance: float
    margin_noise: float = 0.0  # the yardstick's: the largest change it makes to the reference's margin
    spreads: list[Spread] = field(default_factory=list)
    padded: PaddedSpread | None = None
    batched: list[PaddedSpread] = field(default_factory=list)  # per row kind of the batched rows
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    last_position: int = -1  # the largest position any of its rows scored

    @property
    def passed(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"who": self.who, "backend": self.backend, "dtype": self.dtype, "yardstick": self.yardstick,
                "criterion": self.criterion.to_dict(),
                "tie_allowance": self.tie_allowance, "margin_noise": self.margin_noise, "passed": self.passed,
                "spreads": [s.to_dict() for s in self.spreads],
                "padded": self.padded.to_dict() if self.padded else None,
                "batched": [b.to_dict() for b in self.batched],
                "findings": [f.describe() for f in self.findings],
                "notes": self.notes, "last_position": self.last_position}


def judge_side(who: str, target: Mapping[str, Any], reference: Mapping[str, Any], yardstick: Mapping[str, Any],
               crit: Criterion) -> SideJudgement:
    """``target`` against ``reference`` with ``yardstick`` as the measure of its dtype's rounding: the
    three-way figures of every sequence kind, then the token checks, each finding naming its criterion,
    prompt and first position."""
    from harness.analysis import side_checks

    aligned = align(target, reference, yardstick)
    noise = margin_noise(aligned)
    tie = crit.tie_factor * max(noise, crit.margin_floor)
    out = SideJudgement(who, str(target.get("backend")), str(target.get("dtype")),
                        str(yardstick.get("computed_by", "?")), crit, tie, noise)
    out.findings += side_checks.tokenization(target, reference)
    out.notes += same_code(target, reference, yardstick)
    out.last_position = max((pos for a in aligned for _, pos, *_ in a.rows), default=-1)
    for a in aligned:
        s = spread(a, crit, tie)
        out.spreads.append(s)
        out.findings += s.findings
    out.findings += side_checks.greedy(target, reference, tie, yardstick, crit)
    out.findings += side_checks.self_consistency(target, tie)
    found, notes = side_checks.pad_and_eos(target, reference, tie)
    out.findings += found + side_checks.padded_row(target, reference, tie)
    out.notes += notes
    cut = next((a for a in aligned if a.kind == "cut"), None)
    rows, missing = padded_rows(target, cut)
    if rows:
        out.padded = padded_spread(rows, crit)
        out.findings += out.padded.findings
    elif cut is not None:
        out.notes.append(f"padded rows not scored by log-probabilities ({missing or 'none supplied'}); "
                         "only their greedy tokens were compared")
    by_kind, missing = batched_rows(target, aligned)
    for kind, rows in sorted(by_kind.items()):
        out.batched.append(padded_spread(rows, crit, f"batched-row log-probs ({kind})"))
        out.findings += out.batched[-1].findings
    if missing:
        out.notes.append(f"batched rows of mixed lengths not scored by log-probabilities ({missing})")
    out.notes += [f"batched rows of {p['name']}: the concurrent row's greedy token {p['batched']['diverged_at']} "
                  "differs from its single run's; its rows are compared up to there"
                  for p in target["prompts"] if "diverged_at" in (p.get("batched") or {})]
    return out


def same_code(target: Mapping[str, Any], reference: Mapping[str, Any], yardstick: Mapping[str, Any]
              ) -> list[str]:
    """Where a side runs the very code it is judged by (transformers of the check's version, in the
    yardstick's dtype or as the fp32 reference), its figures compare that code with itself: say so."""
    stack, dtype = target.get("stack"), target.get("dtype")
    if not stack:
        return []
    for role, other in (("yardstick", yardstick), ("reference", reference)):
        label = str(other.get("computed_by", ""))
        if label.startswith(f"{stack} {dtype} (prefill + decode"):
            return [f"runs the {role}'s own code ({label}), so its {dtype} leg compares that code with "
                    "itself: a defect shared with the check's transformers cannot show there"
                    + ("; an fp32 leg (--dtype fp32) is what can" if dtype != "fp32" else "")]
    return []


@dataclass(frozen=True)
class Divergence:
    """The first position where the two sides' greedy tokens differ, on one prompt (shown, not gated:
    each side is gated against the reference)."""

    prompt: str
    position: int  # index among the generated tokens
    baseline: int
    candidate: int


@dataclass
class ContractResult:
    """The contract's verdict lines: ``reasons`` fail the check (the candidate broke it), ``notes`` are
    shown (the baseline off the reference, what was not measured)."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sides: list[SideJudgement] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    identical: int = 0
    prompts: int = 0
    leg: str | None = None  # the leg it was judged in (harness.release.legs), where the check ran more than one
    where: dict[str, str] = field(default_factory=dict)  # each side's place in that leg, in words

    @property
    def last_position(self) -> int:
        """The largest position any side's rows scored (-1: none): what the verdict cannot see past."""
        return max((s.last_position for s in self.sides), default=-1)

    def to_dict(self) -> dict[str, Any]:
        return {"reasons": self.reasons, "notes": self.notes, "sides": [s.to_dict() for s in self.sides],
                "last_position": self.last_position,
                "identical_prompts": self.identical, "prompts": self.prompts,
                "divergences": [d.__dict__ for d in self.divergences], "leg": self.leg, "where": self.where}

    def markdown(self) -> list[str]:
        title = "### Output contract" + (f", {self.leg} leg" if self.leg else "")
        if not self.sides:  # nothing compared: why (not measured, a side wrote none, different weights)
            return [title, ""] + [f"- {n}" for n in self.reasons + self.notes] + [""]
        lines = [f"{title} (each side and its yardstick against the fp32 transformers reference)", "",
                 f"Greedy tokens identical between the sides on {self.identical} of {self.prompts} prompts.", "",
                 "| side | dtype | yardstick | sequence | positions | σ ratio | signed t (top-1 / margin) | largest per "
                 "position | top-5 | top-50 | top-1000 | all | top-1 | near-tie | FNS σ ratio | |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for side in self.sides:
            c = side.criterion
            for s in side.spreads:
                tiers = [f"{t['ratio']:.3g} (≤{c.tier_factor[k]:g})" if t.get("measured") else "n/a"
                         for k, t in s.tiers.items()]
                fns = f"{s.fns_ratio:.3g} (≤{c.fns_sigma_ratio:g})" if s.fns_ratio is not None else "-"
                mark = "FAIL" if s.findings else "ok"
                where = f" at {s.position_at[0]} {s.position_at[1]}" if s.position_at else ""
                signed = (" / ".join(f"{s.bias[k]['t']:+.2g}" for k in ("top1_logprob", "margin"))
                          + (f" (≤{c.bias_t:g})" if math.isfinite(c.bias_t) else " (shown)")) if s.bias else "-"
                lines.append(f"| {side.who} ({side.backend}) | {side.dtype} | {side.yardstick} | {s.kind} | "
                             f"{s.positions} | {s.ratio:.3g} (≤{c.sigma_ratio:g}) | {signed} | "
                             f"{s.position_ratio:.3g} (≤{c.position_ratio:g}){where} | {' | '.join(tiers)} | "
                             f"{s.top1_agree}/{s.top1_checked} | {side.tie_allowance:.3g} | {fns} | {mark} |")
        for side in self.sides:
            if side.padded is not None:
                at = f" at {side.padded.at[0]} {side.padded.at[1]}" if side.padded.at else ""
                lines.append(f"\nPadded rows of {side.who}: rms(padded − unpadded) over the yardstick's rounding, "
                             f"largest {side.padded.ratio:.3g} (≤{side.criterion.pad_factor:g}){at} over "
                             f"{side.padded.positions} positions.")
            for b in side.batched:
                at = f" at {b.at[0]} {b.at[1]}" if b.at else ""
                lines.append(f"\nBatched rows of {side.who} ({b.what}): rms(batched − single run) over the "
                             f"yardstick's rounding, largest {b.ratio:.3g} (≤{side.criterion.pad_factor:g}){at} over "
                             f"{b.positions} positions.")
        lines += ["", "σ ratio: rms(side − fp32) / rms(yardstick − fp32), pooled and (largest per position) at each "
                  "position; top-k: the largest |side − fp32| over the "
                  "top-k ids / the yardstick's; near-tie: nats of reference margin below which a top-1 may differ; "
                  "signed t: the paired t of the side's signed change to the reference's top-1 log-prob and top-1 / "
                  "top-2 margin less the yardstick's (a bias one way, where rounding has none), each at most its bound in "
                  "size where one is calibrated (bf16), shown only where none is (fp32)."]
        lines += [""] + [f"- {n}" for n in self.reasons + self.notes]
        return lines + [""]


def between(base: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[Divergence], int]:
    """Per prompt, the first divergent greedy token between the sides (if any), and how many matched."""
    out, same = [], 0
    theirs = _by_name(new)
    for bp in base["prompts"]:
        np_ = theirs.get(bp["name"])
        if np_ is None:
            continue
        k = shared_prefix(bp["greedy"], np_["greedy"])
        if k == len(bp["greedy"]) == len(np_["greedy"]):
            same += 1
        elif k < min(len(bp["greedy"]), len(np_["greedy"])):
            out.append(Divergence(bp["name"], k, bp["greedy"][k], np_["greedy"][k]))
    return out, same


def judge_contract(sides: Mapping[str, Mapping[str, Any]], expected: Mapping[str, Mapping[str, Mapping[str, Any]]],
                   tolerances: Mapping[str, Criterion]) -> ContractResult:
    """``sides``: "baseline" / "candidate" -> its contract; ``expected[who]``: {"reference": ...,
    "yardstick": ...} computed for that side. A candidate's findings fail the check; the baseline's are
    notes (the release under test is the candidate)."""
    first = next(iter(expected.values()), {}).get("reference") or {}
    out = ContractResult(prompts=len(first.get("prompts", [])))
    prints = {str(c.get("checkpoint_fingerprint")) for c in sides.values()}
    prints |= {str(e[k].get("checkpoint_fingerprint")) for e in expected.values() for k in ("reference", "yardstick")}
    if len(prints) > 1:
        out.reasons.append("the contract ran on different weights (checkpoint fingerprints "
                           f"{', '.join(sorted(prints))}): give both sides the same --cache-dir or --model-root")
        return out
    for who, contract in sides.items():
        if contract.get("schema") != CONTRACT_SCHEMA:
            raise ContractError(f"the {who}'s contract has schema {contract.get('schema')!r}, expected "
                                f"{CONTRACT_SCHEMA} (written by this harness's test_output_contract)")
        dtype = str(contract.get("dtype"))
        judged = judge_side(who, contract, expected[who]["reference"], expected[who]["yardstick"],
                            criterion_of(dtype, tolerances))
        out.sides.append(judged)
        lines = [f"the {who} ({judged.backend}, {dtype}) breaks the output contract: {f.describe()}"
                 for f in judged.findings]
        (out.reasons if who == "candidate" else out.notes).extend(lines)
        out.notes += [f"the {who}: {n}" for n in judged.notes]
    if {"baseline", "candidate"} <= set(sides):
        out.divergences, out.identical = between(sides["baseline"], sides["candidate"])
    out.notes += legs_note({who: str(c.get("dtype")) for who, c in sides.items()})
    if out.last_position >= 0:
        out.notes += reach_note(out.last_position, ", ".join(sorted({str(c.get("shape")) for c in sides.values()})))
    return out
