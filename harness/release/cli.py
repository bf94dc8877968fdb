"""``carbon-harness release-check``: its options, checked before anything runs, and its exit codes
(``harness.core.verdicts``: 0 PASS, 1 FAIL, 3 INCONCLUSIVE; 2 a usage or environment error, such as a
baseline that cannot run)."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import sys
from pathlib import Path

from harness.analysis.compare import Tolerances, load_tolerances
from harness.analysis.verdict import DEFAULT_TOLERANCE, merge, merged_markdown
from harness.core.options import (
    parse_endpoint as parse_endpoint_url,
    parse_confidence,
    parse_model,
    parse_nonempty_path,
    parse_positive_int,
    parse_shape,
    parse_tolerance,
)
from harness.core.sequential import Design
from harness.core.storage import atomic_write_json, atomic_write_text
from harness.core.verdicts import exit_code
from harness.release.device_options import add_device_options, stash_image_pythons, with_device_options
from harness.release.errors import CheckStopped, ReleaseCheckError, stop_on_signals
from harness.release.legs import parse_legs, rehearsed, split_legs, with_legs
from harness.release.plan import CONFORMANCE_MARKERS, CheckPlan, Side
from harness.release.run import run_check

BACKENDS = ("neuron", "hf", "openai")
DTYPES = ("fp32", "bf16")  # those the output contract has a calibrated criterion for
MIN_ROUNDS = 3  # a between-round interval needs at least two degrees of freedom to mean anything
# The sequential design's defaults (harness.core.sequential; docs/release-check.md "Gate power": what they resolve at
# the noise measured on a 2-core CPU box, quiet and loaded).
DEFAULT_DESIGN = Design()


def parse_rounds(value: str) -> int:
    n = parse_positive_int(value)
    if n < MIN_ROUNDS:
        raise argparse.ArgumentTypeError(f"{value!r}: at least {MIN_ROUNDS} rounds per side (the interval comes from "
                                         "the spread between rounds)")
    return n


def parse_fraction(value: str) -> float:
    """A change such as 0.30 or 30%: what every PASS must rule out."""
    try:
        number = float(value.rstrip("%")) / (100.0 if value.endswith("%") else 1.0)
    except ValueError:
        number = math.nan
    if not 0 < number < 10:
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive change, as 0.30 or 30%")
    return number


def design_of(args: argparse.Namespace) -> Design:
    """The looks and error budget from the options; ``--rounds N`` is a fixed count (one look)."""
    if args.rounds is not None:
        if args.min_rounds is not None or args.max_rounds is not None:
            raise ReleaseCheckError("--rounds N fixes the count: give it alone, or --min-rounds / --max-rounds for "
                                    "a sequential check")
        low = high = args.rounds
    else:
        low = args.min_rounds if args.min_rounds is not None else DEFAULT_DESIGN.min_pairs
        high = args.max_rounds if args.max_rounds is not None else max(DEFAULT_DESIGN.max_pairs, low)
        if high < low:
            raise ReleaseCheckError(f"--max-rounds {high} is below --min-rounds {low}")
    return Design(min_pairs=low, max_pairs=high, alpha=1.0 - args.confidence, beta=DEFAULT_DESIGN.beta,
                  resolve=args.resolve, legs=split_legs(args.legs)[0])


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("release-check", help="qualify an NxDI / Neuron SDK release: the same suite in a baseline and "
                                             "a candidate environment, perf rounds interleaved, one verdict")
    p.add_argument("--baseline-python", metavar="PY", help="interpreter of the environment with the current release")
    p.add_argument("--candidate-python", metavar="PY", help="interpreter of the environment with the candidate release "
                                                            "(hf with a --*-dtype: this interpreter by default)")
    p.add_argument("--backend", choices=BACKENDS, default="neuron",
                   help="both sides' stack: neuron (NxDI), hf (transformers), openai (a vLLM server: started with "
                        "each side's own interpreter, or the team's at --*-endpoint); default neuron")
    for name in ("baseline", "candidate"):
        p.add_argument(f"--{name}-backend", choices=BACKENDS, help=f"the {name}'s stack, where the sides differ (a "
                                                                   "migration: --baseline-backend neuron "
                                                                   "--candidate-backend openai)")
        p.add_argument(f"--{name}-endpoint", type=parse_endpoint, metavar="URL",
                       help=f"an openai {name}: the server the team runs (the check then starts none)")
        p.add_argument(f"--{name}-env", type=parse_env, action="append", metavar="NAME=VALUE",
                       help=f"repeatable: an environment variable for the {name}'s processes (its server included)")
        p.add_argument(f"--{name}-dtype", choices=DTYPES, help=f"the {name}'s dtype, where the sides differ (as --dtype)")
    p.add_argument("--dtype", choices=DTYPES,
                   help="both sides' dtype: transformers' torch dtype, NeuronConfig's torch_dtype, the --dtype of a vLLM "
                        "server the check starts, what a team's server runs (default: each backend's own, as the "
                        "engine reports it: fp32 on a CPU, bf16 on a device, fp32 for a started server; bf16 for "
                        "NxDI's CPU mode and a VLLM_DEVICE=cpu serve script where --neuron-instance plans a Trn2 "
                        "instance: the device's, rehearsed on the CPU, the fp32 leg beside it); it picks "
                        "the output contract's criterion and is recorded in verdict.json")
    p.add_argument("--neuron-cpu", action="store_true",
                   help="run the neuron side(s) in NxDI's CPU mode, from NxDI source trees (no Trainium needed), "
                        "each in --*-python if given, else this interpreter")
    p.add_argument("--serve-arg", action="append", dest="serve_args", metavar="=ARG",
                   help="repeatable, as --serve-arg=--enforce-eager: added to the vLLM servers the check starts, "
                        "both sides alike (the team's flags; docs/stacks-and-migration.md: the shape's vllm serve flags)")
    p.add_argument("--baseline-nxdi-source", type=Path, metavar="DIR",
                   help="with --neuron-cpu: a tree with neuronx-distributed-inference/src and neuronx-distributed/src")
    p.add_argument("--candidate-nxdi-source", type=Path, metavar="DIR", help="with --neuron-cpu: the candidate's tree")
    p.add_argument("--model", action="append", type=parse_model, dest="models",
                   help="repeatable, as --carbon-model (default carbon-tiny)")
    p.add_argument("--shape", action="append", type=parse_shape, dest="shapes",
                   help="repeatable, as --carbon-shape (default smoke)")
    p.add_argument("--out", type=Path, help="evidence directory: verdict.json, verdict.md, each side's logs, "
                                            "benchmark JSON and JUnit XML (must be empty or absent)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.add_argument("--min-rounds", type=parse_rounds, metavar="N",
                   help=f"pairs of perf rounds (each a fresh process, A B / B A) before the first look (default "
                        f"{DEFAULT_DESIGN.min_pairs}, at least {MIN_ROUNDS})")
    p.add_argument("--max-rounds", type=parse_rounds, metavar="N",
                   help=f"pairs at most: a gated figure still undecided then makes the verdict INCONCLUSIVE (exit 3; "
                        f"default {DEFAULT_DESIGN.max_pairs})")
    p.add_argument("--rounds", type=parse_rounds, metavar="N",
                   help="a fixed number of pairs instead (one look; docs/release-check.md: gate power)")
    p.add_argument("--resolve", type=parse_fraction, default=DEFAULT_DESIGN.resolve, metavar="CHANGE",
                   help=f"the slowdown every PASS must rule out (default {100 * DEFAULT_DESIGN.resolve:g}%%)")
    p.add_argument("--fail-on-likely", action="store_true",
                   help="a passed figure likely slower than its tolerance (point estimate, or its interval at the "
                        "look that passed it, beyond it) fails the check; without it, a warning above the verdict")
    p.add_argument("--gate-work", type=parse_tolerance, default=None, metavar="PCT",
                   help="off by default: fail where a CTE / TKG step's exact work (Python calls or aten ops per step, "
                        "counted outside the timed calls) grows by more than PCT (e.g. 2%%), for machines too noisy to "
                        "gate small timing changes; each side's counts must be the same in all its rounds to be gated")
    p.add_argument("--timer", choices=("auto", "cpu", "wall"), default="auto",
                   help="what the perf rounds time: auto (default) times sides that run on the host (NxDI's CPU mode, "
                        "transformers) in process CPU time, which a busy neighbour disturbs least and a sleep or a "
                        "wait does not spend; wall times them in wall time; cpu is auto's choice, refused for a "
                        "served or device side, whose work is outside the client's process")
    p.add_argument("--legs", type=parse_legs, action="append", metavar="LEGS|N",
                   help="the output contract's legs: bf16,fp32 (default where the sides compute in bf16: the contract "
                        "again in fp32, on a Trn2 host in each stack's CPU mode, no second perf rounds) or bf16 (the "
                        "sides' dtype alone); or N, checks merged into one verdict (--merge): each spends 1/N of the "
                        "false-alarm budget")
    p.add_argument("--runs", type=parse_positive_int, default=5, help="timed runs per benchmark in a round (default 5)")
    p.add_argument("--max-regression", type=parse_tolerance, default=DEFAULT_TOLERANCE,
                   help="default tolerance of a gated timing (default 5%%)")
    p.add_argument("--tolerances", type=Path, metavar="FILE", help="per-metric tolerances, as compare --tolerances")
    p.add_argument("--confidence", type=parse_confidence, default=0.95,
                   help="1 - the family-wise false-alarm rate of the verdict, and the confidence of the intervals "
                        "shown (default 0.95)")
    p.add_argument("--no-conformance", action="store_true", help="perf rounds only (skip the conformance tiers)")
    p.add_argument("--conformance-only", action="store_true",
                   help="the correctness half alone: the conformance tiers and the output contract, no perf rounds "
                        "(minutes)")
    p.add_argument("--conformance-markers", metavar="EXPR", default=CONFORMANCE_MARKERS,
                   help=f"pytest -m expression of the conformance tiers (default {CONFORMANCE_MARKERS!r})")
    p.add_argument("--perf-select", metavar="EXPR", help="pytest -k expression for the perf rounds")
    p.add_argument("--cache-dir", type=parse_nonempty_path, help="checkpoints and compiled artifacts of both sides")
    p.add_argument("--model-root", type=Path, metavar="DIR",
                   help="real checkpoints (Carbon-500M, Carbon-3B, Carbon-8B), as --carbon-model-root")
    p.add_argument("--merge", type=Path, nargs="+", metavar="DIR",
                   help="merge mode: the --out directories of several legs into one verdict in --out")
    add_device_options(p)  # Trn2: NeuronCores, serve scripts, images, evidence on FAIL (harness.release.device_options)
    p.set_defaults(func=cmd_release_check)


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ReleaseCheckError(f"--out {out} is a file: give a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ReleaseCheckError(f"--out {out} is not empty: give a new directory, or --force to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def parse_env(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key or not key.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"{value!r}: give NAME=VALUE (an environment variable for that side)")
    return key, val


def parse_endpoint(value: str) -> str:
    try:
        return parse_endpoint_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--carbon-endpoint ", "")) from None


def side_of(args: argparse.Namespace, name: str) -> Side:
    """One side from its options: the backend (``--{name}-backend``, else ``--backend``), the
    environment (``--{name}-python``, or in NxDI's CPU mode an NxDI tree run by this interpreter), a
    served side's endpoint, its own variables."""
    backend = getattr(args, f"{name}_backend") or args.backend
    python, source, endpoint = (getattr(args, f"{name}_{k}") for k in ("python", "nxdi_source", "endpoint"))
    env = tuple(getattr(args, f"{name}_env") or ())
    dtype = getattr(args, f"{name}_dtype") or args.dtype
    if source is not None and not (args.neuron_cpu and backend == "neuron"):
        raise ReleaseCheckError(f"--{name}-nxdi-source runs an NxDI tree in NxDI's CPU mode: it needs --neuron-cpu and "
                                f"the neuron backend on the {name} (it is {backend}); on a device each side is an "
                                f"environment: --{name}-python")
    if endpoint is not None and backend != "openai":
        raise ReleaseCheckError(f"--{name}-endpoint is a served side's server: it needs --{name}-backend openai "
                                f"(the {name} is {backend})")
    if backend == "neuron" and args.neuron_cpu:
        interpreter = shutil.which(python) if python else sys.executable  # default: this one
        if interpreter is None:
            raise ReleaseCheckError(f"--{name}-python {python}: no such executable")
        if source is None:
            raise ReleaseCheckError(f"--neuron-cpu needs --{name}-nxdi-source DIR (an NxDI source tree)")
        from harness.backends.neuron.sources import NeuronImportError, source_roots

        try:
            source_roots(source)
        except NeuronImportError as exc:
            raise ReleaseCheckError(str(exc).replace("--carbon-nxdi-source", f"--{name}-nxdi-source")) from None
        return Side(name, interpreter, source.expanduser().resolve(), backend, env=env, dtype=dtype)
    if not python:
        if backend == "openai" and endpoint is not None:
            python = sys.executable  # the client side only: the team runs the server
        elif backend == "hf" and dtype is not None:
            python = sys.executable  # one transformers environment qualified in two dtypes
        else:
            what = "whose vLLM starts its server" if backend == "openai" else f"with the {name} release"
            raise ReleaseCheckError(f"give --{name}-python PY (the interpreter of the environment {what})"
                                    + (f", or --{name}-endpoint URL of a server the team runs" if backend == "openai"
                                       else ", or --neuron-cpu with two NxDI source trees" if backend == "neuron"
                                       else f", or --{name}-dtype to qualify a dtype in this environment"))
    found = shutil.which(python)
    if found is None:
        raise ReleaseCheckError(f"--{name}-python {python}: no such executable")
    return Side(name, found, None, backend, endpoint=endpoint, env=env, dtype=dtype)


def sides(args: argparse.Namespace) -> tuple[Side, Side]:
    return side_of(args, "baseline"), side_of(args, "candidate")


def cmd_release_check(args: argparse.Namespace) -> int:
    if args.out is None:
        raise ReleaseCheckError("--out DIR is required: the verdict and the evidence go there")
    if args.merge:
        return merge_legs(args.merge, args.out, args.force)
    if args.conformance_only and args.no_conformance:
        raise ReleaseCheckError("--conformance-only and --no-conformance leave nothing to run: give one")
    dtype_args = [a for a in (args.serve_args or ()) if a.split("=", 1)[0] == "--dtype"]
    if dtype_args:
        raise ReleaseCheckError(f"--serve-arg={dtype_args[0]}: give the dtype as --dtype / --baseline-dtype / "
                                "--candidate-dtype, which start the server with it and pick the contract's criterion")
    image_pythons = stash_image_pythons(args)
    baseline, candidate = sides(args)
    if args.model_root is not None and not args.model_root.is_dir():
        raise ReleaseCheckError(f"--model-root {args.model_root} is not a directory")
    tolerances = (load_tolerances(args.tolerances, args.max_regression) if args.tolerances
                  else Tolerances(default=args.max_regression))
    design = design_of(args)
    _check_out(args.out, args.force)
    plan = CheckPlan(baseline, candidate, args.out.resolve(), models=tuple(args.models or ("carbon-tiny",)),
                     shapes=tuple(args.shapes or ("smoke",)), design=design, runs=args.runs,
                     cache_dir=Path(args.cache_dir).expanduser() if args.cache_dir else None, cpu=args.neuron_cpu,
                     model_root=args.model_root, conformance=not args.no_conformance,
                     conformance_markers=args.conformance_markers, perf_select=args.perf_select,
                     serve_args=tuple(args.serve_args or ()), perf=not args.conformance_only,
                     gate_work=None if args.gate_work is None else 100 * args.gate_work, timer=args.timer)
    if plan.timer == "cpu" and not plan.in_process:
        raise ReleaseCheckError(f"--timer cpu: {plan.baseline.backend} -> {plan.candidate.backend} does its work "
                                "outside the client's process (a server or a device); give --timer wall or auto")
    # a CPU rehearsal of a Trn2 instance's check runs the device's bf16, then the fp32 leg (harness.release.legs)
    plan = with_legs(rehearsed(with_device_options(args, plan, image_pythons)), args.legs)
    previous = stop_on_signals()
    try:
        verdict = run_check(plan, tolerances, args.confidence, fail_on_likely=args.fail_on_likely)
    except CheckStopped as stopped:
        print(f"release-check: stopped by {stopped.name}: the vLLM servers it started are stopped, no verdict; the "
              f"evidence written so far is in {args.out}", file=sys.stderr)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(verdict.markdown())
    print(f"release-check: {verdict.summary()}; {verdict.wall_s:.0f} s; evidence in {args.out}", file=sys.stderr)
    return exit_code(verdict.word)


def merge_legs(folders: list[Path], out: Path, force: bool) -> int:
    verdicts, labels = [], []
    for folder in folders:
        path = folder / "verdict.json"
        if not path.is_file():
            raise ReleaseCheckError(f"--merge {folder}: no verdict.json there (a release-check --out directory)")
        verdicts.append(json.loads(path.read_text()))
        labels.append(folder.name)
    if out.exists() and any(out.iterdir()) and not force:
        raise ReleaseCheckError(f"--out {out} is not empty: give a new directory, or --force to replace it")
    merged = merge(verdicts, labels)
    atomic_write_json(out / "verdict.json", merged)
    atomic_write_text(out / "verdict.md", merged_markdown(merged))
    print(merged_markdown(merged))
    return exit_code(merged["verdict"])
