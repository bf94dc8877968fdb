"""The output contract's checks that read tokens, not log-probabilities: the side's tokenization, its
greedy tokens against the reference's, against its own scoring, the pad id, EOS, and a padded row. Each
divergence is excused only at a near-tie, by the same allowance as the three-way rule (the yardstick's
measured margin noise: ``harness.analysis.threeway``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.analysis.threeway import Criterion, Finding, margin_change, tie_at
from harness.core.scored import ScoredToken


def _shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _row(prompt: Mapping[str, Any], kind: str, index: int) -> ScoredToken | None:
    rows = prompt.get("sequences", {}).get(kind, {}).get("rows", [])
    return ScoredToken.from_list(rows[index]) if index < len(rows) else None


def tokenization(target: Mapping[str, Any], reference: Mapping[str, Any]) -> list[Finding]:
    """The side's token ids of each prompt must be the reference's (a tokenizer that moves a 6-mer
    boundary changes every id after it)."""
    ref = {p["name"]: p for p in reference["prompts"]}
    out = []
    for p in target["prompts"]:
        theirs = ref.get(p["name"])
        if theirs is None:
            out.append(Finding("tokenization", p["name"], None, "the reference has no such prompt"))
            continue
        mine, want = list(p["prompt_ids"]), list(theirs["prompt_ids"])
        if mine != want:
            i = _shared(mine, want)
            got = mine[i] if i < len(mine) else "(end)"
            exp = want[i] if i < len(want) else "(end)"
            out.append(Finding("tokenization", p["name"], i, f"token id {got} where the reference's tokenizer gives "
                                                             f"{exp} ({len(mine)} ids, the reference {len(want)})"))
    return out


def greedy(target: Mapping[str, Any], reference: Mapping[str, Any], tie: float,
           yardstick: Mapping[str, Any] | None = None, crit: Criterion | None = None) -> list[Finding]:
    """Greedy tokens against the reference's: the first divergence must be a near-tie for the reference
    on the shared prefix (its teacher-forced margin on this side's own sequence there), held to the near-tie
    allowance at that position where the yardstick's row there is given (``threeway.tie_at``, as a top-1 is)."""
    yard = {p["name"]: p for p in (yardstick or {}).get("prompts", [])}
    ref = {p["name"]: p for p in reference["prompts"]}
    out = []
    for p in target["prompts"]:
        r = ref.get(p["name"])
        if r is None or p["prompt_ids"] != r["prompt_ids"]:
            continue  # tokenization says why
        k = _shared(p["greedy"], r["greedy"])
        if k >= min(len(p["greedy"]), len(r["greedy"])):
            continue
        row, yrow = _row(r, "own", k), _row(yard.get(p["name"], {}), "own", k)
        start = len(p["prompt_ids"])
        allow = tie if row is None or yrow is None or crit is None else tie_at(
            max(margin_change([(yrow, row)]), crit.margin_floor), crit, tie)
        if row is None or row.margin > allow:
            margin = f"a margin of {row.margin:.3g} nats" if row else "an unknown margin"
            there = f"there {allow:.3g}; {tie:.3g} anywhere" if yrow is not None and crit is not None else f"{tie:.3g}"
            out.append(Finding("greedy tokens", p["name"], start + k,
                               f"generated token {k} is {p['greedy'][k]} where the fp32 reference generates "
                               f"{r['greedy'][k]} by {margin} (> the near-tie allowance {there})"))
    return out


def self_consistency(target: Mapping[str, Any], tie: float) -> list[Finding]:
    """Each greedy token must be the side's own teacher-forced top-1 there, beyond a near-tie: a sampler,
    KV cache or prefill path that disagrees with the model's own scoring of the same sequence."""
    out = []
    for p in target["prompts"]:
        start = len(p["prompt_ids"])
        for j, token in enumerate(p["greedy"]):
            row = _row(p, "own", j)
            if row is None:
                break
            if row.top[0][0] != token and row.logprob < row.top[0][1] - tie:
                out.append(Finding("generation vs its own scoring", p["name"], start + j,
                                   f"greedy token {token}, but teacher-forced its top-1 is {row.top[0][0]} by "
                                   f"{row.top[0][1] - row.logprob:.3g} nats"))
                break
    return out


def pad_and_eos(target: Mapping[str, Any], reference: Mapping[str, Any], tie: float) -> tuple[list[Finding],
                                                                                              list[str]]:
    """The pad id is never generated (unless the reference would, beyond a near-tie); with EOS honoured,
    generation stops at the first EOS. Returns the findings and notes (a side that could not run EOS)."""
    pad = target.get("pad_token_id")
    ref = {p["name"]: p for p in reference["prompts"]}
    out, notes = [], []
    for p in target["prompts"]:
        start = len(p["prompt_ids"])
        for j, token in enumerate(p["greedy"]):
            if pad is not None and token == pad:
                row = _row(ref.get(p["name"], {}), "own", j)
                if row is None or row.top[0][0] != pad and row.top[0][1] - (row.value(pad) or -1e9) > tie:
                    out.append(Finding("pad id never generated", p["name"], start + j,
                                       f"generated the pad id {pad} at generated position {j}"))
                break
        eos = p.get("eos")
        if not eos:
            continue
        if eos.get("skipped"):
            notes.append(f"EOS not checked on {p['name']}: {eos['skipped']}")
            continue
        stop, tokens, eid = int(eos["stop"]), list(eos["tokens"]), int(eos["eos_token_id"])
        want = p["greedy"][:stop + 1]
        if tokens[:stop + 1] != want[:len(tokens)] or len(tokens) < stop + 1:
            k = _shared(tokens, want)
            out.append(Finding("EOS honoured", p["name"], start + k,
                               f"with EOS {eid}, generated token {k} is "
                               f"{tokens[k] if k < len(tokens) else '(none: stopped early)'}, not the greedy "
                               f"{want[k] if k < len(want) else '(end)'}"))
        elif len(tokens) > stop + 1:
            extra = [t for t in tokens[stop + 1:] if t != pad]
            if extra:
                out.append(Finding("EOS honoured", p["name"], start + stop,
                                   f"generated {len(extra)} token(s) past the EOS id {eid} at generated position "
                                   f"{stop} (EOS ignored)"))
    return out, notes


def padded_row(target: Mapping[str, Any], reference: Mapping[str, Any], tie: float) -> list[Finding]:
    """The ``cut`` prompt right-padded with pad ids must generate what it generates unpadded, up to a
    near-tie of the reference on that sequence."""
    ref = {p["name"]: p for p in reference["prompts"]}
    out = []
    for p in target["prompts"]:
        padded, cut = p.get("padded"), p.get("sequences", {}).get("cut")
        if not padded or not cut:
            continue
        unpadded = cut["tokens"][cut["from"]:]
        k = _shared(list(padded["greedy"]), unpadded)
        if k >= min(len(padded["greedy"]), len(unpadded)):
            continue
        row = _row(ref.get(p["name"], {}), "cut", k)
        if row is None or row.margin > tie:
            out.append(Finding("padded row", p["name"], cut["from"] + k,
                               f"right-padded with {padded['pad']} pad ids, generated token {k} is "
                               f"{padded['greedy'][k]} where unpadded it is {unpadded[k]} (reference margin "
                               f"{row.margin if row else float('nan'):.3g} nats > {tie:.3g})"))
    return out
