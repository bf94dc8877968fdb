"""``carbon-harness``: the command line around the library (checkpoints, plans, reports, gates).

Each sub-command parses its options with small ``parse_*`` functions passed as argparse
``type=``, so bad input fails at the command line with one clear message and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.options import parse_nonneg_int, parse_positive_float, parse_positive_int
from harness.spec import MODELS, SpecError, get_model


def parse_model(value: str) -> str:
    try:
        return get_model(value).name
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from harness.checkpoint import write_checkpoint

    seed = get_model(args.model).seed if args.seed is None else args.seed  # the cache's seed by default
    write_checkpoint(args.model, args.out, seed=seed, config_only=args.config_only, force=args.force)
    print(args.out)
    return 0


def cmd_golden(args: argparse.Namespace) -> int:
    from harness.backends.hf import HFEngine
    from harness.checkpoint import cached_checkpoint
    from harness.golden import GOLDEN_TOKENS, write_golden
    from harness.spec import RunShape
    from harness.tokenizer import CarbonTokenizer

    checkpoint = cached_checkpoint(args.model, args.cache_dir.expanduser(), seed=args.seed)
    shape = RunShape("golden", batch_size=1, max_context_length=256, seq_len=256 + GOLDEN_TOKENS,
                     max_new_tokens=GOLDEN_TOKENS)
    engine = HFEngine(checkpoint, shape, args.model, device="cpu", dtype="fp32")
    print(write_golden(engine, CarbonTokenizer.from_checkpoint(checkpoint), args.out))
    return 0


def parse_shape(value: str) -> str:
    from harness.spec import get_shape

    try:
        return get_shape(value).name
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_hardware(value: str) -> str:
    from harness.hardware import HardwareError, get_profile

    try:
        return get_profile(value).name
    except HardwareError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_tolerance(value: str) -> float:
    from harness.report import parse_percent

    try:
        return parse_percent(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_acceptance(value: str) -> float:
    try:
        a = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0.0 <= a <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} must be in [0, 1] (the fraction of draft tokens accepted)")
    return a


def emit(data: dict, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


def cmd_plan(args: argparse.Namespace) -> int:
    from harness.hardware import get_profile
    from harness.plan import make_plan
    from harness.spec import get_shape

    plan = make_plan(get_model(args.model), get_shape(args.shape), get_profile(args.hardware), tp_degree=args.tp,
                     dtype=args.dtype)
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
    if args.draft:
        from harness.speculative import plan_speculation

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
    if plan.fits is False:
        print(plan.unfit_message(), file=sys.stderr)
        return 1
    return 0


def reference_speedup_lines(args: argparse.Namespace, sp, data: dict) -> list[str]:
    """The same prediction at the reference runs' measured TKG p50 of both models (fixtures/thresholds
    baselines for this hardware and shape), where both are known; the verification is taken as one
    target step (memory-bound)."""
    from harness.gates import load_thresholds
    from harness.session import default_threshold_paths
    from harness.speculative import break_even_acceptance, predicted_speedup, reference_step_ms

    thresholds = load_thresholds(default_threshold_paths(Path.cwd()))
    target_ms = reference_step_ms(thresholds, args.hardware, sp.target, args.shape)
    draft_ms = reference_step_ms(thresholds, args.hardware, sp.draft, args.shape)
    if target_ms is None or draft_ms is None:
        return [f"    (no reference TKG p50 of both models on {args.hardware} / {args.shape}: memory floors only)"]
    speedup = predicted_speedup(sp.acceptance, sp.speculation_length, draft_ms, target_ms, target_ms)
    even = break_even_acceptance(sp.speculation_length, draft_ms / target_ms)
    data["reference"] = {"target_tkg_ms_p50": target_ms, "draft_tkg_ms_p50": draft_ms,
                         "step_time_ratio": draft_ms / target_ms, "speedup": speedup, "break_even_acceptance": even}
    return [f"    at the reference TKG p50 ({sp.target} {target_ms:g} ms, {sp.draft} {draft_ms:g} ms, ratio "
            f"{draft_ms / target_ms:.3f}): predicted speedup {speedup:.2f}x; break-even acceptance "
            + (f"{even:.2f}" if even is not None else "none (the draft's step is too slow to ever pay)")]


def cmd_cost(args: argparse.Namespace) -> int:
    from harness.cost import cost
    from harness.hardware import get_profile

    profile = get_profile(args.hardware)
    price = args.price_per_hour or profile.price_per_hour
    if price is None:
        raise ValueError(f"hardware profile {profile.name!r} has no price_per_hour; pass --price-per-hour")
    c = cost(args.bp_per_s, price)
    text = (f"{profile.name} at ${price}/h, {args.bp_per_s:,.0f} bp/s: {c.bp_per_hour / 1e6:,.1f} Mbp/h, "
            f"${c.usd_per_gbp:,.2f} per Gbp, {c.mbp_per_usd:,.2f} Mbp per $")
    emit({"hardware": profile.name, **c.to_dict()}, args.json, text)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import load_results, markdown, plot
    from harness.storage import atomic_write_text

    results, _ = load_results(args.results)
    table = markdown(results)
    print(table, end="")
    if args.markdown:
        atomic_write_text(args.markdown, table)
    if args.plot:
        plot(results, args.plot)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.report import compare, load_results

    base, _ = load_results(args.base)
    new, _ = load_results(args.new)
    result = compare(base, new, args.max_regression)
    print(result.render())
    for d in result.regressions:
        print(f"REGRESSION {d.benchmark} {d.metric}: {d.base:.4g} -> {d.new:.4g} ({100 * d.change:+.1f}%)",
              file=sys.stderr)
    return 1 if result.regressions else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carbon-harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("checkpoint", help="write a synthetic Carbon checkpoint (real architecture, seeded weights)")
    p.add_argument("--model", required=True, type=parse_model, help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--out", required=True, type=Path, help="directory to create (must be empty or absent)")
    p.add_argument("--seed", type=parse_nonneg_int, default=None, help="default: the model's (0; carbon-tiny-draft 1)")
    p.add_argument("--config-only", action="store_true", help="write everything but the weights")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser("golden", help="regenerate golden outputs (fp32 CPU greedy tokens of the DNA suite)")
    p.add_argument("--model", default="carbon-tiny", type=parse_model)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=parse_nonneg_int, default=0)
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/carbon-harness"))
    p.set_defaults(func=cmd_golden)

    p = sub.add_parser("plan", help="GQA sharding, per-rank HBM and roofline floors, before any compile")
    p.add_argument("--model", required=True, type=parse_model)
    p.add_argument("--shape", required=True, type=parse_shape)
    p.add_argument("--hardware", default="trn2.3xlarge", type=parse_hardware)
    p.add_argument("--tp", type=parse_positive_int, default=None, help="tensor-parallel degree (default: the shape's)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32", "fp8"])
    p.add_argument("--json", action="store_true")
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

    p = sub.add_parser("report", help="the reference tables from pytest-benchmark JSON")
    p.add_argument("results", type=Path)
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    p.add_argument("--plot", type=Path, help="throughput bar chart (PNG; needs the [plot] extra)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="release gate: exit 1 on any regression beyond --max-regression")
    p.add_argument("base", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--max-regression", type=parse_tolerance, default=0.05, help="e.g. 5%% (default) or 0.05")
    p.set_defaults(func=cmd_compare)
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
        print(f"carbon-harness {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
