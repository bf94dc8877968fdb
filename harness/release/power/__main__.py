"""``python -m harness.release.power``: stream (real rounds), analyse (noise, the simulated families, the
power table of docs/release-check.md and fixtures/release/noise.json). See ``harness.release.power``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.core.options import parse_positive_int

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "release"


def parse_fraction(value: str) -> float:
    try:
        out = float(value)
    except ValueError:
        out = float("nan")
    if not 0 < out < 10:
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive fraction of a step (0.30 for 30%)")
    return out


def stream_command(args: argparse.Namespace) -> int:
    from harness.release.power.streams import cpu_arms, served_arms, stream

    out = args.out.resolve()
    record = (args.record or out / "stream.json").resolve()
    models, shapes = args.model or ["carbon-tiny"], args.shape or ["smoke"]
    servers: dict = {}
    try:
        if args.served_python:
            arms, plant = served_arms(args.served_python, out, args.runs, models, shapes, args.plant, servers,
                                      lambda m: print(f"[power] {m}", file=sys.stderr, flush=True))
            what = {"stack": "served", "python": args.served_python}
        else:
            arms, plant = cpu_arms(args.nxdi_source, out, args.runs, models, shapes, args.plant)
            what = {"stack": "neuron-cpu", "python": sys.executable, "source": str(args.nxdi_source.resolve())}
        stream(arms, record, args.triples, plant, args.busy, args.minutes, what)
    finally:
        from harness.release.served import focus

        focus(servers, None)  # a paused server would not hear its SIGTERM
        for server in servers.values():
            server.stop()
    return 0


BEGIN, END = "<!-- power-table: python -m harness.release.power analyse -->", "<!-- /power-table -->"


def analyse_command(args: argparse.Namespace) -> int:
    from harness.core.sequential import Design
    from harness.core.storage import atomic_write_json, atomic_write_text
    from harness.release.power import report
    from harness.release.power.noise import measure, read_stream
    from harness.release.power.report import pct

    streams = [read_stream(p) for p in args.records]
    measured = [(s, measure(s)) for s in streams]
    settings = report.settings(measured)
    cells = report.run_cells(settings, args.sims, progress=lambda m: print(f"[power] {m}", file=sys.stderr, flush=True))
    aims = report.aims(cells, settings)
    names = report.family_names()
    command = "python -m harness.release.power " + " ".join(sys.argv[1:] if argv_of(args) is None else argv_of(args))
    told = report.discrimination()
    table = report.summary(cells, settings) + [
        "", f"What the default design ({Design().describe()}) does at the measured noise (the normal model; "
        f"tests/unit/release/test_power_aims.py asserts each line on {told['sims']} seeded checks: a rule that "
        f"caught +30% only 93% of the time would still read 95% there {pct(told['passes_at_93'])} of the time, "
        f"one that failed A/A 7% would read 5% {pct(told['passes_at_7'])} of the time):", ""] \
        + [report.aim_line(a, names) for a in aims]
    where = report.machine(streams)
    lines = [f"Measured {report.today()} on a {where}; `{command}`", "", *table, ""]
    for stream, noise in measured:
        lines += report.noise_lines(noise)
        family = next(s.what for s in settings if s.stream is stream)  # the stream's own check, one leg
        real = report.walk(stream, family)
        lines += [f"The default design on disjoint stretches of the stream's own pairs ({family.name}: independent "
                  f"checks, not subsets of one run): A/A {', '.join(real['A/A'])}; planted "
                  f"{', '.join(real['planted'])}.", ""]
    lines += ["Every cell:", "", *report.detail(cells), ""]
    atomic_write_text(args.out, "\n".join(lines))
    if args.fixture is not None:
        atomic_write_json(args.fixture, {"schema": 2, "measured": report.today(), "machine": where,
                                         "command": command,
                                         "design": Design().describe(), "streams": {n["label"]: n for _, n in measured},
                                         "aims": aims, "cells": cells})
    if args.page is not None:
        text = args.page.read_text()
        if text.count(BEGIN) != 1 or text.count(END) != 1:
            raise SystemExit(f"{args.page}: no single {BEGIN} ... {END} section to replace")
        head, rest = text.split(BEGIN)
        atomic_write_text(args.page, head + BEGIN + "\n" + f"Measured {report.today()} on a {where}; `{command}`\n\n"
                          + "\n".join(table) + "\n" + END + rest.split(END, 1)[1])
    print("\n".join(lines))
    return 0


def argv_of(args: argparse.Namespace) -> list[str] | None:
    return getattr(args, "argv", None)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (the docs' commands are checked against it: tests/docs)."""
    parser = argparse.ArgumentParser(prog="python -m harness.release.power",
                                     description="gate power from the noise of every gated figure")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stream", help="interleaved triples of fresh perf rounds: A, A again, and a planted slowdown")
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--nxdi-source", type=Path, help="NxDI's CPU mode: the NxDI tree to measure ($CARBON_NXDI_SOURCE)")
    where.add_argument("--served-python", metavar="PY", help="a served side: the interpreter with vLLM")
    s.add_argument("--out", type=Path, required=True, help="the rounds' logs and benchmark JSON")
    s.add_argument("--record", type=Path, help="the stream's record (default OUT/stream.json), rewritten per triple")
    s.add_argument("--triples", type=parse_positive_int, default=40, help="at most this many triples (default 40)")
    s.add_argument("--minutes", type=float, default=45.0, help="start no triple that would end past this (default 45)")
    s.add_argument("--plant", type=parse_fraction, default=0.30,
                   help="planted slowdown, a fraction of a decode step (default 0.30)")
    s.add_argument("--runs", type=parse_positive_int, default=5, help="timed runs per round, as the check's (5)")
    s.add_argument("--model", action="append", help="as the check's --model (default carbon-tiny)")
    s.add_argument("--shape", action="append", help="as the check's --shape (default smoke)")
    s.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    a = sub.add_parser("analyse", help="noise of every figure, the families simulated, the table and the fixture")
    a.add_argument("records", type=Path, nargs="+", help="stream records (fixtures/release/stream-*.json)")
    a.add_argument("--out", type=Path, required=True, help="the markdown report")
    a.add_argument("--sims", type=parse_positive_int, default=2000, help="simulated checks per cell (default 2000)")
    a.add_argument("--fixture", type=Path, help="write the measured noise and the aims here (fixtures/release/noise.json)")
    a.add_argument("--page", "--readme", dest="page", type=Path,
                   help="replace the power table of this docs page, docs/release-check.md (between its power-table "
                   "markers; --readme is the option's former name)")
    w = sub.add_parser("work-checks", help="whole host-work gate checks on NxDI's CPU mode: A/As and planted host "
                       "work, alternating, each check recorded as it decided (issue 49)")
    w.add_argument("--nxdi-source", type=Path, required=True, help="the NxDI tree both sides run ($CARBON_NXDI_SOURCE)")
    w.add_argument("--out", type=Path, required=True, help="each check's evidence folder and log")
    w.add_argument("--record", type=Path, help="the record (default OUT/work-checks.json), rewritten after each check")
    w.add_argument("--checks", type=parse_positive_int, default=20, help="checks of each arm (default 20)")
    w.add_argument("--calls", type=parse_positive_int, default=260,
                   help="Python calls planted in each TKG step (default 260: ~10%% of carbon-tiny's step on NxDI 0.9)")
    w.add_argument("--gate-pct", type=float, default=2.0, help="the checks' --gate-work, in percent (default 2)")
    w.add_argument("--rounds", type=parse_positive_int, default=4, help="pairs of the first look (default 4)")
    return parser


def work_checks_command(args: argparse.Namespace) -> int:
    from harness.release.power.work_checks import stream, tally

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    record = (args.record or out / "work-checks.json").resolve()
    state = stream(sys.executable, args.nxdi_source.resolve(), out, record, args.checks, args.calls, args.gate_pct,
                   args.rounds, lambda m: print(f"[work-checks] {m}", file=sys.stderr, flush=True))
    counts = tally(state)
    print("; ".join(f"{arm}: {ok} of {n} as required" for arm, (ok, n) in counts.items()))
    return 0 if all(ok == n for ok, n in counts.values()) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.command == "stream":
        return stream_command(args)
    if args.command == "work-checks":
        return work_checks_command(args)
    return analyse_command(args)


if __name__ == "__main__":
    sys.exit(main())
