"""One pytest run of one side (its conformance tiers, or a contract leg), folded into that side's report.

Why one function: every such run must end the same way, or a side's failure goes unreported: its exit
turned into a session error where pytest did not finish, and its outcomes read from its own junit file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.analysis.pairing import SideReport
from harness.release.children import read_outcomes, run_logged, session_error
from harness.release.images import side_process
from harness.release.plan import CheckPlan, Side


def run_side_tests(plan: CheckPlan, side: Side, command: Sequence[str], junit: Path, log: Path, what: str,
                   report: SideReport, timeout: float) -> int:
    """Run ``command`` (which writes ``junit``) as ``side`` runs (its venv, its image), logged to ``log``;
    returns its exit status."""
    cmd, env = side_process(plan, side, command)
    rc, text = run_logged(cmd, log, env, timeout)
    error = session_error(rc, text, what)
    if error:
        report.session_errors.append(error)
    report.outcomes.update(read_outcomes(junit))
    return rc
