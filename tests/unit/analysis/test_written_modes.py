"""Evidence files end with the mode a plain ``open()`` gives under the user's umask, as the plot
(written by matplotlib) always did: the report, its HTML page and a thresholds file are written
atomically (temporary file renamed into place), and ``mkstemp`` alone would leave them 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from harness.core.storage import atomic_write_text
from tests.helpers import REPO, child_env

pytestmark = pytest.mark.unit


def cli_under_umask(umask: int, *args: str) -> subprocess.CompletedProcess:
    """``carbon-harness ARGS`` in a fresh interpreter whose umask is ``umask`` (set in the child only)."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=child_env(), preexec_fn=lambda: os.umask(umask))


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_report_html_plot_and_thresholds_get_the_umask_mode(gated_run, tmp_path, umask):
    pytest.importorskip("matplotlib", reason="the plot needs the [plot] extra: pip install -e '.[plot]'")
    _, _, run_json = gated_run
    md, html, png, thresholds = (tmp_path / n for n in ("report.md", "report.html", "plot.png", "t.json"))
    r = cli_under_umask(umask, "report", str(run_json), "--markdown", str(md), "--html", str(html), "--plot", str(png))
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli_under_umask(umask, "thresholds", "--from", str(run_json), "--out", str(thresholds))
    assert r.returncode == 0, r.stdout + r.stderr
    expected = 0o666 & ~umask
    assert {p.name: oct(mode(p)) for p in (md, html, png, thresholds)} == {
        p.name: oct(expected) for p in (md, html, png, thresholds)}


def test_replacing_a_file_keeps_its_own_mode(tmp_path):
    """As ``open(path, "w")`` does: a file the user made group-writable stays so when rewritten."""
    path = tmp_path / "verdict.md"
    path.write_text("old")
    path.chmod(0o664)
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and mode(path) == 0o664
