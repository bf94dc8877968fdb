"""Hardware detection from ``neuron-ls -j`` (issue 30, item 7): the instance type and logical
NeuronCore config neuron-ls reports pick the profile, and an instance no Neuron profile describes
(an inf2) is refused with one line instead of being gated against trn2 thresholds.

The outputs are the recorded files in fixtures/neuron_ls/ (see its README). ``neuron-ls`` itself is
a Neuron binary that cannot exist here, so the edge (running it) is exercised with a STUB executable
that prints a recorded output; ``dpkg-query`` is the real one."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from harness.core import hardware
from harness.core.hardware import HardwareError, detect_profile_name
from harness.core.neuron_host import (NeuronHostError, host_record, instance_from_neuron_ls, neuron_os_packages,
                                      run_neuron_ls)
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

RECORDED = REPO / "fixtures" / "neuron_ls"


def recorded(name: str) -> list[dict]:
    return json.loads((RECORDED / f"{name}.json").read_text())


@pytest.mark.parametrize(("name", "devices", "cores"), [("trn2.3xlarge", 1, 4), ("trn2.48xlarge", 16, 64)])
def test_a_trn2_is_detected_from_its_recorded_neuron_ls_output(name, devices, cores):
    instance = instance_from_neuron_ls(recorded(name))
    assert (instance.instance_type, instance.devices, instance.logical_cores, instance.logical_nc_config) == (
        name, devices, cores, 2)
    assert detect_profile_name(neuron_ls=lambda: recorded(name)) == name


def test_an_inf2_is_refused_with_one_line_not_gated_as_trn2():
    with pytest.raises(HardwareError) as info:
        detect_profile_name(neuron_ls=lambda: recorded("inf2.xlarge"))
    message = str(info.value)
    assert "\n" not in message
    assert "inf2.xlarge" in message and "trn2.3xlarge" in message and "--carbon-hardware" in message


def test_a_trn2_at_lnc_1_is_refused_naming_the_profiles_lnc():
    """LNC=1 gives 8 logical cores a chip: the trn2.3xlarge profile's 4-core figures would be wrong."""
    devices = recorded("trn2.3xlarge")
    for d in devices:
        d.update(nc_count=8, logical_neuroncore_config=1, neuroncore_ids=list(range(8)))
    with pytest.raises(HardwareError, match=r"LNC=1.*LNC=2"):
        detect_profile_name(neuron_ls=lambda: devices)


def test_a_host_without_neuron_devices_falls_through_to_gpu_and_cpu():
    assert detect_profile_name(lambda: "NVIDIA H100 80GB HBM3", neuron_ls=lambda: None) == "h100-sxm"
    assert detect_profile_name(neuron_ls=lambda: None) == "cpu"


@pytest.mark.parametrize("payload", [{"neuron_devices": []}, [], [{"neuron_device": 0, "nc_count": 4}]])
def test_an_output_without_a_device_list_or_instance_type_is_refused(payload):
    with pytest.raises(HardwareError):
        detect_profile_name(neuron_ls=lambda: payload)


def stub_neuron_ls(tmp_path: Path, body: str) -> Path:
    """A STUB ``neuron-ls`` (the real one is a Neuron binary that cannot run here)."""
    path = tmp_path / "neuron-ls"
    path.write_text(f"#!/bin/sh\n# STUB neuron-ls for tests/unit/core/test_neuron_host.py\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_running_neuron_ls_reads_what_it_prints(tmp_path):
    path = stub_neuron_ls(tmp_path, f"cat '{RECORDED / 'trn2.48xlarge.json'}'")
    assert run_neuron_ls(path) == recorded("trn2.48xlarge")


def test_a_failing_neuron_ls_is_one_line_naming_its_error(tmp_path):
    path = stub_neuron_ls(tmp_path, 'echo \'level=fatal msg="failed to discover Neuron devices"\' >&2; exit 1')
    with pytest.raises(NeuronHostError, match=r"exited 1: .*failed to discover Neuron devices"):
        run_neuron_ls(path)


def test_a_neuron_device_without_neuron_ls_is_refused_naming_what_to_install(tmp_path, monkeypatch):
    """/dev/neuron* present, neuron-ls absent: the host is a Neuron host that cannot say which, so the
    run stops naming the package and --carbon-hardware (never a silent fall-through to the CPU profile).
    The host's devices and PATH are this machine's: both are set here, the decision is the code's."""
    monkeypatch.setattr(hardware, "neuron_device_count", lambda: 1)
    monkeypatch.setattr(hardware, "neuron_ls_path", lambda: None)
    with pytest.raises(HardwareError, match=r"/dev/neuron\* exists but neuron-ls \(aws-neuronx-tools\) is not on "
                                            r"PATH.*--carbon-hardware NAME"):
        hardware.host_neuron_ls()
    stub = stub_neuron_ls(tmp_path, f"cat {RECORDED / 'trn2.3xlarge.json'}")
    monkeypatch.setattr(hardware, "neuron_ls_path", lambda: stub)
    assert hardware.host_neuron_ls() == recorded("trn2.3xlarge")
    monkeypatch.setattr(hardware, "neuron_device_count", lambda: 0)
    assert hardware.host_neuron_ls() is None


def test_the_host_record_says_why_neuron_ls_is_absent():
    if Path("/opt/aws/neuron/bin/neuron-ls").exists():
        pytest.skip("this host has /opt/aws/neuron/bin/neuron-ls: run on a host without the Neuron tools")
    record = host_record(which=lambda _name: None)
    assert "not found" in record["neuron_ls"]["error"]
    assert "neuron_os_packages" in record


def test_dpkg_query_output_is_read_as_installed_versions():
    """The real dpkg-query, asked about a package every Debian host has (the parsing the Neuron
    packages go through)."""
    if subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode != 0:
        pytest.skip("dpkg-query is not installed: run on a Debian or Ubuntu host")
    versions = neuron_os_packages(pattern="bash")
    assert set(versions) == {"bash"} and versions["bash"][0].isdigit()
    assert set(neuron_os_packages(pattern="aws-neuronx-no-such-package")) == {"error"}
