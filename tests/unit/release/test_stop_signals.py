"""A release check told to stop by SIGTERM (a cancelled CI job) or SIGHUP (a closed terminal) stops the vLLM
servers it started, as SIGINT does, exits 2 and keeps the evidence written so far; and a server's pidfile
goes with its server. Python's default for both signals ended the check at once, leaving a served side's
server running (on a Trn2 host, holding its NeuronCores). The server here is the readiness stand-in
(tests/stand_ins/server.py) started through a serve script as ci/scripts/vllm-serve.sh is: what starts and
stops it is what is tested."""

from __future__ import annotations

import selectors
import signal
import sys
import time
from pathlib import Path

import pytest

from harness.release.served import ScriptServer
from harness.serving.process_group import group_members
from tests.helpers import REPO, start_cli

pytestmark = pytest.mark.unit

SERVE_STAND_IN = f"""#!/usr/bin/env bash
# as ci/scripts/vllm-serve.sh: its pid in PIDFILE, then the server in its place
echo "$$" > "$PIDFILE"
exec "$SERVE_PYTHON" {REPO / "tests" / "stand_ins" / "server.py"} "$PORT" "$SERVED_MODEL"
"""


def read_until(proc, text: str, timeout_s: float = 300.0) -> str:
    """The check's stderr up to the line holding ``text`` (fails if it exits or stays silent first)."""
    seen, deadline = [], time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=1.0):
                continue
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if text in line:
                return "".join(seen)
    proc.kill()
    pytest.fail(f"no {text!r} from the check:\n{''.join(seen)}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stopped_check_stops_its_server_and_keeps_its_evidence(tmp_path, carbon_tiny_checkpoint, carbon_cache_dir,
                                                                 sig):
    script = tmp_path / "serve.sh"
    script.write_text(SERVE_STAND_IN)
    out = tmp_path / "out"
    proc = start_cli("release-check", "--out", str(out), "--model", "carbon-tiny", "--cache-dir", str(carbon_cache_dir),
                     "--baseline-backend", "hf", "--baseline-python", sys.executable, "--candidate-backend", "openai",
                     "--candidate-python", sys.executable, "--candidate-serve-script", str(script),
                     "--conformance-markers", "contract", "--rounds", "3")
    try:
        said = read_until(proc, "listening at")
        pid = int(said.split("starting vLLM (pid ", 1)[1].split(")", 1)[0])
        assert group_members(pid), "the server is not running"
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 2, rest
    assert f"stopped by {sig.name}" in rest and str(out) in rest
    assert group_members(pid) == []  # no process of the server's group is left
    assert not (out / "candidate" / "vllm-server.pid").exists()
    assert (out / "candidate" / "vllm-server.log").is_file() and not (out / "verdict.json").exists()


def test_a_servers_pidfile_goes_with_it(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text(SERVE_STAND_IN)
    server = ScriptServer(Path("/unused"), None, tmp_path / "vllm-server.log", "carbon-tiny", sys.executable,
                          script=script)
    try:
        server.start().wait_ready(60)
        assert int(server.pidfile.read_text()) == server.proc.pid
    finally:
        server.stop()
    assert not server.pidfile.exists()
