"""The Trn2 workflow's gate job on a recorded ``gh`` failure (issue 30, item 4): the restricted default
token gets HTTP 403 from ``gh run list``, and the step must fail naming it, never report "first
release check". The step is run as the workflow has it (its ``run:``, under GitHub's
``bash -e {0}``), with a STUB ``gh`` on PATH: the real one needs GitHub and a token, which a unit test
cannot have. The stub replays fixtures/ci/gh-run-list-403.stderr, or serves runs and artifacts from a
folder."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.unit.conftest import REPO

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow: pip install pyyaml")

pytestmark = pytest.mark.unit

RECORDED_403 = REPO / "fixtures" / "ci" / "gh-run-list-403.stderr"


def gate_job() -> dict:
    return yaml.safe_load((REPO / "ci" / "trn2.yml").read_text())["jobs"]["gate"]


def evidence_step() -> dict:
    steps = [s for s in gate_job()["steps"] if s.get("name", "").startswith("earlier evidence")]
    assert len(steps) == 1, "the gate job has no 'earlier evidence ...' step"
    return steps[0]


def stub_gh(tmp_path: Path, body: str) -> Path:
    """A STUB ``gh`` (the real one needs GitHub): a directory to put first on PATH."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(f"#!/usr/bin/env bash\n# STUB gh for tests/unit/test_gate_job.py\n{body}\n")
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def run_step(tmp_path: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    step = evidence_step()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GH_TOKEN": "stub-token",
           "THIS_RUN": "300", "BASELINE_SDK": "2.29.0"}
    work = tmp_path / "work"
    work.mkdir()
    (work / "ci").symlink_to(REPO / "ci")
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    return subprocess.run(["bash", "-e", str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=60)


def test_a_recorded_403_from_gh_run_list_fails_the_step_loudly(tmp_path):
    bin_dir = stub_gh(tmp_path, f'cat "{RECORDED_403}" >&2; exit 1')
    r = run_step(tmp_path, bin_dir)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "::error::" in r.stderr and "HTTP 403: Resource not accessible by integration" in r.stderr
    assert "actions: read" in r.stderr
    assert "first release check" not in r.stdout + r.stderr


def test_a_403_on_download_fails_too(tmp_path):
    bin_dir = stub_gh(tmp_path, f'''case "$1 $2" in
  "run list") printf '300\\n200\\n' ;;
  "run download") cat "{RECORDED_403}" >&2; exit 1 ;;
esac''')
    r = run_step(tmp_path, bin_dir)
    assert r.returncode != 0 and "gh run download 200" in r.stderr and "first release check" not in r.stdout


# gh's two messages for "nothing to download here": a run without artifacts, and a run whose artifacts are all
# another baseline's (or a leg that failed before uploading its baseline evidence)
NO_ARTIFACTS = "no valid artifacts found to download"
NONE_MATCH = "no artifact matches any of the names or patterns provided"


def test_runs_without_the_evidence_make_a_first_release_check(tmp_path):
    """Run 200 has no artifact at all, run 100 only another baseline's: gh says so in its two ways."""
    bin_dir = stub_gh(tmp_path, f'''case "$1 $2" in
  "run list") printf '300\\n200\\n100\\n' ;;
  "run download")
    [ "$3" = 200 ] && {{ echo "{NO_ARTIFACTS}" >&2; exit 1; }}
    echo "{NONE_MATCH}" >&2; exit 1 ;;
esac''')
    r = run_step(tmp_path, bin_dir)
    assert r.returncode == 0, r.stderr
    assert "::notice::first release check against Neuron SDK 2.29.0" in r.stdout


@pytest.mark.parametrize("message", [NO_ARTIFACTS, NONE_MATCH])
def test_a_run_without_this_baselines_evidence_is_passed_over_for_an_earlier_one(tmp_path, message):
    bin_dir = stub_gh(tmp_path, f'''case "$1 $2" in
  "run list") printf '300\\n200\\n100\\n' ;;
  "run download")
    [ "$3" = 200 ] && {{ echo "{message}" >&2; exit 1; }}
    mkdir -p "$7/baseline-evidence-sdk2.29.0-trn2.3xlarge-carbon-3b" ;;
esac''')
    r = run_step(tmp_path, bin_dir)
    assert r.returncode == 0, r.stderr
    assert "earlier evidence of Neuron SDK 2.29.0: run 100" in r.stdout


def test_the_newest_earlier_evidence_is_downloaded_and_this_run_skipped(tmp_path):
    bin_dir = stub_gh(tmp_path, '''case "$1 $2" in
  "run list") printf '300\\n200\\n100\\n' ;;
  "run download")
    [ "$3" = 300 ] && { echo "downloaded this run" >&2; exit 3; }
    mkdir -p "$7/baseline-evidence-sdk2.29.0-carbon-3b" && echo "run $3" > "$7/baseline-evidence-sdk2.29.0-carbon-3b/from" ;;
esac''')
    r = run_step(tmp_path, bin_dir)
    assert r.returncode == 0, r.stderr
    assert "earlier evidence of Neuron SDK 2.29.0: run 200" in r.stdout
    assert (tmp_path / "work" / "earlier" / "baseline-evidence-sdk2.29.0-carbon-3b" / "from").read_text() == "run 200\n"


def test_the_gate_job_may_read_earlier_runs_and_the_verdict_reads_what_it_got():
    job = gate_job()
    assert job["permissions"]["actions"] == "read"
    verdict = [s for s in job["steps"] if s.get("name") == "verdict"][0]
    assert verdict["env"]["EARLIER"] == "earlier" and "earlier" in evidence_step()["run"]
