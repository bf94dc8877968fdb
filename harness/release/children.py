"""A pytest run in a child process, as a release check runs each side's: its environment (without what an
outer pytest run set), its output in a log, and why it stopped when it never ran its tests.

Tests that start pytest children take ``child_env`` from here too: an inherited xdist worker id makes a
child believe it is a worker.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.analysis.results import parse_junit
from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_write_text

# Set by an outer pytest / pytest-xdist run; a child that inherits them believes it is a worker.
OUTER_RUN_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
                 "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "NEURON_RT_VISIBLE_CORES")
# pytest's exit codes that mean the session never ran its tests (usage error, internal error,
# interrupted); 0, 1 (some failed) and 5 (none collected) mean it ran.
SESSION_ERRORS = {2: "interrupted", 3: "internal error", 4: "usage error"}


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what an outer pytest run set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_RUN_ENV}
    env.update(extra or {})
    return env


# a pytest usage error, or an exception's message: not a traceback's "file:line: Error" nor the harness's
# informational "carbon-harness: ..." lines
ERROR_LINE = re.compile(r"^ERROR: carbon-harness:|\w(Error|Exception): ")


def last_error_line(log_text: str) -> str:
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    line = next((ln for ln in reversed(lines) if ERROR_LINE.search(ln)), None)
    line = line or next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
    return line.removeprefix("ERROR: ").removeprefix("E ").strip()


def session_error(rc: int, log_text: str, what: str) -> str | None:
    """Why a pytest run stopped before its tests, from its exit code and last error line."""
    if rc not in SESSION_ERRORS:
        return None
    return f"{what} stopped ({SESSION_ERRORS[rc]}, exit {rc}): {last_error_line(log_text)}"


def run_logged(cmd: Sequence[str], log: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """Run ``cmd`` in this checkout with its output in ``log``; returns the exit code and the output."""
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(list(cmd), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
        rc, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = 2, f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout_s:.0f} s"
    atomic_write_text(log, " ".join(cmd) + "\n\n" + text)
    return rc, text


def read_outcomes(junit: Path) -> dict[str, Any]:
    return parse_junit(junit.read_text(), str(junit)) if junit.is_file() else {}
