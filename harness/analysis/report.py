"""Human-readable views of harness results, fit to file as release evidence: the markdown report
(title, hardware, versions, verdict, the table with a gate column, failing benchmarks marked; cost
columns where the hardware has a price), the throughput plot in bp/s with each threshold drawn, and
one self-contained HTML page (the plot embedded) that shows the same."""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path
from typing import Any

from harness.analysis.results import BenchResult, ReportError, _finite
from harness.analysis.run_lines import (
    FAILED,
    device_line,
    device_time_line,
    failed_tests,
    failure,
    harness_revision,
    not_gated_line,
)
from harness.core.cost import cost

TABLE_COLUMNS = [("model", "model"), ("shape", "shape"), ("cte_ms_p50", "CTE p50 ms"), ("tkg_ms_p50", "TKG p50 ms"),
                 ("e2e_ms_p50", "E2E p50 ms"), ("tokens_per_s", "tok/s"), ("kbp_per_s", "kbp/s"),
                 ("valid_dna_fraction", "valid DNA"), ("tkg_roofline_fraction", "roofline"),
                 # the device's own clock, where the engine has one (harness.plugin.timing)
                 ("tkg_device_ms_p50", "TKG device ms"), ("tkg_host_bound_fraction", "TKG host-bound"),
                 ("e2e_device_ms_p50", "E2E device ms"),
                 ("compile_s", "compile s"), ("load_s", "load s"),
                 # scoring workloads (harness.workloads.scoring); columns no benchmark has are dropped
                 ("workload", "workload"), ("variants_per_s", "variants/s"), ("scored_kbp_per_s", "scored kbp/s"),
                 ("usd_per_million_variants", "$/M variants"),
                 # the tokenizer benchmarks (tests/perf/test_tokenizer_speed.py)
                 ("chars_per_s", "chars/s"), ("encode_speedup", "encode speedup")]
COST_COLUMNS = [("usd_per_gbp", "$/Gbp"), ("mbp_per_usd", "Mbp/$")]
KEY = ("key", "#")  # each row's number: the plot labels its bars with it
REUSED = "reused"  # load s of an engine that took the weights another shape's engine had loaded


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def _gated_as(extra: dict[str, Any], key: str) -> Any:
    """The model / shape a benchmark was gated under, where it records no model of its own (the
    tokenizer's: shape ``tokenizer``, any model)."""
    gated_as = extra.get("gated_as")
    value = gated_as.get(key) if isinstance(gated_as, dict) else None
    return None if value in (None, "*") else value


def table_rows(results: list[BenchResult]) -> list[dict[str, Any]]:
    """One row per benchmark of the file, numbered (``key``), whatever it measured."""
    rows = []
    for r in results:
        row = {key: r.extra.get(key) for key, _ in TABLE_COLUMNS}
        row["model"] = row["model"] or _gated_as(r.extra, "model")
        row["shape"] = row["shape"] or _gated_as(r.extra, "shape")
        row["encode_speedup"] = r.extra.get("dna_encode_speedup", r.extra.get("mixed_encode_speedup"))
        row["benchmark"] = r.name.split("::")[-1]
        row[KEY[0]] = len(rows) + 1
        if r.extra.get("shared_weights") is True:  # its engine took the weights an earlier one loaded: ~0 s
            row["load_s"] = REUSED
        bp = r.extra.get("bp_per_s")
        if r.price_per_hour and bp:
            c = cost(bp, r.price_per_hour)
            row.update(usd_per_gbp=c.usd_per_gbp, mbp_per_usd=c.mbp_per_usd)
        rows.append(row)
    return rows


TITLE = "Carbon benchmark report"
# The stack a Trn2 result depends on, in the order a team files it: label -> (package, manifest nxdi key).
VERSION_ROWS = (("NxDI", "neuronx-distributed-inference", "nxdi_version"),
                ("NxD", "neuronx-distributed", "nxd_version"), ("neuronx-cc", "neuronx-cc", None),
                ("torch-neuronx", "torch-neuronx", None), ("transformers", "transformers", None),
                ("torch", "torch", None))
NOT_INSTALLED = "not installed"


def versions(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, version) of the stack and the harness sha, "not installed" where absent (an NxDI
    imported from a source tree has no distribution: its ``_version.py`` is what the manifest says)."""
    installed = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    nxdi = manifest.get("nxdi") if isinstance(manifest.get("nxdi"), dict) else {}
    rows = [(label, str(installed.get(package) or (nxdi.get(key) if key else None) or NOT_INSTALLED))
            for label, package, key in VERSION_ROWS]
    return rows + [("harness sha", harness_revision(manifest))]


def hardware_line(manifest: dict[str, Any]) -> str:
    hw = manifest.get("hardware") if isinstance(manifest.get("hardware"), dict) else {}
    name = hw.get("name") if hw else manifest.get("hardware")  # identity-only manifests name it
    parts = [str(name or "not recorded")] + [line for line in [device_line(manifest)] if line]
    if manifest.get("cpu_model"):
        parts.append(f"host CPU {manifest['cpu_model']} ({manifest.get('cpu_count')} CPUs)")
    if hw.get("memory_bandwidth_gbps"):
        source = str(hw.get("bandwidth_source", "profile"))
        parts.append(f"memory bandwidth {hw['memory_bandwidth_gbps']:,.1f} GB/s"
                     + (f" ({source.replace(' (', ', ').rstrip(')')})" if source.startswith("measured") else " (profile)"))
    if manifest.get("backend"):
        parts.append(f"backend {manifest['backend']} {manifest.get('dtype') or ''}".rstrip())
    return ", ".join(parts)


def _num(value: Any) -> str:
    """A gate's value or bound, to 4 significant digits whatever its size (a 1e-06 bound is not 0.000)."""
    return f"{value:.4g}" if _finite(value) else str(value)


def gate_cell(extra: dict[str, Any]) -> tuple[str, bool | None]:
    """The gate column: each gated figure with its bound and pass/FAIL; None when nothing was gated."""
    gate = extra.get("gate")
    if not isinstance(gate, dict):
        return (str(gate) if gate else ""), None
    cells, passed = [], True
    for metric, g in sorted(gate.items()):
        if not isinstance(g, dict):
            continue
        op = "<=" if g.get("kind", "max") == "max" else ">="
        ok = bool(g.get("passed"))
        passed &= ok
        cells.append(f"{metric} {_num(g.get('value'))} {op} {_num(g.get('bound'))}: {'pass' if ok else 'FAIL'}")
    return "; ".join(cells), passed


def gates_summary(results: list[BenchResult]) -> str:
    """The run's own count beside its verdict: "N figures gated (p passed, f failed); M recorded but
    not gated (reasons)", the end-of-run line's words (``harness.analysis.gates.tally_gates``). A PASS
    over 13 of 458 figures is not a PASS over all of them."""
    from harness.analysis.gates import tally_gates

    return tally_gates(r.extra for r in results).summary()


def verdict(results: list[BenchResult]) -> tuple[str, list[str]]:
    """PASS / FAIL over every gated benchmark, the failing ones named (a test that failed after it was
    timed fails the run too); NOT GATED when none was gated."""
    gated = [(r.name, gate_cell(r.extra)[1]) for r in results]
    failing = [name for name, ok in gated if ok is False]
    failing += [name for name in failed_tests(results) if name not in failing]
    if failing:
        return "FAIL", failing
    return ("PASS" if any(ok for _, ok in gated) else "NOT GATED"), []


def verdict_detail(results: list[BenchResult]) -> str:
    """What follows the verdict: ``(2 benchmark(s) failed a gate: ...; 1 test(s) failed: ...)``, or nothing."""
    _, failing = verdict(results)
    tests = set(failed_tests(results))
    by_gate = [f for f in failing if gate_cell(next(r.extra for r in results if r.name == f))[1] is False]
    parts = ([f"{len(by_gate)} benchmark(s) failed a gate: " + ", ".join(f.split("::")[-1] for f in by_gate)]
             if by_gate else [])
    others = [f for f in failing if f not in by_gate and f in tests]
    parts += [f"{len(others)} test(s) failed: " + ", ".join(f.split("::")[-1] for f in others)] if others else []
    return f"({'; '.join(parts)})" if parts else ""


def _table(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    columns = [KEY, ("benchmark", "benchmark")] + TABLE_COLUMNS
    if any("usd_per_gbp" in r for r in rows):
        columns += COST_COLUMNS
    columns += [("gate", "gate")]
    return [(k, h) for k, h in columns if any(r.get(k) not in (None, "") for r in rows)]


def _rows_with_gates(results: list[BenchResult]) -> list[dict[str, Any]]:
    rows = table_rows(results)
    for row, result in zip(rows, results):
        cell, passed = gate_cell(result.extra)
        row["gate"], row["passed"] = cell, passed
        why = failure(result.extra)
        if passed is False:
            row["benchmark"] = f"**FAIL** {row['benchmark']}"
        elif why is not None:  # timed, then failed outside a gate (an assertion): a row that says so, not a blank
            row["benchmark"], row["passed"] = f"**FAILED** {row['benchmark']}", False
            row["gate"] = f"{FAILED}: {why}" + (f"; {cell}" if cell else "")
    return rows


def markdown(results: list[BenchResult], manifest: dict[str, Any] | None = None) -> str:
    """The table alone (no manifest), or the whole report: title, hardware, versions, verdict, the
    table with its gate column."""
    rows = _rows_with_gates(results)
    columns = _table(rows)
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(k)).replace("|", "\\|") for k, _ in columns) + " |" for r in rows]
    table = "\n".join(lines) + "\n"
    if manifest is None:
        return table
    word, detail = verdict(results)[0], verdict_detail(results)
    ungated = not_gated_line(results, manifest)
    head = [f"# {TITLE}", "", f"**Verdict: {word}**" + (f" {detail}" if detail else ""), "",
            f"**Gates:** {gates_summary(results)}", ""] + ([f"**Not gated:** {ungated}", ""] if ungated else []) + [
            f"**Hardware:** {hardware_line(manifest)}", "", f"**Device time:** {device_time_line(results)}", "",
            "| component | version |", "|---|---|"]
    head += [f"| {label} | {version} |" for label, version in versions(manifest)]
    return "\n".join(head) + "\n\n## Results\n\n" + table


def html_page(results: list[BenchResult], manifest: dict[str, Any], plot_png: bytes | None) -> str:
    """One self-contained page (no external file: the plot is a base64 PNG) with the verdict, the
    hardware, the versions and the table, failing rows marked."""
    esc = html.escape
    word, failing = verdict(results)
    ungated = not_gated_line(results, manifest)
    rows = _rows_with_gates(results)
    columns = _table(rows)
    colour = {"PASS": "#1e7b34", "FAIL": "#b3261e"}.get(word, "#8a6d00")
    body = [f"<h1>{esc(TITLE)}</h1>",
            f'<p id="verdict" class="verdict" style="background:{colour}">Verdict: {esc(word)}'
            + (f" &mdash; {len(failing)} benchmark(s) failed" if failing else "") + "</p>",
            f'<p id="gates"><b>Gates:</b> {esc(gates_summary(results))}</p>',
            *([f'<p id="not-gated"><b>Not gated:</b> {esc(ungated)}</p>'] if ungated else []),
            f"<p><b>Hardware:</b> {esc(hardware_line(manifest))}</p>",
            f"<p><b>Device time:</b> {esc(device_time_line(results))}</p>",
            '<table class="versions"><tr><th>component</th><th>version</th></tr>'
            + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in versions(manifest)) + "</table>",
            "<h2>Results</h2>", '<table id="results"><tr>' + "".join(f"<th>{esc(h)}</th>" for _, h in columns)
            + "</tr>"]
    for r in rows:
        cls = ' class="fail"' if r.get("passed") is False else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{esc(_fmt(r.get(k)).replace('**', ''))}</td>" for k, _ in columns)
                    + "</tr>")
    body.append("</table>")
    if plot_png:
        body.append(f'<h2>Throughput</h2><img alt="throughput in bp/s" src="data:image/png;base64,'
                    f'{base64.b64encode(plot_png).decode()}">')
    style = ("body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #bbb;padding:4px 8px;font-size:13px}th{background:#eee}"
             ".verdict{color:#fff;font-size:1.6em;padding:.4em .8em;display:inline-block}"
             "tr.fail td{background:#fbe3e1;font-weight:bold}img{max-width:100%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{esc(TITLE)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _stack_title(manifest: dict[str, Any] | None) -> str:
    if not manifest:
        return ""
    hw = manifest.get("hardware")
    name = hw.get("name") if isinstance(hw, dict) else hw
    stack = ", ".join(f"{k} {v}" for k, v in versions(manifest) if v not in (NOT_INSTALLED, "not recorded")
                      and k != "harness sha")
    sha = str(manifest.get("harness_git_sha") or "")[:10] or str(manifest.get("harness_version") or "")
    return f"\n{name or 'hardware not recorded'}; {stack}" + (f"; harness {sha}" if sha else "")


def workload_of(result: BenchResult) -> str:
    """The workload a benchmark measures, for the plot's groups: its ``workload`` where it records
    one, else its test function's name (``test_batch_suite[...]`` -> ``batch_suite``)."""
    workload = result.extra.get("workload")
    if isinstance(workload, str) and workload:
        return workload
    return result.name.split("::")[-1].split("[")[0].removeprefix("test_")


def bar_label(row: dict[str, Any], width: int = 68) -> str:
    """``#key model shape`` and what else the test id says, cut to ``width``: the key finds the row."""
    param = row["benchmark"].split("[", 1)[1].rstrip("]") if "[" in row["benchmark"] else ""
    model, shape = str(row.get("model") or ""), str(row.get("shape") or "")
    param = param.removeprefix(model) if model else param  # the id's model, not a draft's name inside it
    if shape:
        param = f"-{param}-".replace(f"-{shape}-", "-")
    rest = "-".join(part for part in param.split("-") if part).replace("with-", "draft ", 1)
    label = " ".join(str(x) for x in (f"#{row[KEY[0]]}", row.get("model"), row.get("shape"), rest) if x)
    return label if len(label) <= width else label[:width - 1] + "\u2026"


def throughput_figure(results: list[BenchResult], manifest: dict[str, Any] | None = None) -> Any:
    """The plot's matplotlib figure: bp/s per benchmark (the unit the Carbon family is judged in) as
    horizontal bars grouped by workload, labelled ``#key model shape ...`` (the key is the table's
    ``#`` column), on a log scale so a 2 bp/s draft run shows beside a 500 bp/s batch; each bp/s
    threshold that gated a benchmark drawn over its bar, failing bars red, hardware and versions in the
    title. Sized for a page: 9 inches wide whatever the count, a row per bar (needs the [plot] extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ReportError("--plot needs matplotlib: pip install -e '.[plot]'") from exc
    keyed = list(zip(table_rows(results), results))
    plotted = [(row, res) for row, res in keyed if _finite(res.extra.get("bp_per_s")) and res.extra["bp_per_s"] > 0]
    if not plotted:
        raise ReportError("no benchmark in this file has bp_per_s to plot")
    groups: dict[str, list[tuple[dict[str, Any], BenchResult]]] = {}
    for row, res in plotted:
        groups.setdefault(workload_of(res), []).append((row, res))
    positions, labels, values, failed, bounds, headers = [], [], [], [], [], []
    y = 0.0
    for name, members in groups.items():
        headers.append((y, name))
        y += 1
        for row, res in members:
            positions.append(y)
            labels.append(bar_label(row))
            values.append(res.extra["bp_per_s"])
            failed.append(gate_cell(res.extra)[1] is False)
            gate = res.extra.get("gate")
            entry = gate.get("bp_per_s") if isinstance(gate, dict) else None
            bounds.append(entry.get("bound") if isinstance(entry, dict) else None)
            y += 1
        y += 0.4
    fig, ax = plt.subplots(figsize=(9, 1.3 + 0.24 * y))
    ax.barh(positions, values, height=0.7, color=["#b3261e" if f else "#2a7f62" for f in failed])
    ax.set_xscale("log")
    for pos, value in zip(positions, values):
        ax.annotate(f"{value:,.3g}", (value, pos), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    drawn = False
    for pos, bound in zip(positions, bounds):
        if _finite(bound) and bound > 0:
            ax.vlines(bound, pos - 0.45, pos + 0.45, colors="#222", linestyles="--", linewidth=1.5,
                      label=None if drawn else "threshold (bp/s floor)")
            drawn = True
    if drawn:
        ax.legend(loc="lower right", fontsize=8)
    ax.set_yticks(positions, labels, fontsize=8)
    for pos, name in headers:
        ax.text(0.0, pos, name, transform=ax.get_yaxis_transform(), ha="right", va="center", fontsize=9,
                fontweight="bold")
    ax.set_ylim(y - 0.4, -1)
    lo, hi = min(values + [b for b in bounds if _finite(b) and b > 0]), max(values)
    ax.set_xlim(lo / 2, hi * 3)
    ax.set_xlabel("bp / s (log scale)")
    ax.grid(axis="x", which="major", color="#ddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title("Carbon throughput (bp/s) by workload; # is the table's row" + _stack_title(manifest), fontsize=9)
    fig.tight_layout()
    return fig


def plot(results: list[BenchResult], path: str | Path | None, manifest: dict[str, Any] | None = None,
         fmt: str = "png") -> Path | bytes:
    """``throughput_figure`` written atomically in the format of the file's suffix (png, svg, pdf,
    ...), nothing left on failure; with ``path`` None, the image's bytes in ``fmt``."""
    import io

    fig = throughput_figure(results, manifest)  # a missing matplotlib is one ReportError, raised here
    import matplotlib.pyplot as plt

    try:
        if path is None:
            buffer = io.BytesIO()
            fig.savefig(buffer, dpi=110, format=fmt)
            return buffer.getvalue()
        path = Path(path)
        fmt = path.suffix[1:].lower()
        supported = fig.canvas.get_supported_filetypes()
        if fmt not in supported:
            raise ReportError(f"--plot {path}: suffix {path.suffix or '(none)'!r} is not an image format; "
                              f"use one of: {', '.join('.' + k for k in sorted(supported))}")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fig.savefig(tmp, dpi=120, format=fmt)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        plt.close(fig)
    return path
