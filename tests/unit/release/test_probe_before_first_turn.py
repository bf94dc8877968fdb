"""A served side whose probe fails before its server's first turn (a trn2.3xlarge, where the sides take turns
on their NeuronCores and no server is started until its side's turn) ends the check in one line naming the
real reason, exit 2, no traceback; nothing was started, so nothing is stopped. It ended in
``AttributeError: 'NoneType' object has no attribute 'pid'`` from the loop that stops the check's servers,
which read the pid of a server never started, and the reason was lost in the traceback (issue 55, item 11).

The candidate's interpreter here is this one, which has no vLLM: the probe asks it for the served side's
engine arguments (``harness.serving.engine_args``) and that fails, as it does with a vLLM that lacks the parser
module. The check runs in this process, through ``carbon-harness``'s own entry point."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.release.served import stop_started
from harness.serving.server import VLLMServer
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

SCRIPT = str(REPO / "ci" / "scripts" / "vllm-serve.sh")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                    reason="this interpreter has a vLLM: the probe would not fail (run in an interpreter without one)")
def test_a_probe_that_fails_before_the_first_turn_ends_in_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CARBON_HARNESS_TRACEBACK", raising=False)
    out = tmp_path / "out"
    rc = main(["release-check", "--baseline-python", sys.executable, "--candidate-python", sys.executable,
               "--candidate-backend", "openai", "--candidate-serve-script", SCRIPT,
               "--neuron-instance", "trn2.3xlarge", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert rc == 2 and "Traceback" not in err and "AttributeError" not in err, err
    assert len(errors) == 1, err
    assert errors[0].startswith("carbon-harness release-check: error: the candidate environment")
    assert "cannot be probed: ImportError: no vLLM in this interpreter" in errors[0]
    assert "cannot import this harness" not in errors[0]  # it imported the harness: the probe's question failed
    assert not list(out.rglob("*.pid")) and not list(out.rglob("vllm-server.log"))  # no server was started


def test_only_the_servers_that_started_are_stopped(tmp_path):
    never = VLLMServer(Path("/unused"), None, tmp_path / "never.log", "carbon-tiny")
    said: list[str] = []
    assert stop_started({"baseline": never}, said.append) == [] and said == [] and never.proc is None


def test_a_started_server_is_stopped_and_named_beside_one_never_started(tmp_path):
    class StandIn(VLLMServer):  # tests/stand_ins/server.py: answers /v1/models, as in test_core_turns
        def command(self) -> list[str]:
            return [sys.executable, str(REPO / "tests" / "stand_ins" / "server.py"), str(self.port), self.served_model]

    started = StandIn(Path("/unused"), None, tmp_path / "started.log", "carbon-tiny").start()
    never = VLLMServer(Path("/unused"), None, tmp_path / "never.log", "carbon-tiny")
    said: list[str] = []
    try:
        assert stop_started({"baseline": never, "candidate": started}, said.append) == []
    finally:
        started.stop()
    assert started.proc.poll() is not None and said == [f"stopping vLLM (pid {started.proc.pid}); its log: "
                                                        f"{tmp_path / 'started.log'}"]
