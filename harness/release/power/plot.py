"""The power plot: how often the release check's rule ends FAIL at each planted slowdown, per family and load,
read from what ``analyse`` wrote (``fixtures/release/noise.json``: the cells simulated at the streams' measured
noise), with the design's two aims drawn (identical code FAILs in at most 5% of checks; a +30% slowdown is
caught in at least 95%). It draws the cells of the normal noise model, the table's first rows; the rounds model
and the pessimistic sigma stay in the table (docs/release-check.md). Needs the [plot] extra (matplotlib)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from typing import Any

from harness.release.power.report import FAMILY_NAMES

MODEL = "normal"
_CHANGE = re.compile(r"\+(\d+(?:\.\d+)?)% (\S+)")
COLOURS = {("cpu", "loaded"): "#1f5fa8", ("cpu", "quiet"): "#7fa9d9", ("trn2", "loaded"): "#b35a00",
           ("trn2", "quiet"): "#e8a65c", ("served", "loaded"): "#1e7b34", ("served", "quiet"): "#5fb36f"}


def curves(noise: Mapping[str, Any]) -> dict[str, dict[tuple[str, str], list[tuple[float, float]]]]:
    """``{"one": ..., "all": ...}``: per (family, load), the (planted change in %, share of checks ending FAIL)
    points of the normal model, A/A at 0%; "one" plants on the family's target figure, "all" on every gated one
    (a one-figure family has no "all" curve)."""
    out: dict[str, dict[tuple[str, str], list[tuple[float, float]]]] = {"one": {}, "all": {}}
    for cell in noise["cells"]:
        if cell["model"] != MODEL:
            continue
        key = (cell["family"], cell["load"])
        if cell["change"] == "A/A":
            for which in ("one", "all"):
                out[which].setdefault(key, []).append((0.0, cell["fail"]))
            continue
        m = _CHANGE.fullmatch(cell["change"])
        if m:
            out["all" if m.group(2) == "all" else "one"].setdefault(key, []).append((float(m.group(1)), cell["fail"]))
    for which in out:
        out[which] = {k: sorted(v) for k, v in out[which].items() if len(v) > 1}
    return out


def _aim(noise: Mapping[str, Any], bound: str) -> float | None:
    values = {a[bound] for a in noise.get("aims", []) if a.get("outcome") == "fail" and a.get("aim") is not None
              and bound in a}
    return min(values) if bound == "at_least" and values else max(values) if values else None


def power_figure(noise: Mapping[str, Any]) -> Any:
    """The matplotlib figure of ``curves``: two panels (slowdown planted on one figure, on every figure), the
    share of simulated checks ending FAIL against the planted slowdown, the aims as dashed lines, where and when
    the noise was measured in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(noise)
    targets = sorted({m.group(2) for c in noise["cells"] if (m := _CHANGE.fullmatch(c["change"]))} - {"all"})
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    ceiling, floor = _aim(noise, "at_most"), _aim(noise, "at_least")
    for ax, which, title in ((axes[0], "one", f"slowdown planted on one figure ({', '.join(targets)})"),
                             (axes[1], "all", "slowdown planted on every gated figure")):
        for (family, load), points in data[which].items():
            xs, ys = zip(*points)
            ax.plot(xs, [100 * y for y in ys], marker="o", markersize=4, linewidth=1.6,
                    color=COLOURS.get((family, load), "#555"),
                    label=f"{FAMILY_NAMES.get(family, family).split(' (')[0]}, {load}")
        if floor is not None:
            ax.axhline(100 * floor, color="#222", linestyle="--", linewidth=0.9)
            ax.text(0.5, 100 * floor - 2, f"aim: +30% caught in >= {100 * floor:g}%", fontsize=7, va="top")
        if ceiling is not None:
            ax.axhline(100 * ceiling, color="#b3261e", linestyle="--", linewidth=0.9)
            ax.text(16, 100 * ceiling + 2, f"aim: identical code FAILs in <= {100 * ceiling:g}%", fontsize=7,
                    color="#b3261e", va="bottom")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("planted slowdown (%; 0 = A/A, identical code)", fontsize=8)
        ax.set_xticks(sorted({x for pts in data[which].values() for x, _ in pts}))
        ax.set_xlim(-1.5, 31.5)
        ax.set_ylim(-3, 103)
        ax.grid(color="#ddd", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, 0.88))
    axes[0].set_ylabel("checks ending FAIL (%)", fontsize=8)
    design = textwrap.fill(f"design: {noise.get('design', 'not recorded')}", 140)
    fig.suptitle(f"Gate power at the measured noise ({MODEL} model; {noise.get('machine', 'machine not recorded')};"
                 f" analysed {noise.get('measured', '?')})\n{design}", fontsize=8)
    fig.tight_layout()
    return fig
