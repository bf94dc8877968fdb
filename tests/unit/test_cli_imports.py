"""The CLI's arithmetic commands start without torch: ``plan`` and ``cost`` are arithmetic on profiles and
shapes, and importing torch cost them 2-9 s each (issue 48). A fresh interpreter runs each and says whether
torch was imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("argv", [["plan", "--model", "carbon-3b", "--shape", "smoke"],
                                  ["cost", "--hardware", "trn2.3xlarge", "--bp-per-s", "1000"]], ids=lambda a: a[0])
def test_an_arithmetic_command_imports_no_torch(argv):
    code = ("import contextlib, io, sys\nimport harness.cli as cli\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    rc = cli.main({argv!r})\n"
            "print(rc, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False"], r.stdout + r.stderr
