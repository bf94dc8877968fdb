"""The harness shapes as vLLM Neuron servers (``harness.core.vllm_neuron``): the same compiled shape NxDI
builds, every request treated as NxDI treats it (no prefix cache, no tokenizer, no generation config,
greedy on device), in flags vLLM's own argument parser reads back to the same values; the command line runs
where a shell ``exec``s it, and ``ci/scripts/vllm-serve.sh`` delivers it to the server intact."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.core.neuron_visibility import CHOSEN_SOURCE, CHOSEN_VARIABLE
from harness.core.spec import SCORING_SHAPES, SHAPES, get_shape
from harness.core.vllm_neuron import (BLOCK_SIZE, LAST_USED_FILE, engine_arguments, kv_blocks, max_logprobs,
                                      serve_command)
from tests.helpers import REPO

pytestmark = pytest.mark.unit

ALL_SHAPES = sorted(SHAPES.values(), key=lambda s: s.name)


def flag(args: tuple[str, ...], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda s: s.name)
def test_a_shape_maps_onto_the_servers_flags(shape):
    command = serve_command("/models/Carbon-8B", shape, "carbon-8b", stack="vllm-neuron 0.29.0.1.2.0")
    args = command.args
    assert int(flag(args, "--tensor-parallel-size")) == shape.tp_degree
    assert int(flag(args, "--max-model-len")) == shape.seq_len
    assert int(flag(args, "--max-num-seqs")) == shape.batch_size
    batched = int(flag(args, "--max-num-batched-tokens"))
    assert batched == engine_arguments(shape).values["max_num_batched_tokens"]  # pinned: test_vllm_neuron_args.py
    neuron = command.neuron_config()
    # vLLM Neuron: the largest bucket of each must equal its engine limit (the prefill's as the plugin clamps it)
    assert max(neuron["num_batched_tokens_buckets"]) == min(batched, shape.seq_len)
    assert max(neuron["num_seqs_buckets"]) == shape.batch_size
    # the contract's server samples on the host, synchronously: the plugin refuses (prompt) logprobs otherwise
    assert neuron["on_device_sampling_config"] is None and "--no-async-scheduling" in args
    timed = serve_command("/models/Carbon-8B", shape, "carbon-8b", stack="s", logprobs=0)
    assert timed.neuron_config()["on_device_sampling_config"] == {"all_greedy": True}  # a JSON boolean
    assert not any("async-scheduling" in a for a in timed.args)  # the plugin's shipped default
    # the KV cache holds every sequence of the batch at full length, plus vLLM's null block
    blocks = int(flag(args, "--num-gpu-blocks-override"))
    assert (blocks - 1) * int(flag(args, "--block-size")) >= shape.batch_size * shape.seq_len
    assert int(command.env["VLLM_NEURON_COMPILATION_TIMEOUT"]) > 600  # the default is too short for the 8B
    assert command.env["VLLM_CACHE_ROOT"].endswith(f"carbon-8b-{shape.name}-vllm-neuron-0.29.0.1.2.0")


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda s: s.name)
def test_every_request_is_treated_as_nxdi_treats_it(shape):
    args = serve_command("/models/Carbon-3B", shape).args
    assert "--no-enable-prefix-caching" in args  # on by default: a repeated prompt would reuse its KV
    assert "--skip-tokenizer-init" in args and "--tokenizer" not in args  # ids in, ids out
    assert flag(args, "--generation-config") == "vllm"
    assert flag(args, "--host") == "127.0.0.1"
    assert "--device" not in args  # vLLM Neuron is a platform plugin: there is no --device neuron


def test_max_logprobs_cover_what_the_harness_asks():
    from harness.serving.scoring import FULL_VOCAB_TOP_K
    from harness.workloads.contract import TOP_K

    for shape in ALL_SHAPES:
        want = FULL_VOCAB_TOP_K if shape.name in SCORING_SHAPES else TOP_K
        assert max_logprobs(shape) == want, shape.name
        assert int(flag(serve_command("m", shape).args, "--max-logprobs")) == want


def test_kv_blocks_are_whole_sequences():
    shape = get_shape("smoke")  # 160 positions: 5 blocks of 32
    assert kv_blocks(shape) == 6 and kv_blocks(shape, 16) == 11 and BLOCK_SIZE == 32


def test_the_cpu_device_swaps_only_the_device_flags():
    shape = get_shape("report-bs1")
    neuron = serve_command("/m", shape, "carbon-3b", stack="s")
    cpu = serve_command("/m", shape, "carbon-3b", device="cpu", stack="s")

    def pairs(args):
        out, i = {}, 0
        while i < len(args):
            takes = i + 1 < len(args) and not args[i + 1].startswith("--")
            out[args[i]] = args[i + 1] if takes else True
            i += 2 if takes else 1
        return out

    a, b = pairs(neuron.args), pairs(cpu.args)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert changed == {"--tensor-parallel-size", "--dtype", "--enforce-eager"}
    assert b["--tensor-parallel-size"] == "1" and b["--dtype"] == "float32"
    assert set(cpu.env) - set(neuron.env) == {"VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "CARBON_REHEARSED_TP"}
    assert cpu.env["CARBON_REHEARSED_TP"] == str(shape.tp_degree)  # the ranks it has on the device
    with pytest.raises(ValueError, match="device 'gpu'"):
        serve_command("/m", shape, device="gpu")


def test_the_printed_command_runs_under_exec():
    """The workflow's old `bash -c "exec $cmd"` of a `VAR=... vllm serve` line: exit 127 ("exec: VAR=...: not
    found"). The printed line sets its environment with `env`, so an `exec` runs it."""
    command = serve_command("/m", get_shape("smoke"), "carbon-tiny", stack="s")
    true = shutil.which("true")
    ok = subprocess.run(["bash", "-c", f"exec {command.shell(true)}"], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    old_style = command.shell(true).removeprefix("env ")
    broken = subprocess.run(["bash", "-c", f"exec {old_style}"], capture_output=True, text=True, timeout=30)
    assert broken.returncode == 127, broken.stderr  # exec took VLLM_CACHE_ROOT=... for the command


# A stand-in for vLLM's API server module: it records the argv and environment the server would start with
# and exits. It is not what is under test: the script and `vllm-serve --exec` in front of it are.
STAND_IN = '''import json, os, sys
from importlib.metadata import entry_points
for plugin in entry_points(group="vllm.general_plugins"):  # as vLLM loads its general plugins at start
    plugin.load()()
with open(os.environ["STAND_IN_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "pid": os.getpid()}, f)
'''


def stand_in_vllm(tmp_path: Path) -> Path:
    root = tmp_path / "stand-in"
    module = root / "vllm" / "entrypoints" / "openai"
    module.mkdir(parents=True)
    for pkg in (root / "vllm", root / "vllm" / "entrypoints", module):
        (pkg / "__init__.py").write_text("")
    (module / "api_server.py").write_text(STAND_IN)
    return root


def run_serve_script(tmp_path: Path, script: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    record = tmp_path / "record.json"
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{stand_in_vllm(tmp_path)}{os.pathsep}{REPO}",
            "STAND_IN_RECORD": str(record), "SERVE_PYTHON": sys.executable, "CHECKPOINT": "/models/Carbon-3B",
            "SHAPE": "report-bs1", "SERVED_MODEL": "carbon-3b", "PORT": "8123", "VLLM_CACHE": str(tmp_path / "vllm"),
            "PIDFILE": str(tmp_path / "vllm-server.pid"), "CARBON_NEURON_CORES": "4-7", **env}
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=base, capture_output=True, text=True, timeout=120)
    return r, json.loads(record.read_text()) if record.is_file() else {}


def test_the_serve_script_hands_the_server_its_flags_environment_and_cores(tmp_path):
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh")
    assert r.returncode == 0, r.stderr
    tmp_path = Path(got["env"]["PIDFILE"]).parent
    want = serve_command("/models/Carbon-3B", get_shape("report-bs1"), "carbon-3b", port=8123,
                         cache_root=str(tmp_path / "vllm"), stack="s")
    assert got["argv"] == ["--model", "/models/Carbon-3B", *want.args]
    for key in ("VLLM_NEURON_COMPILATION_TIMEOUT", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"):
        assert got["env"][key] == want.env[key]
    assert got["env"]["NEURON_RT_VISIBLE_CORES"] == "4-7"
    root = Path(got["env"]["VLLM_CACHE_ROOT"])
    assert root.parent == tmp_path / "vllm" and (root / LAST_USED_FILE).is_file()  # cache-evict.sh reads it
    assert int((tmp_path / "vllm-server.pid").read_text()) == got["pid"]  # the server took the script's pid


def test_the_serve_script_refuses_a_neuron_server_without_its_cores(tmp_path):
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", CARBON_NEURON_CORES="")
    assert r.returncode == 2 and "CARBON_NEURON_CORES" in r.stderr and not got
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", SHAPE="smoke report-bs1")
    assert r.returncode == 2 and "one served leg per shape" in r.stderr and not got


def test_the_serve_script_gives_the_server_its_dtype(tmp_path):
    """DTYPE (a release check's ``--*-dtype``) reaches ``--dtype``; unset, the device's own; one vLLM has no
    name for is refused before a server starts."""
    script = REPO / "ci" / "scripts" / "vllm-serve.sh"
    for env, want in (({"VLLM_DEVICE": "cpu", "DTYPE": "bf16"}, "bfloat16"), ({"VLLM_DEVICE": "cpu"}, "float32"),
                      ({}, "bfloat16")):
        r, got = run_serve_script(tmp_path, script, **env)
        assert r.returncode == 0, r.stderr
        assert got["argv"][got["argv"].index("--dtype") + 1] == want, env
    r, got = run_serve_script(tmp_path, script, DTYPE="int8")
    assert r.returncode == 2 and "'int8'" in r.stderr and not got


def test_the_old_break_planted_in_the_script_is_caught(tmp_path):
    """The workflow's old start, planted back into a copy of the script: the server never starts."""
    script = tmp_path / "vllm-serve.sh"
    text = (REPO / "ci" / "scripts" / "vllm-serve.sh").read_text()
    old = 'exec "$SERVE_PYTHON" -m harness.core.vllm_neuron --exec "${args[@]}"'
    assert old in text
    script.write_text(text.replace(old, 'cmd=$("$SERVE_PYTHON" -m harness.core.vllm_neuron "${args[@]}")\n'
                                        'bash -c "exec ${cmd#env }"'))
    r, got = run_serve_script(tmp_path, script)
    assert r.returncode != 0 and not got, r.stderr


@pytest.mark.serving
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM's own argument parser needs vllm installed (nox -s serving has it)")
@pytest.mark.parametrize("device", ["neuron", "cpu"])
def test_vllms_own_parser_reads_the_flags_back(device):
    from harness.serving.engine_args import engine_args

    shape = get_shape("a100-style-bs16")
    command = serve_command("/models/Carbon-8B", shape, "carbon-8b", device=device, stack="s")
    parsed = engine_args(["--model", "/models/Carbon-8B", *command.args])["args"]
    assert parsed["tensor_parallel_size"] == (1 if device == "cpu" else shape.tp_degree)
    assert parsed["max_model_len"] == shape.seq_len and parsed["max_num_seqs"] == shape.batch_size
    assert parsed["max_num_batched_tokens"] == shape.seq_len  # single-shot prefill (test_vllm_neuron_args.py)
    assert parsed["block_size"] == BLOCK_SIZE and parsed["num_gpu_blocks_override"] == kv_blocks(shape)
    assert parsed["enable_prefix_caching"] is False and parsed["skip_tokenizer_init"] is True
    assert parsed["generation_config"] == "vllm" and parsed["max_logprobs"] == max_logprobs(shape)
    assert parsed["additional_config"]["neuron_config"]["num_seqs_buckets"] == [shape.batch_size]
    assert parsed["additional_config"]["neuron_config"]["on_device_sampling_config"] is None
    assert parsed["async_scheduling"] is False  # --no-async-scheduling exists in this vLLM's parser
    timed = serve_command("/models/Carbon-8B", shape, "carbon-8b", device=device, stack="s", logprobs=0)
    parsed = engine_args(["--model", "/models/Carbon-8B", *timed.args])["args"]
    assert parsed["additional_config"]["neuron_config"]["on_device_sampling_config"]["all_greedy"] is True
    assert parsed["async_scheduling"] is None and parsed["max_logprobs"] == 0  # vLLM's own default, untouched
    assert parsed["dtype"] == ("float32" if device == "cpu" else "bfloat16")


def test_the_last_used_stamp_is_the_one_nxdi_artifacts_use():
    from harness.backends.neuron.artifacts import LAST_USED_FILE as NXDI_LAST_USED

    assert LAST_USED_FILE == NXDI_LAST_USED


PLUGIN_2_32 = REPO / "tests" / "stand_ins" / "vllm_neuron_2_32"
DLAMI_LEFTOVERS = {"NEURON_RT_VISIBLE_CORES": "0-63", "NEURON_VISIBLE_DEVICES": "0-63"}  # a host's own, never passed on


def with_plugin(tmp_path: Path, plugin: Path) -> dict[str, str]:
    """The server's path: the stand-in vLLM, then the plugin, then this checkout."""
    vllm = stand_in_vllm(Path(tempfile.mkdtemp(dir=tmp_path)))
    return {"PYTHONPATH": f"{vllm}{os.pathsep}{plugin}{os.pathsep}{REPO}"}


def test_a_2_32_plugin_server_gets_its_cores_in_neuron_visible_devices_only(tmp_path):
    """The 2.32+ plugin (its stand-in: the platform attribute and the worker check, from the fork's source) reads
    NEURON_VISIBLE_DEVICES, and its workers stop when NEURON_RT_VISIBLE_CORES is set: the server gets exactly its
    planned range in the first and not the second, whatever the host had set, and the worker check passes."""
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", **DLAMI_LEFTOVERS,
                              **with_plugin(tmp_path, PLUGIN_2_32))
    assert r.returncode == 0, r.stderr
    assert got["env"]["NEURON_VISIBLE_DEVICES"] == "4-7" and "NEURON_RT_VISIBLE_CORES" not in got["env"]
    assert got["env"][CHOSEN_VARIABLE] == "NEURON_VISIBLE_DEVICES"
    assert str(PLUGIN_2_32 / "vllm_neuron" / "vllm" / "platform.py") in got["env"][CHOSEN_SOURCE]
    assert "NeuronCores 4-7 in NEURON_VISIBLE_DEVICES (chosen by" in r.stderr


def test_an_nxdi_based_plugin_server_gets_its_cores_in_neuron_rt_visible_cores_only(tmp_path):
    """vllm-project/vllm-neuron 0.2.0's platform (``vllm_neuron/platform.py`` at a96712544a52) declares
    NEURON_RT_VISIBLE_CORES: its one-process server gets the range there, and no NEURON_VISIBLE_DEVICES."""
    plugin = tmp_path / "nxdi-plugin"
    (plugin / "vllm_neuron").mkdir(parents=True)
    (plugin / "vllm_neuron" / "__init__.py").write_text("")
    (plugin / "vllm_neuron" / "platform.py").write_text(
        "class NeuronPlatform(Platform):\n    device_control_env_var: str = \"NEURON_RT_VISIBLE_CORES\"\n")
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", **DLAMI_LEFTOVERS,
                              **with_plugin(tmp_path, plugin))
    assert r.returncode == 0, r.stderr
    assert got["env"]["NEURON_RT_VISIBLE_CORES"] == "4-7" and "NEURON_VISIBLE_DEVICES" not in got["env"]


def test_the_old_start_stops_a_2_32_server_with_the_plugins_own_error(tmp_path):
    """The script as it was (the range handed on in NEURON_RT_VISIBLE_CORES, no choice of variable), planted back
    into a copy: the 2.32+ plugin's worker check stops the server at start with the plugin's own words."""
    script = tmp_path / "vllm-serve.sh"
    text = (REPO / "ci" / "scripts" / "vllm-serve.sh").read_text()
    choice = 'if [ -n "$cores" ]; then args+=(--neuron-cores "$cores"); fi\n'
    assert choice in text
    script.write_text(text.replace(choice, ""))
    r, got = run_serve_script(tmp_path, script, CARBON_NEURON_CORES="", NEURON_RT_VISIBLE_CORES="4-7",
                              **with_plugin(tmp_path, PLUGIN_2_32))
    assert r.returncode != 0 and not got
    assert ("NEURON_RT_VISIBLE_CORES cannot be used with multi-processing execution on vLLM. "
            "Set NEURON_VISIBLE_DEVICES to control device visibility.") in r.stderr


def test_a_range_that_does_not_fit_the_servers_ranks_stops_the_2_32_server(tmp_path):
    """The plugin's worker asserts one core per local rank: a tp-4 shape given 2 cores does not start."""
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", CARBON_NEURON_CORES="4-5",
                              **with_plugin(tmp_path, PLUGIN_2_32))
    assert r.returncode != 0 and not got and "names 2 devices for 4 local ranks" in r.stderr


def test_the_timed_server_and_the_engine_timeout_reach_vllm(tmp_path):
    """MAX_LOGPROBS=0 (a perf round's server, as users start one) and SERVE_TIMEOUT (the check's --serve-timeout,
    which vLLM ignores unless it is VLLM_ENGINE_READY_TIMEOUT_S: its default 600 s is shorter than a cold 8B)."""
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", MAX_LOGPROBS="0",
                              SERVE_TIMEOUT="3600")
    assert r.returncode == 0, r.stderr
    assert got["argv"][got["argv"].index("--max-logprobs") + 1] == "0"
    assert got["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh")
    assert got["argv"][got["argv"].index("--max-logprobs") + 1] == str(max_logprobs(get_shape("report-bs1")))


@pytest.mark.parametrize(("serve_timeout", "waits"), [("7200", ("7200", "7200", "7200")),
                                                      ("60", ("1800", "1800", "3600"))])
def test_every_compile_wait_is_at_least_the_serve_timeout_and_the_venv_bin_is_first(tmp_path, serve_timeout, waits):
    """The 2.32+ plugin's compile waits under their 2.32 names (NEURON_LIBTORCH_COMPILATION_TIMEOUT, a rank waiting
    on another's compile; VLLM_NEURON_BARRIER_TIMEOUT, its tp_barrier, 3600 s by default) and the NxDI-based one's
    (VLLM_NEURON_COMPILATION_TIMEOUT), none below --serve-timeout; the serving venv's bin (as given, a link into
    another python's) first on PATH, where the plugin's workers look for neuronx-cc."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    r, got = run_serve_script(tmp_path, REPO / "ci" / "scripts" / "vllm-serve.sh", SERVE_TIMEOUT=serve_timeout,
                              SERVE_PYTHON=str(venv_bin / "python"))
    assert r.returncode == 0, r.stderr
    names = ("NEURON_LIBTORCH_COMPILATION_TIMEOUT", "VLLM_NEURON_COMPILATION_TIMEOUT", "VLLM_NEURON_BARRIER_TIMEOUT")
    assert tuple(got["env"][n] for n in names) == waits
    path = got["env"]["PATH"].split(os.pathsep)
    assert path[0] == str(venv_bin) and path.count(str(venv_bin)) == 1


def test_a_direct_start_gets_the_same_waits_and_path():
    from harness.release.plan import Side
    from harness.release.served import server_env

    env = server_env(Side("candidate", "/opt/venvs/vllm-2.33/bin/python", backend="openai"), 5000.0)
    assert env["NEURON_LIBTORCH_COMPILATION_TIMEOUT"] == "5000" and env["VLLM_NEURON_BARRIER_TIMEOUT"] == "5000"
    assert env["PATH"].split(os.pathsep)[0] == "/opt/venvs/vllm-2.33/bin"
