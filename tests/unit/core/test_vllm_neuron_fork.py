"""Opt-in: the preflight against the 2.32+ plugin's own code (issue 55): the fork jinhuang12/vllm-neuron's modules
that decide a server start (``vllm_neuron/utils/bucket_utils.py``, ``vllm_neuron/vllm/admission.py``,
``vllm_neuron/utils/hardware_config.py``), assembled verbatim in a tree outside this repository and named by
``CARBON_VLLM_NEURON_SOURCE`` (the directory that holds ``vllm_neuron/`` and ``FORK_MANIFEST.json``, which
records each file's commit), as ``CARBON_NXDI_SOURCE`` names NxDI's sources. The fork's code never enters the
repository. What runs: the preflight with that tree first on a server interpreter's path (the installed-plugin
path: the fork's own functions, loaded from their files), and the stand-in
(tests/stand_ins/vllm_neuron_2_32) and the harness's rules (harness.core.vllm_neuron_rules) held to the same
answers, case by case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.vllm_neuron_preflight import PLUGIN_FILES, preflight
from tests.helpers import REPO
from tests.unit.core.test_vllm_neuron_preflight import PACKAGE, SKIP_EFA, server

pytestmark = pytest.mark.unit

FILES = ("vllm_neuron/utils/bucket_utils.py", "vllm_neuron/vllm/admission.py", "vllm_neuron/utils/hardware_config.py")


@pytest.fixture(scope="module")
def fork() -> Path:
    source = os.environ.get("CARBON_VLLM_NEURON_SOURCE")
    if not source:
        pytest.skip("the fork's own start checks need CARBON_VLLM_NEURON_SOURCE: a directory holding the fork "
                    "jinhuang12/vllm-neuron's " + ", ".join(FILES) + " (verbatim) and FORK_MANIFEST.json recording "
                    "each file's commit, outside this repository (e.g. ~/.cache/carbon-harness/vllm-neuron-fork/tree)")
    root = Path(source).expanduser()
    manifest = json.loads((root / "FORK_MANIFEST.json").read_text())
    for name in FILES:
        text = (root / name).read_text()
        assert len(text) == manifest["files"][name]["chars"], f"{name}: not the recorded file"
    return root


def test_the_tree_holds_every_file_the_preflight_loads_from_a_plugin():
    """What a user must assemble (this module's FILES, named in its skip line) is exactly what the preflight
    loads from an installed plugin: a file left out would silently fall back to the harness's rules."""
    assert sorted(FILES) == sorted(f"vllm_neuron/{path}" for path in PLUGIN_FILES.values())


CASES = {  # name: (server arguments, environment)
    "single-shot": (server(), SKIP_EFA),
    "chunk 256 below 512": (server(tokens=256), SKIP_EFA),
    "chunk 512 below 2048": (server(tokens=512, model_len=2048), SKIP_EFA),
    "single-shot past 16k": (server(tokens=16385, model_len=16385), SKIP_EFA),
    "last bucket not the clamped tokens": (server(tokens=8192, num_batched_tokens_buckets=[8192]), SKIP_EFA),
    "segment size 256": (server(tokens=256, model_len=1024, kv_segment_size_buckets=[256]), SKIP_EFA),
    "no EFA": (server(), {}),
    "logprobs, async, on device": (server(ods={"all_greedy": True}, asynchronous=True), SKIP_EFA),
    "logprobs, sync, on device": (server(ods={"all_greedy": True}), SKIP_EFA),
    "timed server, async, on device": (server(ods={"all_greedy": True}, asynchronous=True, logprobs=0), SKIP_EFA),
}


@pytest.mark.parametrize("case", CASES)
def test_the_stand_in_answers_as_the_forks_own_code(fork, case, monkeypatch):
    monkeypatch.setenv("CARBON_STANDIN_HOST_ROOT", "/")  # both read this host's /sys
    args, environ = CASES[case]
    real = preflight(args, environ, fork / "vllm_neuron")
    assert real.ran.startswith("plugin vllm_neuron ") and str(fork) in real.ran
    assert not any("harness rules for" in n for n in real.notes), real.notes  # every file was the fork's own
    assert preflight(args, environ, PACKAGE).refusals == real.refusals  # the stand-in
    assert preflight(args, environ, None).refusals == real.refusals  # the harness's own rules (no plugin)


def test_the_preflight_stops_a_refused_server_with_the_forks_message(fork):
    """The fork tree first on a server interpreter's path: exit 2 within 30 s, the fork's own words."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{fork}{os.pathsep}{REPO}", **SKIP_EFA}
    r = subprocess.run([sys.executable, "-m", "harness.core.vllm_neuron_preflight", *server(tokens=256)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    got = json.loads(r.stdout)
    assert got["ran"].startswith("plugin vllm_neuron ") and got["ran"].endswith(str(fork / "vllm_neuron"))
    assert got["refusals"] == [["prefill size", (
        "max_num_batched_tokens=256 is not a supported chunked prefill size on Neuron. Supported values: [512, 1024, "
        "2048, 4096, 8192]. Alternatively, set max_num_batched_tokens=512 (equal to max_model_len) to disable chunked "
        "prefill.")]]
