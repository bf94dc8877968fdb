"""Human-readable views of harness results: the markdown table (with cost columns where the
hardware has a price) and the throughput plot."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from harness.analysis.results import BenchResult, ReportError, _finite
from harness.core.cost import cost

TABLE_COLUMNS = [("model", "model"), ("shape", "shape"), ("cte_ms_p50", "CTE p50 ms"), ("tkg_ms_p50", "TKG p50 ms"),
                 ("e2e_ms_p50", "E2E p50 ms"), ("tokens_per_s", "tok/s"), ("kbp_per_s", "kbp/s"),
                 ("valid_dna_fraction", "valid DNA"), ("tkg_roofline_fraction", "roofline"),
                 ("compile_s", "compile s"), ("load_s", "load s"),
                 # scoring workloads (harness.workloads.scoring); columns no benchmark has are dropped
                 ("workload", "workload"), ("variants_per_s", "variants/s"), ("scored_kbp_per_s", "scored kbp/s"),
                 ("usd_per_million_variants", "$/M variants")]
COST_COLUMNS = [("usd_per_gbp", "$/Gbp"), ("mbp_per_usd", "Mbp/$")]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def table_rows(results: list[BenchResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        if "model" not in r.extra:
            continue  # not a model benchmark (e.g. the tokenizer speed benchmark)
        row = {key: r.extra.get(key) for key, _ in TABLE_COLUMNS}
        row["benchmark"] = r.name.split("::")[-1]
        bp = r.extra.get("bp_per_s")
        if r.price_per_hour and bp:
            c = cost(bp, r.price_per_hour)
            row.update(usd_per_gbp=c.usd_per_gbp, mbp_per_usd=c.mbp_per_usd)
        rows.append(row)
    return rows


def markdown(results: list[BenchResult]) -> str:
    rows = table_rows(results)
    columns = [("benchmark", "benchmark")] + TABLE_COLUMNS
    if any("usd_per_gbp" in r for r in rows):
        columns += COST_COLUMNS
    columns = [(k, h) for k, h in columns if any(r.get(k) is not None for r in rows)]
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(results: list[BenchResult], path: str | Path) -> Path:
    """Throughput (tokens/s) per model and shape, as a bar chart (needs the [plot] extra), in the
    format the file's suffix names (png, svg, pdf, ...); written atomically, nothing left on failure."""
    path = Path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ReportError("--plot needs matplotlib: pip install -e '.[plot]'") from exc
    rows = [r for r in table_rows(results) if _finite(r.get("tokens_per_s"))]
    if not rows:
        raise ReportError("no benchmark in this file has tokens_per_s to plot")
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 5))
    try:
        fmt = path.suffix[1:].lower()
        supported = fig.canvas.get_supported_filetypes()
        if fmt not in supported:
            raise ReportError(f"--plot {path}: suffix {path.suffix or '(none)'!r} is not an image format; "
                              f"use one of: {', '.join('.' + k for k in sorted(supported))}")
        labels = [f"{r['model']} {r['shape']}\n{r['benchmark']}" for r in rows]
        ax.bar(range(len(rows)), [r["tokens_per_s"] for r in rows], color="#2a7f62")
        ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=35, ha="right")
        ax.set_ylabel("tokens / s")
        ax.set_title("Carbon throughput per model and shape")
        fig.tight_layout()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fig.savefig(tmp, dpi=120, format=fmt)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        plt.close(fig)
    return path
