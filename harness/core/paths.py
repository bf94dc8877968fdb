"""Where the repository's own data lives: ``fixtures/`` (thresholds, hardware profiles, scoring
inputs) beside the ``harness`` package, found from this file so that a run from any directory
(or an installed entry point) reads the same data."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES_DIR = REPO_ROOT / "fixtures"


def default_threshold_paths(rootdir: Path) -> list[Path]:
    """The thresholds a run gates against when none are given: the run's own ``fixtures/thresholds``,
    else the repository's."""
    for candidate in (rootdir / "fixtures" / "thresholds", FIXTURES_DIR / "thresholds"):
        if candidate.is_dir():
            return [candidate]
    return []
