"""``carbon-harness history add | changes | gate | site``: the store's commands. Every one takes
``--store URL`` (else ``$CARBON_HARNESS_HISTORY``, else the cache's SQLite file). Exit codes as
``compare``: 0 fine, 1 a regression (a change point among the newest runs; a trend across releases; a figure
outside its history), 2 bad input or a store that cannot be reached, with one line naming it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.core.options import parse_nonempty_path, parse_positive_int
from harness.history.records import HistoryError


def parse_pvalue(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability in (0, 1) (e.g. 0.001, Otava's default)")
    return value


def cmd_add(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from harness.history.store import add, resolve_url, shown

    added = add(args.store, args.files)
    for a in added:
        state = "recorded" if a.new else "already recorded"
        print(f"{a.path}: {state} ({a.runs} runs, {a.figures} figures)")
    print(f"store: {shown(sa.make_url(resolve_url(args.store)))}")
    return 0


def store_points(store: str | None) -> tuple[list, list]:
    from harness.history.store import checks, connected, points

    with connected(store) as conn:
        return points(conn), checks(conn)


def cmd_changes(args: argparse.Namespace) -> int:
    from harness.history.changes import find_changes
    from harness.history.clocks import summary, unjudged
    from harness.history.store import SERIES_COLUMNS

    from harness.history.trend import MIN_RELEASES, find_trends

    pts, _ = store_points(args.store)
    changes = find_changes(pts, args.order, args.max_pvalue, args.figure)
    left = unjudged(pts, args.figure)
    regressions = [c for c in changes if c.regression and c.newest]
    # a drift across releases: only in release order (a series of one release has no release trend)
    trends = find_trends(pts, args.max_pvalue, args.figure) if args.order == "release" else []
    worse = [t for t in trends if t.regression]
    if args.json:
        print(json.dumps({"order": args.order, "max_pvalue": args.max_pvalue, "changes": [c.to_dict() for c in changes],
                          "newest_regressions": len(regressions), "trends": [t.to_dict() for t in trends],
                          "regression_trends": len(worse), "not_judged": [n.to_dict() for n in left]}, indent=2))
    else:
        series = len({tuple(p[k] for k in SERIES_COLUMNS) for p in pts if args.figure in (None, p["figure"])})
        series -= sum(n.series for n in left)
        print(f"{len(changes)} change points in {series} series ({len(regressions)} regressions in the newest runs)")
        for c in changes:
            print(("! " if c.regression and c.newest else "  ") + c.describe())
        if left:
            print(summary(left))
        if args.order == "release":
            print(f"{len(trends)} trends across releases ({len(worse)} regressions; series of at least {MIN_RELEASES} "
                  "releases tested)")
            for t in trends:
                print(("! " if t.regression else "  ") + t.describe())
    return 1 if regressions or worse else 0


def cmd_gate(args: argparse.Namespace) -> int:
    from harness.history.clocks import summary
    from harness.history.gate import MIN_HISTORY, Tally, judge
    from harness.history.records import read_source

    source = read_source(args.run)
    if source.kind != "benchmark":
        raise HistoryError(f"{args.run}: history gate judges one run's pytest-benchmark JSON, not a release-check "
                           "directory")
    pts, _ = store_points(args.store)
    # the run itself, if it was added already, is not its own history
    judged = judge(source.runs[0], [p for p in pts if p["source_hash"] != source.content_hash], args.max_pvalue)
    tally = Tally.of(judged)
    if args.json:
        print(json.dumps({"judged": [j.to_dict() for j in judged if not j.not_judged], "regressions": len(tally.worse),
                          "without_history": tally.without_history,
                          "not_judged": [n.to_dict() for n in tally.not_judged]}, indent=2))
    else:
        for j in judged:
            if j.regression or (args.verbose and not j.not_judged):
                print(j.describe())
        print(f"{tally.judged} figures judged against their history, {len(tally.worse)} regressions; "
              f"{tally.without_history} not judged (fewer than {MIN_HISTORY} runs of history: the fixed thresholds "
              "gate them)")
        if tally.not_judged:
            print(summary(tally.not_judged))
    return 1 if tally.worse else 0


def cmd_site(args: argparse.Namespace) -> int:
    from harness.history.changes import find_changes
    from harness.history.site import write_site
    from harness.history.trend import find_trends

    pts, checks = store_points(args.store)
    trends = find_trends(pts, args.max_pvalue) if args.order == "release" else []
    print(write_site(Path(args.out), pts, find_changes(pts, args.order, args.max_pvalue), checks, args.min_runs, args.force,
                     args.order, trends))
    return 0


def run_cmd(func):
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ModuleNotFoundError as exc:
            if exc.name == "otava":
                raise HistoryError("history needs Apache Otava: pip install --no-deps apache-otava==0.8.0 (without "
                                   "its metadata's pins, which would replace numpy)") from None
            raise HistoryError(f"history needs {exc.name}: pip install -e '.[history]'") from None
    return run


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="a store of every run and release check: add, change points, gate, trends page")
    hsub = p.add_subparsers(dest="history_command", required=True)

    def common(q: argparse.ArgumentParser, changes: bool = True) -> None:
        q.add_argument("--store", metavar="URL", help="sqlite:///PATH or postgresql://USER@HOST:PORT/DB (default: "
                       "$CARBON_HARNESS_HISTORY, else history.sqlite in the harness cache)")
        if changes:
            q.add_argument("--max-pvalue", type=parse_pvalue, default=0.001,
                           help="false-alarm probability of a change point (Otava's default 0.001)")
            q.add_argument("--order", choices=("time", "release"), default="time",
                           help="order each series' runs by time, or by release (first seen), then time")

    q = hsub.add_parser("add", help="record pytest-benchmark JSON files and release-check output directories")
    q.add_argument("files", nargs="+", type=Path, metavar="FILE")
    common(q, changes=False)
    q.set_defaults(func=run_cmd(cmd_add))

    q = hsub.add_parser("changes", help="Otava's change points per series (with --order release, each series' trend "
                        "across releases too); exit 1 on a regression in the newest runs or a regression trend")
    common(q)
    q.add_argument("--figure", help="only this figure's series (e.g. tkg_ms_p50)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=run_cmd(cmd_changes))

    q = hsub.add_parser("gate", help="judge a new run against its series' recent history; exit 1 on a regression")
    q.add_argument("run", type=Path, metavar="OUT_JSON")
    common(q)
    q.add_argument("--json", action="store_true")
    q.add_argument("--verbose", action="store_true", help="print every figure, not just the regressions")
    q.set_defaults(func=run_cmd(cmd_gate))

    q = hsub.add_parser("site", help="write a static page of trends (one HTML file, a page per run; with --order "
                        "release, each series' trend across releases)")
    q.add_argument("out", type=parse_nonempty_path, metavar="DIR")
    common(q)
    q.add_argument("--min-runs", type=parse_positive_int, default=2, help="chart series with at least this many runs")
    q.add_argument("--force", action="store_true", help="replace an existing DIR")
    q.set_defaults(func=run_cmd(cmd_site))
