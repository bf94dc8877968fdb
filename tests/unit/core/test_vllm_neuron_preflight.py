"""The preflight before every vLLM Neuron server start (``harness.core.vllm_neuron_preflight``): the installed
plugin's own functions where its files import nothing beyond the standard library, the harness's rules where
no plugin is installed, which ran recorded; a refusal in one line, exit 2, before anything starts. Against the
2.32+ plugin's stand-in (tests/stand_ins/vllm_neuron_2_32, the fork's module paths and function names): the
"installed plugin" path, in the server's own interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.spec import get_shape
from harness.core.vllm_neuron import serve_command, with_efa
from harness.core.vllm_neuron_preflight import (
    NO_PLUGIN,
    PREFLIGHT_VARIABLE,
    checked,
    load_pure,
    preflight,
    pure_imports,
    visible_cores,
)
from tests.helpers import REPO

pytestmark = pytest.mark.unit

STAND_IN = REPO / "tests" / "stand_ins" / "vllm_neuron_2_32"
PACKAGE = STAND_IN / "vllm_neuron"
SKIP_EFA = {"NEURON_SKIP_EFA_AFFINITY": "1"}


def server(tokens: int = 512, model_len: int = 512, ods=None, asynchronous: bool = False, logprobs: int = 1000,
           **neuron) -> list[str]:
    """A server's arguments, in the form serve_command writes them."""
    config = {"neuron_config": {"on_device_sampling_config": ods, **neuron}}
    return ["--max-model-len", str(model_len), "--max-num-batched-tokens", str(tokens), "--max-num-seqs", "1",
            "--max-logprobs", str(logprobs), "--additional-config", json.dumps(config),
            *([] if asynchronous else ["--no-async-scheduling"])]


@pytest.mark.parametrize("source, pure", [("import os\nfrom typing import Any\n", True),
                                          ("from __future__ import annotations\nimport logging\n", True),
                                          ("import torch\n", False), ("from vllm.platforms import Platform\n", False),
                                          ("from . import envs\n", False), ("import os, vllm_neuron.envs\n", False),
                                          ("def f():\n    import torch\n", True)])
def test_only_a_module_that_imports_the_standard_library_is_loaded(source, pure, tmp_path):
    assert pure_imports(source) is pure
    (tmp_path / "m.py").write_text(source + "VALUE = 1\n")
    assert (load_pure(tmp_path / "m.py", "m") is not None) is pure
    assert load_pure(tmp_path / "absent.py", "absent") is None


@pytest.mark.parametrize("package", [None, PACKAGE], ids=["harness rules", "stand-in plugin"])
def test_each_rule_stops_with_the_plugins_message_on_either_path(package, monkeypatch):
    monkeypatch.setenv("CARBON_STANDIN_HOST_ROOT", "/nonexistent-host")
    assert preflight(server(), SKIP_EFA, package).passed
    cases = {"prefill size": (server(tokens=256), SKIP_EFA, "max_num_batched_tokens=256 is not a supported chunked"),
             "EFA": (server(), {}, "No EFA device found at /sys/bus/pci/devices/0000:c9:00.0/infiniband"),
             "admission of log-probabilities": (server(ods={"all_greedy": True}, asynchronous=True), SKIP_EFA,
                                                "so it cannot return logprobs=1000.")}
    for rule, (args, environ, message) in cases.items():
        verdict = preflight(args, environ, package)
        assert [r for r, _ in verdict.refusals] == [rule] and message in verdict.refusals[0][1], verdict


def test_the_plugins_functions_decide_where_it_is_installed(tmp_path):
    """A plugin whose bucket rule differs from the harness's is the one obeyed: its own functions ran."""
    plugin = tmp_path / "vllm_neuron"
    for rel in ("utils/bucket_utils.py", "vllm/admission.py", "utils/hardware_config.py", "vllm/platform.py"):
        (plugin / rel).parent.mkdir(parents=True, exist_ok=True)
        (plugin / rel).write_text((PACKAGE / rel).read_text())
    bucket = plugin / "utils" / "bucket_utils.py"
    bucket.write_text(bucket.read_text().replace("{512, 1024, 2048, 4096, 8192}", "{256, 512}"))
    verdict = preflight(server(tokens=256), SKIP_EFA, plugin)
    assert verdict.passed and verdict.ran.startswith("plugin vllm_neuron ") and str(plugin) in verdict.ran
    assert preflight(server(tokens=256), SKIP_EFA, None).refusals  # the harness's rule would have stopped it
    bucket.write_text("import torch\n" + bucket.read_text())  # importing it would start something: not loaded
    verdict = preflight(server(tokens=256), SKIP_EFA, plugin)
    assert verdict.refusals and any("harness rules for bucket_utils" in n for n in verdict.notes)


def test_the_core_variable_is_judged_for_the_2_32_plugin_only():
    environ = {**SKIP_EFA, "NEURON_RT_VISIBLE_CORES": "0-3"}
    assert preflight(server(), environ, PACKAGE).refusals[0][0] == "core variable"
    assert preflight(server(), environ, None).passed  # no plugin: the runtime's own variable (neuron_visibility)


def test_the_nxdi_based_plugin_is_not_held_to_the_2_32_rules(tmp_path):
    plugin = tmp_path / "vllm_neuron"
    plugin.mkdir()
    (plugin / "platform.py").write_text('class NeuronPlatform:\n'
                                        '    device_control_env_var = "NEURON_RT_VISIBLE_CORES"\n')
    verdict = preflight(server(tokens=256), {}, plugin)
    assert verdict.passed and "NxDI-based plugin" in verdict.ran


def test_efa_is_looked_up_for_each_workers_device(tmp_path):
    """A tp-8 server on cores 4-11 spans Neuron devices 1 and 2: both need an EFA device."""
    device = tmp_path / "sys/bus/pci/devices/0000:b4:00.0/infiniband/rdmap1"
    device.mkdir(parents=True)
    args = [*server(), "--tensor-parallel-size", "8"]
    verdict = preflight(args, {"NEURON_VISIBLE_DEVICES": "4-11"}, None, host_root=tmp_path)
    assert "0000:b3:00.0" in verdict.refusals[0][1]
    (tmp_path / "sys/bus/pci/devices/0000:b3:00.0/infiniband/rdmap2").mkdir(parents=True)
    assert preflight(args, {"NEURON_VISIBLE_DEVICES": "4-11"}, None, host_root=tmp_path).passed
    assert visible_cores({}, 2) == [0, 1] and visible_cores({"NEURON_VISIBLE_DEVICES": "4-5,8"}, 3) == [4, 5, 8]


def test_prompt_logprobs_refused_is_a_note_not_a_stop():
    verdict = preflight(server(ods={"all_greedy": True}), SKIP_EFA, None)
    assert verdict.passed and any("prefix" in n for n in verdict.notes)
    assert not any("prefix" in n for n in preflight(server(), SKIP_EFA, None).notes)


def test_a_refusal_is_one_line_and_exit_2_before_anything_starts(capsys, monkeypatch):
    monkeypatch.setattr("harness.core.vllm_neuron_preflight.installed_package", lambda: None)
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", *server(tokens=256)]
    with pytest.raises(SystemExit) as stop:
        checked(argv, SKIP_EFA)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm-serve: error: the vLLM Neuron plugin would stop this server "
                                                   f"(prefill size; {NO_PLUGIN}): max_num_batched_tokens=256")
    env = checked([*argv[:5], *server()], SKIP_EFA)
    assert env[PREFLIGHT_VARIABLE] == NO_PLUGIN and "start rules passed" in capsys.readouterr().err


def run_preflight(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """The preflight in a server's own interpreter, the stand-in installed on its path (as vllm-serve.sh runs it)."""
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{STAND_IN}{os.pathsep}{REPO}", **env}
    return subprocess.run([sys.executable, "-m", "harness.core.vllm_neuron_preflight", *args], cwd=REPO, env=base,
                          capture_output=True, text=True, timeout=30)


def test_the_preflight_stops_a_refused_server_against_the_installed_stand_in():
    """Within 30 s (the subprocess limit), exit 2, the plugin's own message, and which ran: the stand-in."""
    r = run_preflight(server(ods={"all_greedy": True}, asynchronous=True), **SKIP_EFA)
    assert r.returncode == 2, r.stderr
    got = json.loads(r.stdout)
    assert got["ran"] == f"plugin vllm_neuron 0.29.0.1.2.0 (carbon-standin-vllm-neuron) at {PACKAGE}"
    assert got["refusals"] == [["admission of log-probabilities", (
        "This server samples on device (on_device_sampling_config is set) and its sampler returns token ids only, so "
        "it cannot return logprobs=1000. Leave logprobs and prompt_logprobs unset, or restart the server with "
        "on_device_sampling_config: null to sample on the host.")]]
    r = run_preflight(server(tokens=256), **SKIP_EFA, CARBON_STANDIN_HOST_ROOT="/nonexistent")
    assert r.returncode == 2 and "max_num_batched_tokens=256 is not a supported" in json.loads(r.stdout)["line"]


@pytest.mark.parametrize("shape", ["smoke", "report-bs1", "contract-long"])
def test_the_preflight_passes_the_servers_the_harness_builds(shape):
    """Each default shape's contract server and timed server, with the environment ``vllm-serve`` gives it (its
    EFA variable read from this host, which has none)."""
    for logprobs in (None, 0):
        command, _ = with_efa(serve_command("/m", get_shape(shape), logprobs=logprobs, stack="t"))
        verdict = preflight(command.args, command.env, PACKAGE)
        assert verdict.passed, (shape, logprobs, verdict.line())


REQUESTS = '''import json, sys
sys.argv = ["api_server", *json.loads(sys.argv[1])]
import vllm_neuron
vllm_neuron.register()  # as vLLM loads its general plugins in the API server's process
from vllm import SamplingParams
from vllm.platforms import current_platform
for asked in ({}, {"logprobs": 5}, {"prompt_logprobs": 1}):
    try:
        current_platform.validate_request({"type": "token", "prompt_token_ids": [1, 2]},
                                          SamplingParams(max_tokens=1, temperature=0.0, **asked))
        print(json.dumps([asked, None]))
    except ValueError as exc:
        print(json.dumps([asked, str(exc)]))
'''


@pytest.mark.serving
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="the stand-in's admission runs inside vLLM's request path: needs vllm installed (nox -s "
                           "serving has it)")
def test_a_request_the_plugin_refuses_gets_its_refusal_from_the_stand_in_inside_vllm():
    """vLLM's own ``validate_request`` (what its input processor calls for every request, HTTP 400 on a
    ValueError), with the stand-in registered on a server sampling on device with async scheduling: a request
    asking no log-probabilities is admitted, one asking either kind gets the plugin's refusal (the policy's
    other cases: the stand-in path of the tests above)."""
    args = server(tokens=160, model_len=160, ods={"all_greedy": True}, asynchronous=True)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{STAND_IN}{os.pathsep}{REPO}", **SKIP_EFA}
    r = subprocess.run([sys.executable, "-c", REQUESTS, json.dumps(args)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = {next(iter(asked), "none"): message for asked, message in map(json.loads, r.stdout.splitlines())}
    assert got["none"] is None and {name for name, message in got.items() if message} == {"logprobs",
                                                                                           "prompt_logprobs"}
    assert all(m.startswith("This server samples on device (on_device_sampling_config is set)") for m in got.values()
               if m)


def test_every_start_through_the_serve_script_runs_the_plugins_rules_first(tmp_path):
    """ci/scripts/vllm-serve.sh (``vllm-serve --exec``), the stand-in plugin on the server's path: a timed server
    the plugin accepts starts, recording which ran in its environment; one it refuses (the range handed on in
    NEURON_RT_VISIBLE_CORES, as the script did before 2.32) ends in one line, exit 2, and no server ran."""
    from tests.unit.core.test_vllm_neuron import run_serve_script, with_plugin

    script = REPO / "ci" / "scripts" / "vllm-serve.sh"
    r, got = run_serve_script(tmp_path, script, MAX_LOGPROBS="0", **with_plugin(tmp_path, STAND_IN))
    assert r.returncode == 0, r.stderr
    ran = f"plugin vllm_neuron 0.29.0.1.2.0 (carbon-standin-vllm-neuron) at {PACKAGE}"
    assert got["env"][PREFLIGHT_VARIABLE] == ran
    old = tmp_path / "old-vllm-serve.sh"
    old.write_text(script.read_text().replace('if [ -n "$cores" ]; then args+=(--neuron-cores "$cores"); fi\n', ""))
    r, got = run_serve_script(tmp_path, old, MAX_LOGPROBS="0", CARBON_NEURON_CORES="", NEURON_RT_VISIBLE_CORES="4-7",
                              **with_plugin(tmp_path, STAND_IN))
    assert r.returncode == 2 and not got, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    assert errors == ["vllm-serve: error: the vLLM Neuron plugin would stop this server (core variable; plugin "
                      f"vllm_neuron 0.29.0.1.2.0 (carbon-standin-vllm-neuron) at {PACKAGE}): NEURON_RT_VISIBLE_CORES "
                      "cannot be used with multi-processing execution on vLLM. Set NEURON_VISIBLE_DEVICES to control "
                      "device visibility."], r.stderr
