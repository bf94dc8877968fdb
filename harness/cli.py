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

from harness.core.options import (
    parse_acceptance,
    parse_confidence,
    parse_hardware,
    parse_model,
    parse_nonempty_path,
    parse_nonneg_int,
    parse_positive_float,
    parse_positive_int,
    parse_shape,
    parse_tolerance,
)
from harness.core.spec import MODELS, get_model


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
    from harness.workloads.golden import GOLDEN_TOKENS, write_golden

    # before any generating: a committed golden is what every accuracy check compares against
    _refuse_existing_out(args.out, args.force, "golden")
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


def _refuse_existing_out(out: Path, force: bool, what: str) -> None:
    """A written file (a golden, a thresholds file) replaces what others compare against: only with --force."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory: give the {what} file to write")
    if out.exists() and not force:
        raise ValueError(f"--out {out} exists: refusing to overwrite it; pass --force to replace it")


def _refuse_overwrite(inputs: Sequence[Path], outputs: dict[str, Path | None]) -> None:
    """An output option naming one of the inputs would destroy it: refuse before reading anything."""
    for option, out in outputs.items():
        if out is None:
            continue
        for src in inputs:
            if out.resolve() == src.resolve() or (out.exists() and src.exists() and out.samefile(src)):
                raise ValueError(f"{option} {out} is the input file {src}: refusing to overwrite it; "
                                 "write to another path")


def cmd_report(args: argparse.Namespace) -> int:
    from harness.analysis.report import html_page, markdown, plot
    from harness.analysis.results import load_results
    from harness.core.storage import atomic_write_json, atomic_write_text

    _refuse_overwrite([args.results], {"--markdown": args.markdown, "--plot": args.plot,
                                       "--nxdi-report": args.nxdi_report, "--html": args.html})
    results, manifest = load_results(args.results)
    table = markdown(results, manifest)
    print(table, end="")
    if args.markdown:
        atomic_write_text(args.markdown, table)
    if args.plot:
        plot(results, args.plot, manifest)
    if args.html:
        from harness.analysis.results import ReportError

        try:
            png = plot(results, None, manifest, fmt="png")
        except ReportError as exc:  # no matplotlib, or nothing in bp/s: the page without its plot
            print(f"--html: no plot ({exc})", file=sys.stderr)
            png = None
        atomic_write_text(args.html, html_page(results, manifest, png))
        print(f"HTML report: {args.html}")
    if args.nxdi_report:
        from harness.analysis.results import to_nxdi

        atomic_write_json(args.nxdi_report, to_nxdi(results, args.nxdi_select))
        print(f"NxDI benchmark report: {args.nxdi_report}")
    return 0


def _load_side(path: Path, other: Path, select: str | None):
    """Results of one side of a comparison; a harness run compared with an NxDI report is turned
    into NxDI's form first (the one benchmark --nxdi-select names), so the same fields line up."""
    from harness.analysis.compare import require_round_data
    from harness.analysis.results import ReportError, from_nxdi, is_nxdi_report, load_results, to_nxdi
    from harness.core.storage import load_json

    results, manifest = load_results(path)
    if is_nxdi_report(load_json(other, ReportError, "benchmark JSON")) and not is_nxdi_report(
            load_json(path, ReportError, "benchmark JSON")):
        return from_nxdi(to_nxdi(results, select), f"{path} (as an NxDI report)"), manifest
    require_round_data(results, path)  # point estimates are all an NxDI report has; a harness run keeps rounds
    return results, manifest


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.analysis.compare import (
        FLOORS_FILE,
        Tolerances,
        compare,
        default_tolerance,
        hardware_name,
        load_floors,
        load_hardware_tolerances,
        load_lines,
        load_tolerances,
    )

    floors = load_floors(args.floors or FLOORS_FILE)
    (base, base_manifest), (new, new_manifest) = (_load_side(args.base, args.new, args.nxdi_select),
                                                  _load_side(args.new, args.base, args.nxdi_select))
    for line in load_lines([(str(args.base), base_manifest), (str(args.new), new_manifest)]):
        print(line)
    default, why = ((args.max_regression, "--max-regression") if args.max_regression is not None else
                    default_tolerance(hardware_name(base_manifest), hardware_name(new_manifest),
                                      load_hardware_tolerances()))
    tolerances = (load_tolerances(args.tolerances, default) if args.tolerances else Tolerances(default=default))
    print(f"tolerance: {100 * default:g}% by default, from {why}")
    result = compare(base, new, tolerances, confidence=args.confidence, floors=floors)
    print(result.render())
    for d in result.regressions:
        span = d.interval()
        ci = (f"; {100 * args.confidence:g}% CI of the change [{100 * span[0]:+.1f}%, {100 * span[1]:+.1f}%]"
              if span else "; point estimate")
        print(f"REGRESSION {d.benchmark} {d.metric}: {d.base:.4g} -> {d.new:.4g} {d.unit} ({d.describe()}{ci}; "
              f"tolerance {100 * d.tolerance:g}%)", file=sys.stderr)
    for problem in result.failures:
        print(f"FAILED {problem}", file=sys.stderr)
    return 1 if result.failed else 0


def cmd_vllm_serve(args: argparse.Namespace) -> int:
    from harness.core.spec import get_shape
    from harness.core.vllm_neuron import serve_command

    print(serve_command(args.model, get_shape(args.shape), args.served_model_name, args.port).shell())
    return 0


def cmd_thresholds(args: argparse.Namespace) -> int:
    """A thresholds file from a run, checked before it is written: the loader accepts it and the run
    it came from passes it."""
    from harness.analysis.gates import ThresholdError, check_ambiguous, parse_thresholds
    from harness.analysis.compare import load_hardware_tolerances
    from harness.analysis.thresholds import derivation_warnings, gate_run, render, run_benchmarks, thresholds_document
    from harness.core.storage import atomic_write_text, load_json

    _refuse_overwrite([args.source], {"--out": args.out})
    _refuse_existing_out(args.out, args.force, "thresholds")
    data = load_json(args.source, ValueError, "benchmark JSON")
    for line in derivation_warnings(data, args.headroom, args.sdk, load_hardware_tolerances()):
        print(line, file=sys.stderr)
    document, derivation = thresholds_document(data, str(args.source), args.headroom, args.sdk, args.note)
    text = render(document)
    try:
        parsed = parse_thresholds(json.loads(text), str(args.out))
        check_ambiguous(parsed)
    except ThresholdError as exc:
        raise ValueError(f"the derived file would not load: {exc}") from None
    results = gate_run(parsed, run_benchmarks(data, str(args.source)))
    failed = [r.message() for r in results if not r.passed]
    if failed:
        raise ValueError(f"the derived file fails the run it came from: {'; '.join(failed)}")
    atomic_write_text(args.out, text)
    for line in derivation.skipped:
        print(f"skipped {line}", file=sys.stderr)
    print(f"{args.out}: {len(parsed)} thresholds from {args.source} (headroom {100 * args.headroom:g}%); "
          f"its run passes all {len(results)} gates they set")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carbon-harness", description=__doc__.splitlines()[0])
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

    p = sub.add_parser("report", help="the report of a run (title, hardware, versions, verdict, table with its "
                                      "gates) from pytest-benchmark JSON")
    p.add_argument("results", type=Path)
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    p.add_argument("--plot", type=Path, help="throughput bar chart in bp/s with its thresholds, in the format of "
                                              "the suffix (.png, .svg, .pdf; needs the [plot] extra)")
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="also write one self-contained HTML page (verdict, hardware, versions, table, the plot "
                        "embedded) to open in a browser")
    p.add_argument("--nxdi-report", type=Path, metavar="FILE",
                   help="also write NxDI's benchmark_report.json from one generation benchmark of the run")
    p.add_argument("--nxdi-select", metavar="SUBSTRING", help="the benchmark for --nxdi-report (part of its name)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="release gate: exit 1 on any regression beyond --max-regression")
    p.add_argument("base", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--max-regression", type=parse_tolerance, default=None,
                   help="e.g. 5%% or 0.05; default: the A/A spread of both runs' hardware in "
                        "fixtures/compare/tolerances.json (cpu 50%%), else 5%%")
    p.add_argument("--tolerances", type=Path, metavar="FILE",
                   help='per-metric / per-group tolerances: {"default": "5%%", "metrics": {"tkg_ms_p50": "8%%"}, '
                        '"groups": {"e2e-smoke": "10%%"}}')
    p.add_argument("--confidence", type=parse_confidence, default=0.95,
                   help="confidence of the bootstrap interval of each ratio (default 0.95): a regression must "
                        "lie beyond the tolerance over the whole interval")
    p.add_argument("--nxdi-select", metavar="SUBSTRING",
                   help="comparing with an NxDI benchmark_report.json: the harness benchmark to compare")
    p.add_argument("--floors", type=Path, metavar="FILE",
                   help="absolute floors per unit, under which no change is a regression (default: "
                        "fixtures/compare/floors.json)")
    p.set_defaults(func=cmd_compare)

    from harness.analysis.thresholds import parse_headroom
    from harness.core.options import argparse_type

    p = sub.add_parser("thresholds", help="write a thresholds file (bounds with headroom, provenance) from a run's "
                                          "pytest-benchmark JSON")
    p.add_argument("--from", dest="source", required=True, type=Path, metavar="RUN.json",
                   help="a run's --benchmark-json (pytest -m perf --benchmark-json RUN.json)")
    p.add_argument("--headroom", type=argparse_type(parse_headroom, "parse_headroom"), default=0.10,
                   help="bound = measured x (1 + headroom) for times, / (1 + headroom) for throughputs: "
                        "e.g. 10%% (default) or 0.10")
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="the thresholds file to write")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--sdk", metavar="RELEASE", help="the Neuron SDK release of the run (the manifest records "
                                                     "package versions, not the SDK's), e.g. 2.29")
    p.add_argument("--note", help="a note for the provenance (why this baseline)")
    p.set_defaults(func=cmd_thresholds)

    p = sub.add_parser("vllm-serve", help="the vllm serve command (vLLM Neuron) that compiles a harness shape as NxDI "
                                          "does: the migration's candidate server")
    p.add_argument("--model", required=True, metavar="PATH|ID", help="the checkpoint the server loads")
    p.add_argument("--shape", type=parse_shape, default="report-bs1", help="a harness shape (default report-bs1)")
    p.add_argument("--served-model-name", default="", metavar="NAME", help="e.g. carbon-8b")
    p.add_argument("--port", type=parse_positive_int, default=8000)
    p.set_defaults(func=cmd_vllm_serve)

    from harness.release.cli import add_parser as add_release_check

    add_release_check(sub)
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
