"""The probe records the host under a side (issue 30, item 3): ``neuron-ls --json-output`` as printed,
the Neuron OS packages' versions and the side's ``pip freeze``; the verdict's table shows one line of
each and leaves the raw records to verdict.json. ``neuron-ls`` is a Neuron binary that cannot exist
here: the probe runs for real, in a subprocess, with a STUB ``neuron-ls`` first on PATH that prints the
recorded trn2.3xlarge output (fixtures/neuron_ls/)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from harness.analysis.verdict import Verdict
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit


def test_the_probe_records_neuron_ls_os_packages_and_pip_freeze(tmp_path):
    stub = tmp_path / "neuron-ls"
    stub.write_text(f"#!/bin/sh\n# STUB neuron-ls\ncat '{REPO / 'fixtures' / 'neuron_ls' / 'trn2.3xlarge.json'}'\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "harness.release.probe"], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["neuron_ls"][0]["instance_type"] == "trn2.3xlarge"
    assert info["neuron_instance"] == "trn2.3xlarge (1 device(s), LNC=2)"
    assert "neuron_os_packages" in info  # versions on a Neuron host; here dpkg-query's reason for none
    assert isinstance(info["pip_freeze"], list) and any(line.startswith("pytest==") for line in info["pip_freeze"])


def test_the_verdict_table_shows_scalars_and_leaves_raw_records_to_the_json():
    side = {"versions": {"neuronx-cc": "2.24.5133.0", "os:aws-neuronx-runtime-lib": "2.31.24.0",
                         "neuron_ls": [{"instance_type": "trn2.3xlarge"}], "pip_freeze": ["nki==0.3.0"]}}
    verdict = Verdict([], [], [], {"baseline": side, "candidate": side}, 4, 0.95, 0.05, "device")
    md = verdict.markdown()
    assert "| os:aws-neuronx-runtime-lib | 2.31.24.0 | 2.31.24.0 |" in md and "| neuronx-cc |" in md
    assert "neuron_ls" not in md and "pip_freeze" not in md
    assert verdict.to_dict()["sides"]["baseline"]["versions"]["pip_freeze"] == ["nki==0.3.0"]


def test_a_venvs_own_records_read_as_the_verdict_shows_them(tmp_path):
    """The vLLM Neuron build's source and the resolved set: nothing where the venv has no file, the record where
    it has one, and one line naming the file where it is broken (never a crash of the probe)."""
    from harness.release.probe import VLLM_NEURON_SOURCE_FILE, resolved_record, vllm_neuron_source
    from harness.release.resolved import RESOLVED_FILE

    assert vllm_neuron_source(tmp_path) == {} and resolved_record(tmp_path) == {}
    (tmp_path / VLLM_NEURON_SOURCE_FILE).write_text('{"commit": "abc1234", "tag": "v0.2.0", "source": "git"}')
    assert vllm_neuron_source(tmp_path) == {"vllm_neuron_source": {"commit": "abc1234", "tag": "v0.2.0",
                                                                   "source": "git"},
                                            "vllm_neuron_commit": "abc1234 (tag v0.2.0)"}
    (tmp_path / RESOLVED_FILE).write_text('{"packages": {"torch": "2.13.0"}, "status": "held", "line": "no drift"}')
    assert resolved_record(tmp_path) == {"resolved_set": {"torch": "2.13.0"}, "resolved_hold": "held: no drift"}
    (tmp_path / VLLM_NEURON_SOURCE_FILE).write_text("[1]")
    assert vllm_neuron_source(tmp_path) == {
        "vllm_neuron_source": {"error": f"{tmp_path / VLLM_NEURON_SOURCE_FILE}: not a JSON object"}}
    (tmp_path / RESOLVED_FILE).write_text('{"cut')
    hold = resolved_record(tmp_path)["resolved_hold"]
    assert hold.startswith(f"{tmp_path / RESOLVED_FILE}: ") and "resolved_set" not in resolved_record(tmp_path)
