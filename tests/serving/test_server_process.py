"""The server launcher's lifecycle on real subprocesses that die or never answer (no vLLM needed):
a clear error with the end of the log, never a hang, and the process stopped with its whole group.
Against real HTTP servers on 127.0.0.1 that answer ``/v1/models`` as another server, or one that wants
an API key, would."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.serving.client import CLIENT_KEEP_ALIVE_S
from harness.serving.server import SERVER_KEEP_ALIVE_S, ServerError, VLLMServer
from tests.serving.loopback import QuietHandler, http_server

pytestmark = pytest.mark.serving


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable standing in for the server's Python: a real process that behaves as ``body``."""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def server(tmp_path: Path, body: str, **kw) -> VLLMServer:
    return VLLMServer(tmp_path / "ckpt", tmp_path / "tok", tmp_path / "logs" / "server.log",
                      python=fake_python(tmp_path, body), **kw)


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


# ---------------------------------------------------------------------------------------------
# The whole process group stopped: vLLM's API server spawns its engine core in its own session
# ---------------------------------------------------------------------------------------------

def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, whose parent has not reaped it yet, holds no CPU)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return text[text.rindex(")") + 2] not in "ZX"


def child_pid(s: VLLMServer) -> int:
    """The PID of the child the fake server wrote to its log as ``child PID`` (an engine core's stand-in)."""
    found = re.search(r"^child (\d+)$", s.log_path.read_text(), re.M)
    assert found, f"the fake server wrote no child PID: {s.log_path.read_text()}"
    return int(found.group(1))


def test_stop_ends_the_group_of_a_server_that_already_exited(tmp_path):
    """The API server gone, its engine core left spinning: ``stop`` ends the rest of its group, and returns
    only once none of it runs."""
    s = server(tmp_path, 'sleep 600 & echo "child $!"; exit 0').start()
    s.proc.wait(timeout=120)
    child = child_pid(s)
    assert running(child)
    s.stop()
    assert not running(child), "the server's child outlived stop()"


def test_stop_ends_the_children_the_server_left_behind(tmp_path):
    """The API server exits on SIGTERM without stopping its child: the child is stopped with the group."""
    s = server(tmp_path, 'sleep 600 & echo "child $!"; wait').start()
    wait_for_log(s, "child ")
    child = child_pid(s)
    s.stop()
    assert s.proc.poll() is not None and not running(child), "the server's child outlived stop()"


def test_a_child_that_ignores_sigterm_is_killed(tmp_path):
    """A child that ignores SIGTERM gets SIGKILL once the grace period is out."""
    s = server(tmp_path, "sh -c 'trap \"\" TERM; echo \"child $$\"; exec sleep 600' & wait").start()
    wait_for_log(s, "child ")
    child = child_pid(s)
    s.stop(grace_s=1)
    assert not running(child), "the child that ignores SIGTERM outlived stop()"


def test_a_server_that_dies_leaves_no_child_running(tmp_path):
    s = server(tmp_path, 'sleep 600 & echo "child $!"; echo "RuntimeError: engine core failed"; exit 3')
    with pytest.raises(ServerError, match=r"(?s)exited with code 3 before it was ready.*engine core failed"):
        s.start().wait_ready(timeout_s=60)
    assert not running(child_pid(s)), "the dead server's child is still running"


# ---------------------------------------------------------------------------------------------
# What answers on the port: the served model, or another server, or one that wants an API key
# ---------------------------------------------------------------------------------------------

@contextmanager
def models_server(models: list[str], key: str | None = None) -> Iterator[int]:
    """A real HTTP server on a loopback port whose ``/v1/models`` lists ``models``, answering 401 to a
    request without ``Bearer KEY`` when ``key`` is given; yields its port."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b'{"error": "Unauthorized"}')
                return
            body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with http_server(Handler) as port:
        yield port


# the bound a refusal must come well inside: polling until it ran out was the bug (the run waited 300 s)
REFUSAL_BOUND_S = 60


def test_an_api_key_refusal_fails_at_once_saying_so(tmp_path):
    """A 401 on /v1/models is no "not ready yet": waiting will not change it. The server is stopped and
    the error says what is wrong, long before the readiness timeout."""
    with models_server(["carbon-tiny"], key="their-key") as port:
        s = server(tmp_path, "exec sleep 600", port=port).start()
        with pytest.raises(ServerError, match=r"answers HTTP 401: the server there wants an API key.*VLLM_API_KEY"):
            s.wait_ready(timeout_s=REFUSAL_BOUND_S)
    assert s.proc.poll() is not None, "the server must be stopped when it is refused"


def test_an_inherited_vllm_api_key_is_not_passed_to_the_server(tmp_path, monkeypatch):
    """vLLM takes $VLLM_API_KEY as its own key; the harness's clients send $CARBON_API_KEY, so a key left
    in the environment would make the server refuse them (401)."""
    monkeypatch.setenv("VLLM_API_KEY", "inherited")
    s = server(tmp_path, 'echo "key=${VLLM_API_KEY:-none}"; exit 3')
    with pytest.raises(ServerError, match="exited with code 3"):
        s.start().wait_ready(timeout_s=60)
    assert "key=none\n" in s.log_path.read_text()


def test_a_key_given_to_the_server_is_sent_while_waiting(tmp_path):
    with models_server(["carbon-tiny"], key="k") as port:
        s = server(tmp_path, 'echo "key=$VLLM_API_KEY"; exec sleep 600', port=port, env={"VLLM_API_KEY": "k"}).start()
        try:
            assert s.wait_ready(timeout_s=REFUSAL_BOUND_S) is s
            # the fake answers on a port that was serving before it started: on a busy box wait_ready can
            # return before the shell has run its echo, so wait for its sign before stopping it
            wait_for_log(s, "key=")
        finally:
            s.stop()
    assert "key=k\n" in s.log_path.read_text()


def test_another_server_on_the_port_is_an_error(tmp_path):
    """The port was free when chosen and taken before the server bound it: what answers serves another
    model, so the harness would measure someone else's server."""
    with models_server(["someone-else"]) as port:
        s = server(tmp_path, "exec sleep 600", port=port).start()
        with pytest.raises(ServerError, match=rf"lists \['someone-else'\], not 'carbon-tiny': another server holds port "
                                              rf"{port}"):
            s.wait_ready(timeout_s=REFUSAL_BOUND_S)
    assert s.proc.poll() is not None
