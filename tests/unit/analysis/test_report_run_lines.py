"""The report's lines about the run (issue 40, items 6 and 7): a test that failed after it was timed is
a row that says "failed" and why (recorded by the plugin in a real child session, read back by the
real report command); the harness's revision is its own checkout's, never an enclosing repository's;
the device is named; a GPU run says why it is not gated; the device time is said absent on a CPU."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from harness.analysis.report import markdown
from harness.analysis.results import load_results
from harness.analysis.run_lines import device_line, device_time_line, harness_revision, not_gated_line
from harness.core.versions import checkout_commit
from tests.helpers import run_cli, run_pytest

pytestmark = pytest.mark.unit

CHILD = '''
def test_timed_then_failed(benchmark):
    benchmark.extra_info.update(model="carbon-tiny", shape="smoke")
    benchmark.pedantic(sum, args=(range(10),), rounds=2)
    assert 1 + 1 == 3, "greedy generation must be repeatable up to a measured near-tie: round 1 row 0 differs"


def test_timed_and_passed(benchmark):
    benchmark.extra_info.update(model="carbon-tiny", shape="smoke")
    benchmark.pedantic(sum, args=(range(10),), rounds=2)
'''


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("failed-run")
    (tmp / "test_child.py").write_text(CHILD)
    out = tmp / "run.json"
    r = run_pytest("--rootdir", str(tmp), "-p", "no:randomly", "-q", "test_child.py", f"--benchmark-json={out}",
                   cache_dir=tmp / "cache", cwd=tmp)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    return tmp, out


def test_a_test_that_failed_after_it_was_timed_is_a_failed_row_that_says_why(failed_run):
    tmp, out = failed_run
    info = {b["name"]: b["extra_info"] for b in json.loads(out.read_text())["benchmarks"]}
    assert info["test_timed_then_failed"]["outcome"] == "failed"
    assert info["test_timed_then_failed"]["failure"].startswith("AssertionError: greedy generation must be repeatable")
    assert "outcome" not in info["test_timed_and_passed"]
    r = run_cli("report", str(out), "--markdown", str(tmp / "r.md"))
    assert r.returncode == 0, r.stderr
    text = (tmp / "r.md").read_text()
    row = next(line for line in text.splitlines() if "test_timed_then_failed" in line and line.startswith("|"))
    assert "**FAILED** test_timed_then_failed" in row and "failed: AssertionError: greedy generation must be" in row
    assert "**Verdict: FAIL** (1 test(s) failed: test_timed_then_failed)" in text
    passed = next(line for line in text.splitlines() if "test_timed_and_passed" in line and line.startswith("|"))
    assert "FAIL" not in passed


def test_the_harness_revision_is_its_own_checkouts_not_an_enclosing_repositorys(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")

    def git(cwd, *args):
        return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()

    outer = tmp_path / "project"
    (outer / "vendored" / "harness").mkdir(parents=True)
    (outer / "README").write_text("a project that holds a copy of the harness\n")
    (outer / "vendored" / "harness" / "__init__.py").write_text("")
    git(outer, "init", "-q")
    git(outer, "-c", "user.email=x@y", "-c", "user.name=x", "add", "README")
    git(outer, "-c", "user.email=x@y", "-c", "user.name=x", "commit", "-q", "-m", "outer")
    assert git(outer / "vendored", "rev-parse", "HEAD")  # what a bare rev-parse would have stamped
    assert checkout_commit(outer / "vendored", "harness/__init__.py") is None  # untracked there
    git(outer, "-c", "user.email=x@y", "-c", "user.name=x", "add", "vendored")
    git(outer, "-c", "user.email=x@y", "-c", "user.name=x", "commit", "-q", "-m", "vendor the harness")
    # committed there, the project's commit does name the harness's files
    assert checkout_commit(outer / "vendored", "harness/__init__.py") == git(outer, "rev-parse", "HEAD")
    own = tmp_path / "harness-checkout"
    (own / "harness").mkdir(parents=True)
    (own / "harness" / "__init__.py").write_text("")
    git(own, "init", "-q")
    git(own, "-c", "user.email=x@y", "-c", "user.name=x", "add", ".")
    git(own, "-c", "user.email=x@y", "-c", "user.name=x", "commit", "-q", "-m", "harness")
    assert checkout_commit(own, "harness/__init__.py") == git(own, "rev-parse", "HEAD")
    assert harness_revision({"harness_git_sha": None, "harness_version": "0.1.0"}) == \
        "0.1.0 (installed; not a git checkout)"
    assert harness_revision({"harness_git_sha": "abc123"}) == "abc123"


def test_the_device_is_named_and_a_cpus_device_time_is_said_absent(gated_run):
    _, _, path = gated_run
    results, manifest = load_results(path)
    assert device_line({"device_name": "NVIDIA H100 80GB HBM3", "device_resolved": "cuda:0"}) == \
        "device NVIDIA H100 80GB HBM3 (cuda:0)"
    assert device_line(manifest) is None  # a CPU run: the header's host CPU is the device
    assert device_time_line(results).startswith("absent: no device clock")
    assert "**Device time:** absent: no device clock" in markdown(results, manifest)


def test_a_gpu_run_says_why_it_is_not_gated(gated_run):
    _, data, path = gated_run
    results, manifest = load_results(path)
    gpu = {**manifest, "hardware": {"name": "h200", "kind": "cuda"}}
    line = not_gated_line(results, gpu)
    assert line is not None and "there is no fixtures/thresholds/h200.json" in line
    assert "ci/scripts/gpu-check.sh" in line and "carbon-harness thresholds --from" in line
    assert f"**Not gated:** {line}" in markdown(results, gpu)
    cpu = not_gated_line(results, manifest)  # fixtures/thresholds/cpu.json exists: the entries are missing
    assert cpu is not None and "no entry for hardware 'cpu'" in cpu
