"""Reading pytest-benchmark JSON back: the reference tables, a throughput plot, and comparison
of two runs (the release gate)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cost import cost
from harness.gates import METRICS
from harness.storage import load_json

TABLE_COLUMNS = [("model", "model"), ("shape", "shape"), ("cte_ms_p50", "CTE p50 ms"), ("tkg_ms_p50", "TKG p50 ms"),
                 ("e2e_ms_p50", "E2E p50 ms"), ("tokens_per_s", "tok/s"), ("kbp_per_s", "kbp/s"),
                 ("valid_dna_fraction", "valid DNA"), ("tkg_roofline_fraction", "roofline"),
                 ("compile_s", "compile s"), ("load_s", "load s"),
                 # scoring workloads (harness.scoring); columns no benchmark has are dropped
                 ("workload", "workload"), ("variants_per_s", "variants/s"), ("scored_kbp_per_s", "scored kbp/s"),
                 ("usd_per_million_variants", "$/M variants")]
COST_COLUMNS = [("usd_per_gbp", "$/Gbp"), ("mbp_per_usd", "Mbp/$")]


class ReportError(ValueError):
    """A file is not pytest-benchmark JSON; the message names it."""


@dataclass
class BenchResult:
    name: str
    group: str | None
    extra: dict[str, Any]
    median_s: float | None
    price_per_hour: float | None = None
    figures: dict[str, float] = field(default_factory=dict)


def load_results(path: str | Path) -> tuple[list[BenchResult], dict[str, Any]]:
    data = load_json(path, ReportError, "benchmark JSON")
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ReportError(f"{path} is not pytest-benchmark JSON (no 'benchmarks' list); "
                          "write one with pytest --benchmark-json FILE")
    manifest = data.get("machine_info", {}).get("carbon_harness", {})
    price = (manifest.get("hardware") or {}).get("price_per_hour")
    out = []
    for b in data["benchmarks"]:
        extra = b.get("extra_info") or {}
        figures = {k: float(v) for k, v in extra.items() if k in METRICS and isinstance(v, (int, float))}
        out.append(BenchResult(b.get("fullname") or b["name"], b.get("group"), extra,
                               (b.get("stats") or {}).get("median"), price, figures))
    return out, manifest


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
    """Throughput (tokens/s) per model and shape, as a bar chart (needs the [plot] extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ReportError("--plot needs matplotlib: pip install -e '.[plot]'") from exc
    rows = [r for r in table_rows(results) if r.get("tokens_per_s")]
    if not rows:
        raise ReportError("no benchmark in this file has tokens_per_s to plot")
    labels = [f"{r['model']} {r['shape']}\n{r['benchmark']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 5))
    ax.bar(range(len(rows)), [r["tokens_per_s"] for r in rows], color="#2a7f62")
    ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=35, ha="right")
    ax.set_ylabel("tokens / s")
    ax.set_title("Carbon throughput per model and shape")
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------------------------------
# Comparison: the release gate
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Delta:
    benchmark: str
    metric: str
    base: float
    new: float
    direction: str  # "max": lower is better; "min": higher is better

    @property
    def change(self) -> float:
        """Relative change, signed so that positive is worse."""
        if self.base == 0:
            return 0.0 if self.new == 0 else math.inf
        rel = (self.new - self.base) / abs(self.base)
        return rel if self.direction == "max" else -rel

    def regressed(self, tolerance: float) -> bool:
        return self.change > tolerance


@dataclass
class Comparison:
    deltas: list[Delta]
    only_base: list[str]
    only_new: list[str]
    tolerance: float

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.regressed(self.tolerance)]

    def render(self) -> str:
        lines = [f"{'benchmark':60} {'metric':22} {'base':>12} {'new':>12} {'change':>9}"]
        for d in self.deltas:
            flag = "  REGRESSION" if d.regressed(self.tolerance) else ""
            lines.append(f"{d.benchmark[-60:]:60} {d.metric:22} {d.base:12.4g} {d.new:12.4g} "
                         f"{100 * d.change:+8.1f}%{flag}")
        for name in self.only_base:
            lines.append(f"missing in new run: {name}")
        for name in self.only_new:
            lines.append(f"new benchmark (no baseline): {name}")
        n = len(self.regressions)
        lines.append(f"{n} regression(s) beyond {100 * self.tolerance:g}% (positive change is worse)")
        return "\n".join(lines)


def parse_percent(value: str) -> float:
    """``5%`` or ``0.05`` -> 0.05."""
    text = value.strip()
    try:
        number = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a percentage such as 5% or 0.05") from None
    if not 0 <= number < 10:
        raise ValueError(f"{value!r} is out of range (0% .. 1000%)")
    return number


def compare(base: list[BenchResult], new: list[BenchResult], tolerance: float) -> Comparison:
    """Every figure both runs have (plus pytest-benchmark's median time) per benchmark."""
    by_base = {r.name: r for r in base}
    by_new = {r.name: r for r in new}
    deltas = []
    for name in sorted(set(by_base) & set(by_new)):
        b, n = by_base[name], by_new[name]
        if b.median_s is not None and n.median_s is not None:
            deltas.append(Delta(name, "median_s", b.median_s, n.median_s, "max"))
        for metric in sorted(set(b.figures) & set(n.figures)):
            deltas.append(Delta(name, metric, b.figures[metric], n.figures[metric], METRICS[metric]))
    return Comparison(deltas, sorted(set(by_base) - set(by_new)), sorted(set(by_new) - set(by_base)), tolerance)
