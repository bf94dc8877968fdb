"""The output contract's reference and yardstick for one side (the three-way rule:
``harness.analysis.threeway``), computed in the check's own interpreter on the checkpoint the reference
ran, over exactly the sequences the side scored.

Reference: transformers fp32, prefill then decode steps fed the sequence (the path every side's rows come
from). Yardstick: the same in the side's dtype (bf16: what correct bf16 does to these logits); for an
fp32 side another correct fp32 path, one full forward pass with eager attention (the fp32 spread between
two implementations: summation order only, floored by the criterion's ``sigma_floor``).

    python -m harness.workloads.threeway --reference REF.json --side candidate=SIDE.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.backends.base import Batch, ScoredToken, fns_log_marginals, scored_from_logits
from harness.carbon.checkpoint import fingerprint
from harness.core.contract_format import CONTRACT_SCHEMA, write_contract
from harness.core.spec import get_shape

YARDSTICK_DTYPES = ("fp32", "bf16", "fp16")


class Computation:
    """One of the two computations the side is judged by, on the reference's checkpoint and shape."""

    def __init__(self, checkpoint: Path, shape: str, dtype: str, full_pass: bool = False) -> None:
        from harness.backends.hf import HFEngine

        self.dtype, self.full_pass = dtype, full_pass
        self.engine = HFEngine(checkpoint, get_shape(shape), "contract", device="cpu", dtype=dtype,
                               share_weights=not full_pass)
        if full_pass:
            self.engine.model.set_attn_implementation("eager")
        import transformers

        path = "one forward pass, eager attention" if full_pass else "prefill + decode steps"
        self.label = f"transformers {transformers.__version__} {dtype} ({path})"
        self._seen: dict[tuple[tuple[int, ...], int], torch.Tensor] = {}

    @torch.inference_mode()
    def logits(self, tokens: Sequence[int], start: int) -> torch.Tensor:
        """Logits ``[N, V]`` (float32) predicting ``tokens[start:]``; a sequence both sides scored (the
        reference's, and every one where the sides agree) is computed once."""
        key = (tuple(tokens), start)
        if key not in self._seen:
            self._seen[key] = self._compute(tokens, start)
        return self._seen[key]

    def _compute(self, tokens: Sequence[int], start: int) -> torch.Tensor:
        if self.full_pass:
            out = self.engine.model(input_ids=torch.tensor([list(tokens)]), use_cache=False).logits[0]
            return out[start - 1:len(tokens) - 1].float()
        return self.engine.continuation_logits(Batch.from_ids([list(tokens[:start])]),
                                               torch.tensor([list(tokens[start:])]))


def yardstick_of(dtype: str, checkpoint: Path, shape: str) -> Computation:
    if dtype not in YARDSTICK_DTYPES:
        raise ValueError(f"no yardstick for a side of dtype {dtype!r}; known: {', '.join(YARDSTICK_DTYPES)} (a "
                         "server of unstated dtype is judged as bf16: state it with --carbon-dtype)")
    return Computation(checkpoint, shape, dtype, full_pass=dtype == "fp32")


def _ids(row: ScoredToken) -> list[int]:
    return [row.token, *(i for i, _ in row.top)]


def rows_for(side: Mapping[str, Any], r_logits: torch.Tensor, y_logits: torch.Tensor, k: int,
             probes: Sequence[int]) -> tuple[list[ScoredToken], list[ScoredToken]]:
    """The reference's and the yardstick's rows of one sequence, each carrying (in ``extra``) every id
    the side and the other computation reported, so every difference is read at the same ids."""
    tokens = side["tokens"][side["from"]:]
    target = [ScoredToken.from_list(r) for r in side["rows"]]
    r_top = torch.log_softmax(r_logits.double(), -1).topk(k, -1).indices.tolist()
    y_top = torch.log_softmax(y_logits.double(), -1).topk(k, -1).indices.tolist()
    r_extra = [[*_ids(t), *y] for t, y in zip(target, y_top)]
    y_extra = [[*_ids(t), *r] for t, r in zip(target, r_top)]
    return (scored_from_logits(r_logits, tokens, k, probes, r_extra),
            scored_from_logits(y_logits, tokens, k, probes, y_extra))


def expected(side: Mapping[str, Any], reference: Mapping[str, Any], ref: Computation, yard: Computation
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference's and the yardstick's contracts over ``side``'s sequences (same prompts, same
    sequences); the reference keeps its own prompt ids and greedy tokens."""
    k = int(side.get("top_k") or 2)
    probes = list(side.get("probe_ids") or [])
    ref_prompts = {p["name"]: p for p in reference["prompts"]}
    out = []
    for computation in (ref, yard):
        head = {key: reference.get(key) for key in ("model", "shape", "checkpoint_fingerprint", "checkpoint")}
        out.append({"schema": CONTRACT_SCHEMA, "backend": "hf", "dtype": computation.dtype,
                    "computed_by": computation.label, **head, "top_k": k, "probe_ids": probes,
                    "pad_token_id": reference.get("pad_token_id"), "prompts": []})
    for p in side["prompts"]:
        theirs = ref_prompts.get(p["name"])
        if theirs is None:
            raise ValueError(f"the side's prompt {p['name']!r} is not in the reference's contract")
        entries = [{"name": p["name"], "prompt_ids": theirs["prompt_ids"], "greedy": theirs["greedy"] if i == 0
                    else [], "sequences": {}} for i in range(2)]
        for kind, seq in p.get("sequences", {}).items():
            r_logits = ref.logits(seq["tokens"], seq["from"])
            y_logits = yard.logits(seq["tokens"], seq["from"])
            rows = rows_for(seq, r_logits, y_logits, k, probes)
            for entry, logits, rs in zip(entries, (r_logits, y_logits), rows):
                entry["sequences"][kind] = {"tokens": seq["tokens"], "from": seq["from"],
                                            "rows": [r.to_list() for r in rs]}
                if seq.get("fns"):
                    entry["sequences"][kind]["fns"] = fns_log_marginals(logits)
        for contract, entry in zip(out, entries):
            contract["prompts"].append(entry)
    return out[0], out[1]


def expected_file(folder: Path, who: str, role: str, key: str) -> Path:
    """Where the ``role`` ("reference" / "yardstick") computed for ``who`` is written, per contract key."""
    return folder / f"{who}-{role}-{key}.json"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.workloads.threeway", description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", type=Path, required=True, help="the reference's contract (contract-KEY.json)")
    p.add_argument("--side", action="append", required=True, metavar="WHO=FILE", help="a side's contract")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    reference = json.loads(args.reference.read_text())
    key = args.reference.stem.removeprefix("contract-")
    checkpoint = Path(reference["checkpoint"])
    if fingerprint(checkpoint) != reference["checkpoint_fingerprint"]:
        print(f"{checkpoint} changed since the reference ran on it: run the release check again, so that the "
              "reference and both sides read the same checkpoint", file=sys.stderr)
        return 2
    ref = Computation(checkpoint, reference["shape"], "fp32")
    yardsticks: dict[str, Computation] = {}
    for spec in args.side:
        who, _, path = spec.partition("=")
        side = json.loads(Path(path).read_text())
        dtype = str(side.get("dtype"))
        dtype = "bf16" if dtype == "server" else dtype
        if dtype not in yardsticks:
            yardsticks[dtype] = yardstick_of(dtype, checkpoint, reference["shape"])
        for role, contract in zip(("reference", "yardstick"), expected(side, reference, ref, yardsticks[dtype])):
            write_contract(expected_file(args.out, who, role, key), contract)
    return 0


if __name__ == "__main__":
    sys.exit(main())
