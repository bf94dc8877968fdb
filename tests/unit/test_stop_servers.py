"""ci/scripts/stop-servers.sh stops the vLLM servers a leg left running, and never signals a process that is
not one: a pidfile's pid is signalled only while /proc/PID/cmdline is still the server's (vllm-serve.sh,
harness.core.vllm_neuron or vLLM's api_server); a pid since reused by something else is left alone, and every
pidfile it has dealt with is removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

SCRIPT = "ci/scripts/stop-servers.sh"


def stop_servers(directory: Path) -> subprocess.Popen:
    return subprocess.Popen(["bash", SCRIPT, str(directory)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})


def stopped(directory: Path) -> tuple[int, str, str]:
    """stop-servers.sh run to its end: its exit code, stdout and stderr."""
    run = stop_servers(directory)
    try:
        out, err = run.communicate(timeout=60)
    finally:
        end(run)
    return run.returncode, out, err


def pidfile_for(tmp_path: Path, pid: int) -> Path:
    leg = tmp_path / "evidence" / "leg-a"
    leg.mkdir(parents=True)
    pidfile = leg / "vllm-server.pid"
    pidfile.write_text(f"{pid}\n")
    return pidfile


def end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_a_pid_now_running_something_else_is_left_alone(tmp_path):
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pidfile = pidfile_for(tmp_path, other.pid)
        rc, out, err = stopped(tmp_path / "evidence")
        assert rc == 0, out + err
        assert other.poll() is None, "stop-servers.sh signalled a process that is not a vLLM server"
        line, = err.strip().splitlines()
        assert f"pid {other.pid} is now `sleep 60`, not a vLLM server: left alone" in line, line
        assert not pidfile.exists()
    finally:
        end(other)


@pytest.mark.parametrize("marker", ["vllm.entrypoints.openai.api_server", "harness.core.vllm_neuron",
                                    "ci/scripts/vllm-serve.sh"])
def test_a_server_is_stopped_and_its_pidfile_removed(tmp_path, marker):
    """A stand-in whose command line is what the pidfile's pid is during a server's life (the script, the
    harness launcher, vLLM's server), in a session of its own as the release check starts it."""
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker], start_new_session=True)
    try:
        pidfile = pidfile_for(tmp_path, server.pid)
        run = stop_servers(tmp_path / "evidence")
        try:
            # reaped here, as the release check (its parent) would: a zombie still counts as its group running
            assert server.wait(timeout=30) == -15, "the server did not get SIGTERM"
            out, err = run.communicate(timeout=60)
        finally:
            end(run)
        assert run.returncode == 0, out + err
        assert f"stopping the vLLM server of {pidfile} (process group {server.pid})" in out, out + err
        assert not pidfile.exists()
    finally:
        end(server)


def test_a_pid_that_no_longer_runs_has_its_pidfile_removed(tmp_path):
    for _ in range(5):
        gone = subprocess.Popen(["true"])
        gone.wait(timeout=30)
        if not Path(f"/proc/{gone.pid}").exists():
            break
    else:
        pytest.skip("every exited child's pid was taken again at once: no free pid to name")
    pidfile = pidfile_for(tmp_path, gone.pid)
    rc, out, err = stopped(tmp_path / "evidence")
    assert rc == 0, out + err
    assert not pidfile.exists()
    assert len((out + err).strip().splitlines()) <= 1


def test_nothing_to_stop_is_not_an_error(tmp_path):
    for directory in (tmp_path / "absent", tmp_path):
        rc, out, err = stopped(directory)
        assert rc == 0 and out == err == "", out + err


def test_a_pidfile_without_a_pid_is_reported_and_kept(tmp_path):
    pidfile = pidfile_for(tmp_path, os.getpid())
    pidfile.write_text("")
    rc, out, err = stopped(tmp_path / "evidence")
    assert rc == 0 and "holds no pid" in err, out + err
    assert pidfile.exists()
