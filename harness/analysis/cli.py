"""``carbon-harness report`` / ``compare`` / ``thresholds``: the sub-commands that read runs'
pytest-benchmark JSON (a run's report, two runs compared, a thresholds file derived from a run), their
options and their bodies; ``harness.cli`` adds them to its parser."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.options import parse_confidence, parse_tolerance
from harness.core.storage import refuse_existing_out, refuse_overwrite

if TYPE_CHECKING:
    from harness.analysis.compare import Delta


def cmd_report(args: argparse.Namespace) -> int:
    from harness.analysis.report import html_page, markdown, plot
    from harness.analysis.results import load_results
    from harness.core.storage import atomic_write_json, atomic_write_text

    refuse_overwrite([args.results], {"--markdown": args.markdown, "--plot": args.plot,
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


def load_lines(sides: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """What compare says first: each side that ran on a loaded box (its manifest's ``load``,
    ``harness.core.load``), and where a CPU speed is gated under load instead; nothing when neither was."""
    from harness.core.load import loaded_reason

    loaded = [(label, why) for label, manifest in sides if (why := loaded_reason(manifest.get("load")))]
    if not loaded:
        return []
    return [f"LOADED: {label} ran on a loaded box: {why}" for label, why in loaded] + [
        "  its timings move with that load, which no single-run compare can tell from the code's: gate CPU speed "
        "with carbon-harness release-check, whose interleaved rounds give both sides the same machine"]


def rounds_to_decide(d: Delta) -> int | None:
    """About how many samples per run would put a figure's whole interval beyond its tolerance, were its
    estimate and spread to hold: the interval narrows as 1/sqrt(n)."""
    if d.low is None or not d.change > d.tolerance or not d.change > d.low:
        return None
    return math.ceil(max(min(d.n_base, d.n_new), 1) * ((d.change - d.low) / (d.change - d.tolerance)) ** 2)


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.analysis.compare import (
        FLOORS_FILE,
        Tolerances,
        compare,
        default_tolerance,
        hardware_name,
        load_floors,
        load_hardware_tolerances,
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
    for line in work_lines(base, new):
        print(line)
    for d in result.regressions:
        span = d.interval()
        ci = (f"; {100 * args.confidence:g}% CI of the change [{100 * span[0]:+.1f}%, {100 * span[1]:+.1f}%]"
              if span else "; point estimate")
        print(f"REGRESSION {d.benchmark} {d.metric}: {d.base:.4g} -> {d.new:.4g} {d.unit} ({d.describe()}{ci}; "
              f"tolerance {100 * d.tolerance:g}%)", file=sys.stderr)
    for problem in result.failures:
        print(f"FAILED {problem}", file=sys.stderr)
    if result.word == "INCONCLUSIVE":
        for d in result.undecided:
            span, more = d.interval(), rounds_to_decide(d)
            print(f"INCONCLUSIVE {d.benchmark} {d.metric}: {d.base:.4g} -> {d.new:.4g} {d.unit} ({d.describe()}; "
                  f"{100 * args.confidence:g}% CI of the change [{100 * span[0]:+.1f}%, {100 * span[1]:+.1f}%] "
                  f"reaches within the {100 * d.tolerance:g}% tolerance): more rounds per run decide it (about "
                  f"{more} at this spread), or carbon-harness release-check's interleaved rounds", file=sys.stderr)
    from harness.core.verdicts import exit_code

    return exit_code(result.word)


def work_lines(base: list, new: list) -> list[str]:
    """The two runs' exact work per step (each CTE / TKG benchmark's ``extra_info['work']``), where both counted
    it: shown, never gated here (``release-check --gate-work`` gates it)."""
    from harness.analysis.pairing import SideReport
    from harness.analysis.work_section import work_section

    sides = [SideReport(name, rounds={1: results}) for name, results in (("baseline", base), ("candidate", new))]
    return work_section(*sides).markdown()


def cmd_thresholds(args: argparse.Namespace) -> int:
    """A thresholds file from a run, checked before it is written: the loader accepts it and the run
    it came from passes it."""
    from harness.analysis.gates import ThresholdError, check_ambiguous, load_thresholds, parse_thresholds
    from harness.analysis.compare import load_hardware_tolerances
    from harness.analysis.thresholds import derivation_warnings, gate_run, render, run_benchmarks, thresholds_document
    from harness.core.storage import atomic_write_text, load_json

    refuse_overwrite([args.source], {"--out": args.out})
    refuse_existing_out(args.out, args.force, "thresholds")
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
    from harness.core.paths import FIXTURES_DIR, default_threshold_paths

    out_dir = Path(args.out).resolve().parent
    defaults = {p.resolve() for p in [*default_threshold_paths(Path.cwd()), FIXTURES_DIR / "thresholds"]}
    beside = [f for f in sorted(out_dir.glob("*.json")) if f.name != Path(args.out).name] if out_dir in defaults else []
    try:  # a run loads its default thresholds directory whole: the new file must load with the rest of it
        check_ambiguous([*(load_thresholds(beside) if beside else []), *parsed])
    except ThresholdError as exc:
        raise ValueError(f"--out {args.out}: a run that loads its directory would stop on it: {exc}; write it "
                         f"outside that directory and pass --carbon-thresholds=FILE") from None
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
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

    p = sub.add_parser("compare", help="release gate: exit 1 on any regression beyond --max-regression, 3 where a "
                                       "figure's estimate is beyond it but its interval is not (inconclusive)")
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
