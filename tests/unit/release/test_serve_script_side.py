"""A served side started through a script (``--candidate-serve-script``, ``harness.release.served.ScriptServer``):
the script gets the server's parts as variables, the check knows the arguments the server runs with (its
vLLM's parser reads them back in the probe), and on a Trn2 runner the checkpoint is found under the model
root by the model's name, as --carbon-model-root finds it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.core.spec import get_shape
from harness.core.vllm_neuron import serve_command
from harness.release.errors import ReleaseCheckError
from harness.release.served import ScriptServer, served_checkpoint, spawn

pytestmark = pytest.mark.unit


def test_the_script_gets_the_servers_parts_and_the_check_knows_its_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_DEVICE", raising=False)
    server = ScriptServer(Path("/opt/models/carbon/Carbon-3B"), None, tmp_path / "candidate" / "vllm-server.log",
                          "carbon-3b", "/venvs/vllm-neuron/bin/python", port=8123,
                          env={"NEURON_RT_VISIBLE_CORES": "4-7", "VLLM_API_KEY": "k"}, shape="report-bs1",
                          cache_root=tmp_path / "vllm")
    env = server.process_env()
    assert env["SERVE_PYTHON"] == "/venvs/vllm-neuron/bin/python" and env["SHAPE"] == "report-bs1"
    assert env["PORT"] == "8123" and env["NEURON_RT_VISIBLE_CORES"] == "4-7" and env["VLLM_API_KEY"] == "k"
    assert env["PIDFILE"] == str(tmp_path / "candidate" / "vllm-server.pid")  # ci/scripts/stop-servers.sh reads it
    assert server.device == "neuron" and server.command() == ["bash", "ci/scripts/vllm-serve.sh"]
    want = serve_command("/opt/models/carbon/Carbon-3B", get_shape("report-bs1"), "carbon-3b", 8123, stack="s")
    assert server.vllm_args() == ["--model", "/opt/models/carbon/Carbon-3B", *want.args]
    monkeypatch.setenv("VLLM_DEVICE", "cpu")
    assert server.device == "cpu" and "--enforce-eager" in server.vllm_args()


def test_a_script_server_is_given_the_sides_dtype_and_records_it(tmp_path, monkeypatch):
    """``--candidate-dtype`` reaches a script-started server (DTYPE, ``vllm-serve --dtype``), and the side is
    labelled with what its server was given: the device's own where the side names none."""
    monkeypatch.delenv("VLLM_DEVICE", raising=False)
    for device, given, want in (("neuron", None, "bf16"), ("cpu", None, "fp32"), ("cpu", "bf16", "bf16")):
        server = spawn("candidate", sys.executable, {"VLLM_DEVICE": device}, tmp_path, "carbon-tiny", tmp_path,
                       tmp_path / "log", (), print, given, script="ci/scripts/vllm-serve.sh", start=False)
        args = server.vllm_args()
        assert server.dtype == want and server.process_env()["DTYPE"] == want, (device, given)
        assert args[args.index("--dtype") + 1] == {"bf16": "bfloat16", "fp32": "float32"}[want]
    own = spawn("candidate", sys.executable, {}, tmp_path, "carbon-tiny", tmp_path, tmp_path / "log", (), print,
                None, start=False)
    assert own.dtype == "fp32" and own.log_stats  # the check's own server: fp32, its stats on for /metrics


def test_a_script_server_takes_its_flags_from_the_script_only(tmp_path):
    with pytest.raises(ReleaseCheckError, match="--serve-arg --enforce-eager: a server started through"):
        spawn("candidate", sys.executable, {}, tmp_path, "carbon-tiny", tmp_path, tmp_path / "log", ("--enforce-eager",),
              print, script="ci/scripts/vllm-serve.sh", start=False)


def test_the_checkpoint_is_found_under_the_model_root_by_name(tmp_path):
    (tmp_path / "Carbon-3B").mkdir()
    assert served_checkpoint(("carbon-3b",), tmp_path, None) == (tmp_path / "Carbon-3B").resolve()
    with pytest.raises(ReleaseCheckError, match="give --model"):
        served_checkpoint(("carbon-8b",), tmp_path, None)
