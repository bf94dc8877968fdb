"""The end-of-run gate tally, and ``--carbon-require-gates``.

A run whose figures all passed looks the same as a run whose figures met no threshold at all
(every ``gate`` "no threshold"): both exit 0. So every run ends with one line saying how many
figures were gated (passed / failed) and how many were recorded but not gated, by reason; and
``--carbon-require-gates`` turns a run that gated nothing into a failure.

The figures are read back from the benchmarks pytest-benchmark holds at the end of the session: under
pytest-xdist those are the workers' results merged on the controller (``harness.plugin.xdist``), so the
tally covers every worker; a worker tallies nothing itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.analysis.gates import GateTally, tally_gates
from harness.plugin.xdist import is_worker

REQUIRE_GATES_HELP = ("fail the run (exit 1) when it gated no figure: every figure without a threshold for this "
                      "hardware / model / shape, benchmarks disabled, or no benchmark ran")


def run_tally(config: pytest.Config) -> GateTally:
    """The figures of every benchmark pytest-benchmark kept this session (none without it)."""
    bs = getattr(config, "_benchmarksession", None)
    benchmarks: list[Any] = list(getattr(bs, "benchmarks", None) or [])
    return tally_gates(getattr(b, "extra_info", None) or {} for b in benchmarks)


def reports_tally(config: pytest.Config) -> bool:
    """Runs that measure say what they gated; a worker (its controller speaks), ``--co`` and ``--help`` don't."""
    return not (is_worker(config) or config.option.collectonly or config.option.help)


def require_gates_failure(config: pytest.Config, tally: GateTally, hardware: str) -> str | None:
    """The one line that fails a run under --carbon-require-gates, or None when it gated something."""
    if not config.getoption("carbon_require_gates", False) or tally.gated:
        return None
    return (f"carbon-harness: --carbon-require-gates: this run gated no figure ({tally.ungated} recorded but not "
            f"gated): add thresholds for hardware {hardware!r} (fixtures/thresholds, or --carbon-thresholds FILE) "
            "and run the benchmarks (-m perf, without --benchmark-disable)")
