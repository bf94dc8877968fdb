"""The server launcher's lifecycle on real subprocesses that die or never answer (no vLLM needed):
a clear error with the end of the log, never a hang, and the process stopped by PID."""

from __future__ import annotations

import stat
import subprocess
import time
from pathlib import Path

import pytest

from harness.serving.client import CLIENT_KEEP_ALIVE_S
from harness.serving.server import SERVER_KEEP_ALIVE_S, ServerError, VLLMServer

pytestmark = pytest.mark.serving


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable standing in for the server's Python: a real process that behaves as ``body``."""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def server(tmp_path: Path, body: str) -> VLLMServer:
    return VLLMServer(tmp_path / "ckpt", tmp_path / "tok", tmp_path / "logs" / "server.log",
                      python=fake_python(tmp_path, body))


def test_a_server_that_dies_fails_with_its_log(tmp_path):
    s = server(tmp_path, 'echo "loading model"; echo "RuntimeError: Unsupported CPU attention configuration"; exit 3')
    with pytest.raises(ServerError, match=r"(?s)exited with code 3 before it was ready.*Unsupported CPU attention"):
        s.start().wait_ready(timeout_s=60)
    assert "--max-logprobs 4096" in s.log_path.read_text()  # the log keeps the command line


def test_the_server_keeps_idle_connections_longer_than_the_harness_client(tmp_path):
    """The launched process is told its keep-alive (vLLM reads $VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and it outlasts
    the harness client's pool, so the client never reuses a connection the server is closing. That it also
    outlasts ``vllm bench serve``'s pool is checked against vLLM's source in test_vllm_server.py."""
    s = server(tmp_path, 'echo "keep-alive=$VLLM_HTTP_TIMEOUT_KEEP_ALIVE"; exit 3')
    with pytest.raises(ServerError, match="exited with code 3"):
        s.start().wait_ready(timeout_s=60)
    assert f"keep-alive={SERVER_KEEP_ALIVE_S}\n" in s.log_path.read_text()
    assert SERVER_KEEP_ALIVE_S > CLIENT_KEEP_ALIVE_S


def wait_for_log(s: VLLMServer, text: str, bound_s: float = 120.0) -> None:
    """Until the process has written ``text`` to its log (its sign that it started), or it exits, or
    ``bound_s``: a bound that a process which starts at all never comes near, however busy the box."""
    deadline = time.monotonic() + bound_s
    while text not in s.log_path.read_text():
        assert s.proc.poll() is None, f"the process exited before writing {text!r}: {s.log_path.read_text()}"
        assert time.monotonic() < deadline, f"the process wrote no {text!r} in {bound_s:g} s"
        try:
            s.proc.wait(timeout=0.05)  # the polling interval; returns at once if the process exits
        except subprocess.TimeoutExpired:
            pass


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path):
    """The 1 s wait is the timeout under test (it must fire: the server never answers); the log line it
    reports is awaited first, so a process slow to start under load cannot leave the message without it."""
    s = server(tmp_path, 'echo "warming up"; exec sleep 600')
    s.start()
    wait_for_log(s, "warming up")
    with pytest.raises(ServerError, match=r"(?s)not ready after 1 s.*warming up"):
        s.wait_ready(timeout_s=1)
    assert s.proc.poll() is not None, "the server must be stopped when it times out"


def test_only_loopback(tmp_path):
    s = server(tmp_path, "exit 0")
    s.host = "0.0.0.0"
    with pytest.raises(ValueError, match="loopback"):
        s.start()
