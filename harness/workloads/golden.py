"""Golden outputs: the first greedy tokens of each DNA-suite case, stored and re-checked.

A golden token is only binding up to the first near-tie (top-1/top-2 logit margin below
``NEAR_TIE``): past one, a different but equally valid BLAS summation order may legitimately pick
the other token, and everything after it follows from that choice.

A golden file is written by the harness's own ``HFEngine`` (``carbon-harness golden``), so re-checking an
engine against it detects change, not correctness; each file says so in its ``note``. The independent oracle
is plain transformers ``generate`` on the same checkpoint
(``tests/compat/test_accuracy.py::test_golden_tokens_are_plain_transformers_greedy``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness.backends.base import Batch
from harness.carbon.dna import prompt_suite
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.sequences import first_difference
from harness.core.storage import atomic_write_json

GOLDEN_TOKENS = 32
NOTE = ("written by the harness's own HFEngine: comparing with it detects change, not correctness; "
        "plain transformers generate is the independent oracle (tests/compat/test_accuracy.py)")
NEAR_TIE = 1e-4
REGENERATE = ("carbon-harness golden --model {model} --out {path} --force  (after a deliberate change to the "
              "synthetic weights, the tokenizer or the greedy loop; commit the new file with the change)")


def golden_outputs(engine: Any, tokenizer: CarbonTokenizer, num_tokens: int = GOLDEN_TOKENS) -> dict[str, Any]:
    """Greedy tokens and per-step top-1/top-2 margins of every DNA-suite case, one case at a time."""
    cases = {}
    for case in prompt_suite(1080):
        margins: list[float] = []

        def select(logits: torch.Tensor) -> torch.Tensor:
            top2 = logits.float().topk(2, dim=-1).values
            margins.append(float(top2[0, 0] - top2[0, 1]))
            return logits.argmax(dim=-1)

        result = engine.generate(Batch.from_prompts(tokenizer, [case.prompt]), num_tokens, select=select)
        cases[case.name] = {"tokens": result.tokens[0].tolist(), "margins": margins}
    return {"schema": 1, "model": engine.info.model, "dtype": engine.info.dtype, "device": engine.info.device,
            "num_tokens": num_tokens, "prompt_bp": 1080, "note": NOTE, "cases": cases}


def binding_prefix(margins: list[float]) -> int:
    """How many golden tokens must match: up to and including the first near-tie's position is
    still determined only before it."""
    for i, m in enumerate(margins):
        if m < NEAR_TIE:
            return i
    return len(margins)


def compare_golden(golden: dict[str, Any], actual: dict[str, list[int]]) -> list[str]:
    """Mismatches of actual tokens (by case) against the golden file, as messages."""
    problems = []
    for name, expected in golden["cases"].items():
        if name not in actual:
            problems.append(f"{name}: no tokens generated")
            continue
        n = binding_prefix(expected["margins"])
        want, got = expected["tokens"][:n], actual[name][:n]
        if want != got:
            first = first_difference(got, want)
            have = got[first] if first < len(got) else f"nothing (it ends after {len(got)} tokens)"
            problems.append(f"{name}: token {first} is {have}, golden {want[first]} "
                            f"(margin there {expected['margins'][first]:.3g})")
    return problems


def write_golden(engine: Any, tokenizer: CarbonTokenizer, path: Path) -> Path:
    """Atomically: a reader (or an interrupted run) sees the old golden or the new, never half of one."""
    return atomic_write_json(path, golden_outputs(engine, tokenizer))
