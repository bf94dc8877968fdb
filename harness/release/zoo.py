"""The output contract's zoo: real ``release-check --conformance-only`` runs on transformers, NxDI's CPU mode
and a served vLLM candidate (``--stack vllm``), a correct candidate and each planted defect (``harness.release.defects``), on the flat
(carbon-tiny) and the peaked (carbon-tiny-trained) checkpoint. Correct runs calibrate the criterion
(``carbon-harness contract-zoo calibrate``); the table (``... table``) is docs/stacks-and-migration.md's.

    carbon-harness contract-zoo run --out DIR [--stack hf --stack nxdi] [--model carbon-tiny] [--case correct]
    carbon-harness contract-zoo calibrate DIR [DIR...]    # fixtures/contract/calibration.json, tolerances.json
    carbon-harness contract-zoo table DIR [DIR...]        # markdown, each case re-judged with the shipped criterion
    carbon-harness contract-zoo plant --out DIR --stack S --case DEFECT   # one plant; prints the candidate's option

Each case's baseline is the same stack and dtype without the defect; the candidate carries it in its own
environment only, so the reference and the yardstick (this interpreter) never see it. A case is skipped
when its folder already holds a verdict (a run can be resumed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_write_json
from harness.release.defects import (DEFECTS, HOOKS, MISSES, MUST_FAIL, NEAR_THRESHOLD, NXDI_EDITS, SERVED_HOOKS,
                                     is_yardstick, plant_hook, plant_nxdi, plant_served)
from harness.release.errors import ReleaseCheckError

STACKS = ("hf", "nxdi", "vllm")
DEFAULT_STACKS = ("hf", "nxdi")  # vllm (a served candidate) when asked: --stack vllm
VLLM_CASES = ("correct-bf16", "correct-fp32")
MODELS = ("carbon-tiny", "carbon-tiny-trained")
CORRECT = ("correct-bf16", "correct-fp32", "correct-bf16-eager")
# the near-threshold defects in both legs: DEFECT (bf16) and DEFECT-fp32
NEAR = tuple(f"{d}{leg}" for d in NEAR_THRESHOLD for leg in ("", "-fp32"))
ZOO_FILE = "zoo.json"


@dataclass(frozen=True)
class Case:
    stack: str
    model: str
    case: str  # correct-bf16, correct-fp32, a defect planted in a bf16 candidate, or DEFECT-fp32 (the fp32 leg)
    shape: str = "smoke"  # contract-long: batched rows of mixed lengths and a prompt decoded to the sequence's end

    @property
    def name(self) -> str:
        return f"{self.stack}-{self.model}-{self.case}" + (f"-{self.shape}" if self.shape != "smoke" else "")

    @property
    def dtype(self) -> str:
        return "fp32" if self.case.endswith("-fp32") else "bf16"

    @property
    def defect(self) -> str | None:
        return None if self.case in CORRECT else self.case.removesuffix("-fp32")

    @property
    def expected_exit(self) -> int | None:
        """0 for a correct candidate, 1 for a defect it must fail, None for a near-threshold leg whose outcome
        is recorded, not required (``MISSES`` says why)."""
        if self.case in CORRECT:
            return 0
        if self.case in MISSES and self.case not in MUST_FAIL:
            return None
        return 1

    @property
    def is_yardstick(self) -> bool:
        return is_yardstick(self.stack, self.case)


# (model, defect) pairs whose defect is not off by more than bf16 noise, so that no output contract at bf16
# can see it: RMS eps 1e-5 for 1e-6 on carbon-tiny-trained, whose trained hidden states' mean square
# dwarfs either eps (measured 2026-11-26, transformers bf16: sigma ratio 1.06-1.13, where correct eager
# attention read 1.05-1.12; on the flat carbon-tiny it read 2.3-2.4)
BELOW_BF16_NOISE = {("carbon-tiny-trained", "rms-eps")}


def on_stack(stack: str, name: str) -> bool:
    """Whether the zoo plants case ``name`` on ``stack``: every case on hf; a near-threshold
    defect on nxdi where NxDI's own code has its edit (``NXDI_EDITS``), on vllm where the served vLLM has its
    hook (``SERVED_HOOKS``); a served vLLM candidate's other cases are its correct ones (its gross planted
    defects are tests/release/test_served_plants.py's); no eager-attention case off hf."""
    defect = name.removesuffix("-fp32")
    if stack == "hf":
        return True
    if stack == "vllm":
        return name in VLLM_CASES or (name in NEAR and defect in SERVED_HOOKS)
    return name != "correct-bf16-eager" and (name not in NEAR or defect in NXDI_EDITS)


def cases(stacks: list[str], models: list[str], names: list[str], shape: str = "smoke") -> list[Case]:
    """Every (stack, model, case) asked for that the stack plants (``on_stack``); no defect where it is below
    bf16 noise (``BELOW_BF16_NOISE``)."""
    return [Case(stack, model, name, shape) for stack in stacks for model in models for name in names
            if on_stack(stack, name) and (model, name) not in BELOW_BF16_NOISE]


def command(case: Case, folder: Path, nxdi_source: Path, nxdi_python: str, vllm_python: str | None = None
            ) -> tuple[list[str], dict[str, str]]:
    """The release-check command of one case, and its environment (a vllm case: the fp32 transformers
    baseline, and the candidate served by vLLM in ``vllm_python``, started by the check with the case's dtype)."""
    cmd = [sys.executable, "-m", "harness.cli", "release-check", "--conformance-only", "--conformance-markers",
           "contract", "--model", case.model, "--dtype", case.dtype, "--shape", case.shape, "--out", str(folder / "check"),
           "--force", "--legs", case.dtype]  # each case one leg: a defect's fp32 leg is its own case (DEFECT-fp32)
    env = {**os.environ}
    # the defect, or correct-bf16-eager (transformers' eager attention, a hook too)
    hook = case.defect if case.defect is not None else case.case if case.case in HOOKS else None
    if case.stack == "nxdi":
        cmd += ["--backend", "neuron", "--neuron-cpu", "--baseline-python", nxdi_python, "--candidate-python",
                nxdi_python, "--baseline-nxdi-source", str(nxdi_source)]
        if hook not in NXDI_EDITS:
            cmd += ["--candidate-nxdi-source", str(nxdi_source)]
    elif case.stack == "vllm":
        cmd += ["--baseline-backend", "hf", "--baseline-dtype", "fp32", "--candidate-backend", "openai",
                "--candidate-python", str(vllm_python)]
    else:
        cmd += ["--backend", "hf"]
    if hook is not None:
        cmd += plant_options(case.stack, hook, folder, nxdi_source)
    return cmd, env


def plant_options(stack: str, defect: str, folder: Path, nxdi_source: Path | None) -> list[str]:
    """The release-check options that give the candidate ``defect`` on ``stack``, its plant written under
    ``folder``: an edited copy of the NxDI tree (``--candidate-nxdi-source``) where NxDI's own code carries it,
    else a sitecustomize directory first on the candidate's ``PYTHONPATH`` (a served candidate's: its server and
    engine core load it)."""
    if stack == "nxdi" and defect in NXDI_EDITS:
        if nxdi_source is None:
            raise ReleaseCheckError(f"{defect} on nxdi is an edit of NxDI's own code: give --nxdi-source DIR (the "
                                    "candidate's NxDI tree, copied and edited)")
        return ["--candidate-nxdi-source", str(plant_nxdi(defect, nxdi_source, folder / "nxdi-planted"))]
    plant = plant_served(defect, folder / "hook") if stack == "vllm" else plant_hook(defect, folder / "hook")
    paths = [str(plant), *filter(None, [os.environ.get("PYTHONPATH")])]
    return ["--candidate-env", f"PYTHONPATH={os.pathsep.join(paths)}"]


def summary(case: Case, folder: Path, rc: int, wall_s: float) -> dict[str, Any]:
    """What the zoo keeps of a case: the exit, the candidate's criterion values, its first finding."""
    verdict_path = folder / "check" / "verdict.json"
    verdict = json.loads(verdict_path.read_text()) if verdict_path.is_file() else {}
    judged = [s for c in verdict.get("contract", {}).values() for s in c.get("sides", [])]
    candidate = next((s for s in judged if s["who"] == "candidate"), None)
    return {**asdict(case), "name": case.name, "exit": rc, "expected_exit": case.expected_exit,
            "is_yardstick": case.is_yardstick, "must_fail": MUST_FAIL.get(case.case), "miss": MISSES.get(case.case),
            "wall_s": round(wall_s, 1), "load_1m": round(os.getloadavg()[0], 2), "verdict": verdict.get("verdict"), "reasons": verdict.get("reasons", []),
            "candidate": candidate, "evidence": str(folder / "check")}


def run(selected: list[Case], out: Path, nxdi_source: Path, nxdi_python: str, vllm_python: str | None = None
        ) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / ZOO_FILE
    done = {r["name"]: r for r in (json.loads(path.read_text()) if path.is_file() else [])}
    for case in selected:
        if case.name in done and done[case.name].get("verdict"):
            continue
        folder = out / case.name
        folder.mkdir(parents=True, exist_ok=True)
        cmd, env = command(case, folder, nxdi_source, nxdi_python, vllm_python)
        print(f"[contract-zoo] {case.name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with open(folder / "release-check.log", "w") as log:
            rc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
        done[case.name] = summary(case, folder, rc, time.perf_counter() - t0)
        print(f"[contract-zoo] {case.name}: exit {rc} (expected "
              f"{'either: recorded' if case.expected_exit is None else case.expected_exit}) in "
              f"{done[case.name]['wall_s']:.0f} s", file=sys.stderr, flush=True)
        atomic_write_json(path, list(done.values()))
    return list(done.values())


def load_zoo(folders: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for folder in folders:
        path = folder / ZOO_FILE
        if not path.is_file():
            raise ReleaseCheckError(f"{folder}: no {ZOO_FILE} there (a contract-zoo run --out directory)")
        rows += json.loads(path.read_text())
    return rows


def cmd_zoo(args: argparse.Namespace) -> int:
    if args.action == "run":
        if args.out is None:
            raise ReleaseCheckError("contract-zoo run needs --out DIR")
        selected = cases(args.stack or list(DEFAULT_STACKS), args.model or list(MODELS),
                         args.case or [*CORRECT, *DEFECTS, *NEAR], args.shape)
        if any(c.stack == "nxdi" for c in selected) and not (args.nxdi_source and args.nxdi_python):
            raise ReleaseCheckError("the nxdi cases need --nxdi-source DIR (an NxDI tree) and --nxdi-python PY (an "
                                    "environment with transformers 4.57), or --stack hf")
        if any(c.stack == "vllm" for c in selected) and not args.vllm_python:
            raise ReleaseCheckError("the vllm cases need --vllm-python PY (a venv with vLLM and this harness, such as "
                                    ".nox/serving/bin/python)")
        rows = run(selected, args.out, args.nxdi_source, args.nxdi_python, args.vllm_python)
        wrong = [r["name"] for r in rows if (r["expected_exit"] is not None and r["exit"] != r["expected_exit"])
                 or (r.get("must_fail") and not any(f.startswith(r["must_fail"])
                                                    for f in (r.get("candidate") or {}).get("findings", [])))]
        print(f"contract-zoo: {len(rows)} cases, {len(wrong)} with an unexpected exit{': ' if wrong else ''}"
              f"{', '.join(wrong)}", file=sys.stderr)
        return 1 if wrong else 0
    if args.action == "plant":
        return plant_command(args)
    from harness.release.zoo_report import calibrate_command, table_command

    rows = load_zoo(args.folders)
    return calibrate_command(rows, args.write) if args.action == "calibrate" else table_command(rows)


def plant_command(args: argparse.Namespace) -> int:
    """``contract-zoo plant``: one defect written for one stack's candidate, as the zoo plants it, and the
    release-check options that give it to a candidate (printed on stdout), for a check the zoo does not run (a
    migration rehearsal: the documented command plus these options)."""
    stack, name = (args.stack or [None])[0], (args.case or [None])[0]
    if args.out is None or len(args.stack or []) != 1 or len(args.case or []) != 1:
        raise ReleaseCheckError("contract-zoo plant needs --out DIR, one --stack and one --case (a defect), such as "
                                "--stack vllm --case attn-scale-late")
    defect = name.removesuffix("-fp32")  # the leg is the check's dtype, not the plant's
    if defect in CORRECT or not on_stack(stack, defect):
        known = sorted({c.removesuffix("-fp32") for c in (*DEFECTS, *NEAR) if on_stack(stack, c)})
        raise ReleaseCheckError(f"--case {name}: no defect the zoo plants on {stack}; those are {', '.join(known)}")
    print(" ".join(plant_options(stack, defect, args.out, args.nxdi_source)))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("contract-zoo", help="the output contract's planted-defect zoo on real bf16 stacks: run it, "
                                            "calibrate the criterion from its correct cases, print its table")
    p.add_argument("action", choices=("run", "calibrate", "table", "plant"))
    p.add_argument("folders", nargs="*", type=Path, help="calibrate / table: contract-zoo run --out directories")
    p.add_argument("--out", type=Path, help="run: where each case's evidence and zoo.json go; plant: where the plant "
                                            "is written (its release-check options are printed)")
    p.add_argument("--stack", action="append", choices=STACKS)
    p.add_argument("--model", action="append", choices=MODELS)
    p.add_argument("--case", action="append", choices=(*CORRECT, *DEFECTS, *NEAR))
    p.add_argument("--shape", default="smoke", choices=("smoke", "contract-long"),
                   help="run: the shape every case checks at (default smoke; contract-long: batches of 2 of mixed "
                        "lengths, and a text-and-DNA prompt filling the context decoded to the sequence's end)")
    p.add_argument("--nxdi-source", type=Path, help="the NxDI tree of both nxdi sides (such as $(carbon-harness nxdi-source 2.29.0))")
    p.add_argument("--nxdi-python", help="the interpreter of the nxdi sides: transformers 4.57, as NxDI pins (such as "
                                         ".nox/trn2-stack/bin/python)")
    p.add_argument("--vllm-python", help="the interpreter of a vllm case's served candidate (vLLM and this harness, "
                                         "such as .nox/serving/bin/python)")
    p.add_argument("--write", action="store_true", help="calibrate: write fixtures/contract/ (else print)")
    p.set_defaults(func=cmd_zoo)
