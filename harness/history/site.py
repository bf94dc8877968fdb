"""The static page of trends (asv's idea, without a server or a CDN): ``index.html`` with one inline
SVG chart per series (its runs in the order the change points were found in, by time or by release,
change points marked, each point a link to its run's report; in release order the releases' bounds and
each series' trend across them, ``harness.history.trend``), the table of release checks, and
``runs/run-N.html``, one small report per run. Written into a fresh directory atomically; nothing is
fetched when it is opened."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.core.storage import atomic_dir
from harness.history.changes import Change, group_series
from harness.history.clocks import why_not_judged
from harness.history.store import SERIES_COLUMNS
from harness.history.trend import Trend

WIDTH, HEIGHT, PAD = 640, 200, 40
STYLE = """body{font-family:sans-serif;margin:2em;color:#222}svg{background:#fafafa;border:1px solid #ddd}
.point{fill:#1f77b4}.change{stroke:#d62728;stroke-width:2;stroke-dasharray:4 3}.line{fill:none;stroke:#1f77b4}
.change-label{fill:#d62728}.trend{fill:none;stroke:#ff7f0e;stroke-width:3;opacity:.8}.trend-label{fill:#c35f00}
.release{stroke:#999;stroke-width:1}.release-label{fill:#666}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}.FAIL{color:#d62728}.PASS{color:#2ca02c}"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def series_id(key: tuple) -> str:
    return "series-" + "-".join("".join(c if c.isalnum() else "_" for c in str(k)) for k in key)


def trend_values(trend: Trend) -> list[float]:
    """The trend's fitted figure at each release, from the first release's median: Theil and Sen's slope
    of log(figure) a release, so each release is ``1 + per_release`` times the one before."""
    return [trend.first * (1 + trend.per_release) ** k for k in range(len(trend.releases))]


def chart(key: tuple, pts: list[dict[str, Any]], changes: list[Change], trend: Trend | None = None,
          releases: bool = False) -> str:
    """One series as an SVG: a line through its runs, each a linked dot titled with its value, release and
    commit; a dashed red rule before each change point's first run, labelled and titled with its size. With
    ``releases`` (the runs in release order) a grey rule where each release begins, and with a ``trend`` an
    orange line through its fitted value at each release's middle run, labelled with its size a release."""
    values = [float(p["value"]) for p in pts]
    fitted = trend_values(trend) if trend else []
    lo, hi = min(values + fitted), max(values + fitted)
    span = (hi - lo) or abs(hi) or 1.0
    step = (WIDTH - 2 * PAD) / max(len(pts) - 1, 1)

    def xy(i: float, v: float) -> tuple[float, float]:
        return PAD + i * step, HEIGHT - PAD - (v - lo) / span * (HEIGHT - 2 * PAD)

    coords = [xy(i, v) for i, v in enumerate(values)]
    parts = [f'<svg id="{series_id(key)}" class="chart" width="{WIDTH}" height="{HEIGHT}" '
             f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{esc(key[0])} trend">',
             f'<text x="4" y="14" font-size="10">{hi:.4g}</text>',
             f'<text x="4" y="{HEIGHT - 6}" font-size="10">{lo:.4g}</text>',
             f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" font-size="11" text-anchor="end">run {len(pts)}</text>',
             '<polyline class="line" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>']
    starts = [i for i, p in enumerate(pts) if i == 0 or p["release"] != pts[i - 1]["release"]] if releases else []
    for k, i in enumerate(starts):
        x = PAD + (i - 0.5) * step
        parts.append(f'<line class="release" data-release="{k}" x1="{x:.1f}" y1="{PAD / 2}" x2="{x:.1f}" '
                     f'y2="{HEIGHT - PAD / 2}"><title>{esc(pts[i]["release"])}</title></line>'
                     f'<text class="release-label" x="{x + 3:.1f}" y="{HEIGHT - PAD / 2 + 12}" font-size="10">'
                     f"release {k + 1}</text>")
    if trend:
        ends = starts[1:] + [len(pts)]
        tcoords = [xy((a + b - 1) / 2, v) for a, b, v in zip(starts, ends, fitted)]
        parts.append(f'<polyline class="trend" data-per-release="{trend.per_release:.6f}" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in tcoords) + f'"><title>{esc(trend.describe())}</title>'
                     f'</polyline><text class="trend-label" x="{WIDTH - PAD}" y="14" font-size="11" '
                     f'text-anchor="end">trend {100 * trend.per_release:+.1f}% a release '
                     f"[{100 * trend.low:+.1f}%, {100 * trend.high:+.1f}%]</text>")
    for c in changes:
        x = PAD + (c.index - 1.5) * step
        parts.append(f'<line class="change" data-index="{c.index}" data-change="{c.change:.6f}" x1="{x:.1f}" y1="{PAD / 2}"'
                     f' x2="{x:.1f}" y2="{HEIGHT - PAD / 2}"><title>{esc(c.describe())}</title></line>'
                     f'<text class="change-label" x="{x + 3:.1f}" y="{PAD / 2 + 10}" font-size="11">run {c.index}: '
                     f"{100 * c.change:+.1f}% [{100 * c.low:+.1f}%, {100 * c.high:+.1f}%]</text>")
    for i, ((x, y), p) in enumerate(zip(coords, pts)):
        parts.append(f'<a href="runs/run-{p["run_id"]}.html"><circle class="point" data-index="{i + 1}" '
                     f'data-value="{p["value"]!r}" cx="{x:.1f}" cy="{y:.1f}" r="4"><title>run {i + 1}: '
                     f'{esc(p["value"])} ({esc(p["release"])}, {esc((p["commit"] or "-")[:12])}, {esc(p["time"])})'
                     '</title></circle></a>')
    return "\n".join(parts + ["</svg>"])


def run_page(run_id: int, pts: list[dict[str, Any]]) -> str:
    p = pts[0]
    rows = "".join(f"<tr><td>{esc(q['benchmark'])}</td><td>{esc(q['figure'])} ({esc(q['timer'])} time)</td>"
                   f"<td>{esc(q['value'])}</td>"
                   f"<td>{esc(q['model'])}/{esc(q['shape'])}</td><td>{esc(q['backend'])}</td><td>{esc(q['hardware'])}</td></tr>"
                   for q in pts)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>Run {run_id}</title>'
            f'<style>{STYLE}</style></head><body><h1 id="run">Run {run_id}</h1>'
            f"<p>Time {esc(p['time'])}; commit {esc(p['commit'] or '-')}; release {esc(p['release'])}; "
            f"source <code>{esc(p['report'])}</code>"
            + (f"; release check {p['release_check_id']} ({esc(p['side'])}, round {p['round']})"
               if p["release_check_id"] else "")
            + f'</p><p><a href="../index.html">back to the trends</a></p><table><tr><th>benchmark</th><th>figure</th>'
            f"<th>value</th><th>model/shape</th><th>backend</th><th>hardware</th></tr>{rows}</table></body></html>\n")


def trend_table(trends: list[Trend]) -> list[str]:
    rows = [f'<tr><td><a href="#{series_id(key_of(t))}">{esc(t.series["figure"])}</a>: '
            f'{esc(t.series["benchmark"])}</td><td>{100 * t.per_release:+.1f}% [{100 * t.low:+.1f}%, {100 * t.high:+.1f}%]'
            f'</td><td class="{"FAIL" if t.regression else "PASS"}">{"regression" if t.regression else "improvement"}</td>'
            f"<td>{len(t.releases)} ({esc(t.releases[0])} .. {esc(t.releases[-1])})</td><td>{t.runs}</td>"
            f"<td>{t.first:.4g} -> {t.last:.4g}</td><td>{t.pvalue:.2g}</td></tr>" for t in trends]
    return ["<h2>Trends across releases</h2>", '<table id="trends"><tr><th>series</th><th>a release</th><th></th>'
            "<th>releases</th><th>runs</th><th>median, first -> last release</th><th>p</th></tr>", *rows, "</table>"]


def key_of(found: Change | Trend) -> tuple:
    return tuple(found.series[k] for k in SERIES_COLUMNS)


def index_page(points: list[dict[str, Any]], changes: list[Change], checks: list[dict[str, Any]],
               min_runs: int, order: str = "time", trends: list[Trend] | None = None) -> str:
    """Each series drawn in ``order``, the order its ``changes`` were found in (their indices count runs in
    it); in release order, the ``trends`` (``find_trends``) listed and drawn on their charts."""
    by_series: dict[tuple, list[Change]] = defaultdict(list)
    for c in changes:
        by_series[key_of(c)].append(c)
    trend_of = {key_of(t): t for t in trends or []}
    body = ['<h1>History and trends</h1>', f"<p>{len({p['run_id'] for p in points})} runs, "
            f"{len(changes)} change points, {len(trend_of)} trends across releases, {len(checks)} release checks; "
            f"runs in {esc(order)} order.</p>", "<h2>Release checks</h2>",
            '<table id="release-checks"><tr><th>time</th><th>baseline</th><th>candidate</th><th>verdict</th>'
            "<th>reasons</th></tr>"]
    body += [f"<tr><td>{esc(c['time'])}</td><td>{esc(c['baseline'])}</td><td>{esc(c['candidate'])}</td>"
             f"<td class=\"{esc(c['verdict'])}\">{esc(c['verdict'])}</td><td>{len(c['reasons'])}</td></tr>"
             for c in checks]
    body += ["</table>"] + (trend_table(list(trend_of.values())) if order == "release" else []) + ["<h2>Trends</h2>"]
    series = group_series(points, order)
    for key, pts in sorted(series.items()):
        if len(pts) < min_runs:
            continue
        s = dict(zip(SERIES_COLUMNS, key))
        why = why_not_judged(key, series.keys())
        judged = f'; <span class="not-judged">not judged: {esc(why)}</span>' if why else ""
        body += [f'<section class="series"><h3>{esc(s["figure"])}: {esc(s["benchmark"])}</h3>',
                 f"<p>{esc(s['model'])}/{esc(s['shape'])}, {esc(s['backend'])} {esc(s['dtype'])} on {esc(s['hardware'])}, "
                 f"{esc(s['timer'])} time; "
                 f"{len(pts)} runs; {len(by_series[key])} change point{'' if len(by_series[key]) == 1 else 's'}{judged}</p>",
                 chart(key, pts, by_series[key], trend_of.get(key), order == "release"), "</section>"]
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>carbon-harness history</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def write_site(out: Path, points: list[dict[str, Any]], changes: list[Change], checks: list[dict[str, Any]],
               min_runs: int = 2, force: bool = False, order: str = "time", trends: list[Trend] | None = None) -> Path:
    """The site into ``out`` (replaced whole with ``force``): index.html and one page per run."""
    runs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        runs[p["run_id"]].append(p)
    with atomic_dir(out, replace=force) as tmp:
        (tmp / "runs").mkdir()
        (tmp / "index.html").write_text(index_page(points, changes, checks, min_runs, order, trends), encoding="utf-8")
        for run_id, pts in runs.items():
            (tmp / "runs" / f"run-{run_id}.html").write_text(run_page(run_id, pts), encoding="utf-8")
    return out / "index.html"
