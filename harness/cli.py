"""``carbon-harness``: the command line around the library (checkpoints, plans, reports, gates).

Each sub-command parses its options with small ``parse_*`` functions passed as argparse
``type=``, so bad input fails at the command line with one clear message and exit code 2. The
sub-commands that drive one module live beside it and add their own parsers: ``report`` /
``compare`` / ``thresholds`` in ``harness.analysis.cli``, ``vllm-serve`` in
``harness.core.vllm_neuron``, ``release-check`` in ``harness.release.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from harness.core.options import (
    parse_acceptance,
    parse_hardware,
    parse_model,
    parse_nonempty_path,
    parse_nonneg_int,
    parse_positive_float,
    parse_positive_int,
    parse_shape,
)
from harness.core.spec import MODELS, get_model
from harness.core.troubleshooting import PointingParser, explain_pointer


def model_with_rope_scaling(model: str, rope_scaling: str | None):
    """The model's spec, extended by ``--rope-scaling`` when given (a bad value raises SpecError)."""
    from harness.core.spec import parse_rope_scaling

    spec = get_model(model)
    return spec.with_rope_scaling(parse_rope_scaling(rope_scaling, spec)) if rope_scaling else spec


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from harness.carbon.checkpoint import write_checkpoint

    seed = get_model(args.model).seed if args.seed is None else args.seed  # the cache's seed by default
    write_checkpoint(model_with_rope_scaling(args.model, args.rope_scaling), args.out, seed=seed,
                     config_only=args.config_only, force=args.force)
    print(args.out)
    return 0


def cmd_golden(args: argparse.Namespace) -> int:
    from harness.backends.hf import HFEngine
    from harness.carbon.checkpoint import cached_checkpoint, verify_checkpoint
    from harness.carbon.tokenizer import CarbonTokenizer
    from harness.core.spec import RunShape
    from harness.core.storage import refuse_existing_out
    from harness.workloads.golden import GOLDEN_TOKENS, write_golden

    # before any generating: a committed golden is what every accuracy check compares against
    refuse_existing_out(args.out, args.force, "golden")
    checkpoint = cached_checkpoint(args.model, Path(args.cache_dir).expanduser(), seed=args.seed)
    if not verify_checkpoint(checkpoint):  # goldens only from weights whose every byte was checked
        raise ValueError(f"{checkpoint} has no manifest to verify its files against; goldens are not written "
                         "from unverified weights")
    shape = RunShape("golden", batch_size=1, max_context_length=256, seq_len=256 + GOLDEN_TOKENS,
                     max_new_tokens=GOLDEN_TOKENS)
    engine = HFEngine(checkpoint, shape, args.model, device="cpu", dtype="fp32")
    print(write_golden(engine, CarbonTokenizer.from_checkpoint(checkpoint), args.out))
    return 0


def emit(data: dict, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


def cmd_plan(args: argparse.Namespace) -> int:
    from harness.core.hardware import get_profile
    from harness.core.plan import make_plan
    from harness.core.spec import get_shape

    plan = make_plan(model_with_rope_scaling(args.model, args.rope_scaling), get_shape(args.shape),
                     get_profile(args.hardware), tp_degree=args.tp, dtype=args.dtype)
    data = plan.to_dict()
    gib = 2**30
    s = plan.sharding
    lines = [
        f"{plan.model} / {plan.shape} on {plan.hardware}, tp={plan.tp_degree}, {plan.dtype}",
        f"  attention sharding: {s.strategy}{' (fallback: NxDI logs Overriding attention sharding strategy)' if s.fallback else ''}",
        f"  heads {s.source_heads} -> {s.num_heads}, KV heads {s.source_kv_heads} -> {s.num_kv_heads}",
        f"  per rank: weights {plan.weight_bytes_per_rank / gib:.3f} GiB, KV cache {plan.kv_bytes_per_rank / gib:.3f} GiB "
        f"({plan.kv_bytes_model_heads_per_rank / gib:.3f} GiB with the model's own KV heads)",
    ]
    if plan.hbm_bytes_per_rank is not None:
        lines.append(f"  HBM per rank {plan.hbm_bytes_per_rank / gib:.2f} GiB: {'fits' if plan.fits else 'DOES NOT FIT'}")
    if plan.cte_floor_ms is not None:
        lines.append(f"  roofline floors: CTE >= {plan.cte_floor_ms:.3f} ms (compute), TKG >= {plan.tkg_floor_ms:.3f} ms (memory)")
    lines.append(f"  context: {plan.context_tokens} positions of max_position_embeddings {plan.max_position_embeddings}"
                 f"{' (rope scaling ' + str(plan.rope_scaling) + ')' if plan.rope_scaling else ''}: "
                 f"{'fits' if plan.context_fits else 'DOES NOT FIT'}")
    if plan.logits_bytes_per_rank:
        lines.append(f"  scoring logits at every position: {plan.logits_bytes_per_rank / gib:.3f} GiB per rank")
    if args.draft:
        from harness.analysis.speculation_plan import plan_speculation

        sp = plan_speculation(args.model, args.draft, args.shape, get_profile(args.hardware), args.acceptance,
                              args.speculation_length, tp_degree=args.tp, dtype=args.dtype)
        data["speculative"] = sp.to_dict()
        even = (f"{sp.break_even_acceptance:.2f}" if sp.break_even_acceptance is not None
                else "none (the draft's step is too slow to ever pay)")
        lines += [f"  speculative decoding with {sp.draft}, k={sp.speculation_length}, acceptance {sp.acceptance:.2f}: "
                  f"{sp.expected_tokens_per_step:.2f} tokens/step, draft/target step {sp.step_time_ratio:.3f}, "
                  f"predicted speedup {sp.speedup:.2f}x",
                  f"    memory floors: target step {sp.target_tkg_floor_ms:.3f} ms, draft step {sp.draft_tkg_floor_ms:.3f} ms, "
                  f"verification {sp.verify_floor_ms:.3f} ms; break-even acceptance {even}"]
        lines += reference_speedup_lines(args, sp, data["speculative"])
    emit(data, args.json, "\n".join(lines))
    if not plan.context_fits:
        print(plan.context_message(), file=sys.stderr)
        return 1
    if plan.fits is False:
        print(plan.unfit_message(), file=sys.stderr)
        return 1
    return 0


def reference_speedup_lines(args: argparse.Namespace, sp, data: dict) -> list[str]:
    """The prediction at the reference runs' measured TKG p50 of both models, and which figure stands
    (``harness.analysis.speculation_plan.reference_speedup``)."""
    from harness.analysis.gates import load_thresholds
    from harness.analysis.speculation_plan import reference_speedup
    from harness.core.hardware import get_profile
    from harness.core.paths import default_threshold_paths

    ref = reference_speedup(load_thresholds(default_threshold_paths(Path.cwd())), sp, args.shape,
                            get_profile(args.hardware))
    if ref is None:
        return [f"    (no reference TKG p50 of both models on {args.hardware} / {args.shape}: memory floors only)"]
    data["reference"] = ref.to_dict()
    return ref.lines(sp)


def cmd_cost(args: argparse.Namespace) -> int:
    from harness.core.cost import cost
    from harness.core.hardware import get_profile

    profile = get_profile(args.hardware)
    price = args.price_per_hour or profile.price_per_hour
    if price is None:
        raise ValueError(f"hardware profile {profile.name!r} has no price_per_hour; pass --price-per-hour")
    c = cost(args.bp_per_s, price)
    text = (f"{profile.name} at ${price}/h, {args.bp_per_s:,.0f} bp/s: {c.bp_per_hour / 1e6:,.1f} Mbp/h, "
            f"${c.usd_per_gbp:,.2f} per Gbp, {c.mbp_per_usd:,.2f} Mbp per $")
    emit({"hardware": profile.name, **c.to_dict()}, args.json, text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = PointingParser(prog="carbon-harness", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("checkpoint", help="write a synthetic Carbon checkpoint (real architecture, seeded weights)")
    p.add_argument("--model", required=True, type=parse_model, help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--out", required=True, type=Path, help="directory to create (must be empty or absent)")
    p.add_argument("--seed", type=parse_nonneg_int, default=None, help="default: the model's (0; carbon-tiny-draft 1)")
    p.add_argument("--config-only", action="store_true", help="write everything but the weights")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.add_argument("--rope-scaling", metavar="yarn:FACTOR[:ORIGINAL]",
                   help="write rope_scaling into config.json and extend max_position_embeddings (e.g. yarn:4)")
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser("golden", help="regenerate golden outputs (fp32 CPU greedy tokens of the DNA suite)")
    p.add_argument("--model", default="carbon-tiny", type=parse_model)
    p.add_argument("--out", required=True, type=Path, help="the golden JSON to write (atomically)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--seed", type=parse_nonneg_int, default=0)
    p.add_argument("--cache-dir", type=parse_nonempty_path, default="~/.cache/carbon-harness")
    p.set_defaults(func=cmd_golden)

    p = sub.add_parser("plan", help="GQA sharding, per-rank HBM and roofline floors, before any compile")
    p.add_argument("--model", required=True, type=parse_model)
    p.add_argument("--shape", required=True, type=parse_shape)
    p.add_argument("--hardware", default="trn2.3xlarge", type=parse_hardware)
    p.add_argument("--tp", type=parse_positive_int, default=None, help="tensor-parallel degree (default: the shape's)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32", "fp8"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--rope-scaling", metavar="yarn:FACTOR[:ORIGINAL]",
                   help="plan with a YaRN context extension (e.g. yarn:4 for the scan-64k shape)")
    p.add_argument("--draft", type=parse_model, help="speculative draft model: predict the speedup of the pairing")
    p.add_argument("--acceptance", type=parse_acceptance, help="with --draft: expected draft-token acceptance rate")
    p.add_argument("--speculation-length", type=parse_positive_int, default=4, help="with --draft: draft tokens per step")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("cost", help="$ per Gbp and Mbp per $ of a bp/s throughput on a hardware profile")
    p.add_argument("--hardware", required=True, type=parse_hardware)
    p.add_argument("--bp-per-s", required=True, type=parse_positive_float)
    p.add_argument("--price-per-hour", type=parse_positive_float, help="override the profile's price")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)
    from harness.analysis.cli import add_parsers as add_analysis_commands
    from harness.core.explain import add_parser as add_explain
    from harness.core.vllm_neuron import add_parser as add_vllm_serve
    from harness.history.cli import add_parser as add_history
    from harness.release.cli import add_parser as add_release_check
    from harness.release.nxdi_source import add_parser as add_nxdi_source
    from harness.release.zoo import add_parser as add_contract_zoo

    add_analysis_commands(sub)
    add_vllm_serve(sub)
    add_release_check(sub)
    add_nxdi_source(sub)
    add_contract_zoo(sub)
    add_explain(sub)
    add_history(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "plan" and (args.draft is None) != (args.acceptance is None):
        parser.error("--acceptance needs --draft" if args.draft is None else
                     "--draft needs --acceptance A (the expected draft-token acceptance rate, in [0, 1])")
    try:
        return args.func(args)
    except (ValueError, OSError) as exc:
        if os.environ.get("CARBON_HARNESS_TRACEBACK"):  # where an error came from, for a report
            traceback.print_exc()
        print(f"carbon-harness {args.command}: error: {exc}{explain_pointer(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
