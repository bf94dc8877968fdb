"""``OneAtATime``: the session's speculative and scoring servers, one of a kind at a time."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.session.servers import OneAtATime

pytestmark = pytest.mark.unit


@dataclass
class ProcessServer:
    """A real child process in a server's place (what OneAtATime touches: proc, log_path, stop)."""

    log_path: Path
    proc: subprocess.Popen = field(default_factory=lambda: subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE))

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def test_the_same_key_reuses_another_stops_the_first_and_a_failed_key_is_not_started_again(tmp_path):
    said: list[str] = []
    servers = OneAtATime("with draft", said.append)
    started: list[ProcessServer] = []

    def start(name):
        def go():
            started.append(ProcessServer(tmp_path / f"{name}.log"))
            return started[-1], f"endpoint-{name}"
        return go

    assert servers.get("a", start("a")) == "endpoint-a"
    assert servers.get("a", start("a-again")) == "endpoint-a" and len(started) == 1
    assert servers.get("b", start("b")) == "endpoint-b"
    assert started[0].proc.returncode == 0 and started[1].proc.poll() is None  # a stopped before b started
    assert said == [f"stopping vLLM with draft a (pid {started[0].proc.pid}); its log: {tmp_path / 'a.log'}"]

    calls = []

    def failing():
        calls.append(1)
        raise RuntimeError("vLLM exited with code 1")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="exited with code 1"):
            servers.get("c", failing)
    assert calls == [1]  # tried once: the second get raised the first error again
    assert started[1].proc.returncode == 0  # b was stopped before c was tried
    servers.stop()
    servers.stop()  # nothing running: nothing to stop
