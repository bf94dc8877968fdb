"""The per-release constraints files of ci/constraints/ (issue 30, item 2): each pins every Neuron
package of its release exactly (a spec range such as ``==0.10.*`` matched 2.30's and 2.31's NxDI,
``==2.*`` every compiler), names the Pythons the release supports, and sdk-venv.sh refuses what it
cannot honour with one line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

CONSTRAINTS = REPO / "ci" / "constraints"
SDK_FILES = sorted(CONSTRAINTS.glob("sdk-*.txt"))
PLUGIN_FILES = sorted(CONSTRAINTS.glob("vllm-neuron-*.txt"))
# What one NxDI release is made of on pip: each must be pinned, to one published version.
SDK_PACKAGES = {"neuronx-distributed-inference", "neuronx-distributed", "neuronx-cc", "torch-neuronx",
                "libneuronxla", "nki"}
PLUGIN_PACKAGES = {"vllm-neuron", "neuronx-cc", "nki"}
NEURON_NAME = re.compile(r"neuron|^nki$|^libneuronxla$")
EXACT = re.compile(r"^([A-Za-z0-9_.-]+)==(\d+(?:\.\d+)+)$")


def requirements(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def test_every_release_the_issue_names_has_a_file():
    assert {p.name for p in SDK_FILES} >= {"sdk-2.28.txt", "sdk-2.29.0.txt", "sdk-2.29.1.txt", "sdk-2.30.txt",
                                           "sdk-2.31.txt"}
    assert PLUGIN_FILES, "no vllm-neuron constraints file"


@pytest.mark.parametrize("path", SDK_FILES + PLUGIN_FILES, ids=lambda p: p.name)
def test_each_file_pins_every_neuron_package_exactly(path):
    pins = {}
    for line in requirements(path):
        m = EXACT.match(line)
        assert m, f"{path.name}: {line!r} is not NAME==VERSION (an exact, published version)"
        assert m.group(1) not in pins, f"{path.name}: {m.group(1)} pinned twice"
        pins[m.group(1)] = m.group(2)
    assert all(NEURON_NAME.search(name) for name in pins), f"{path.name}: pins a non-Neuron package: {sorted(pins)}"
    needed = SDK_PACKAGES if path.name.startswith("sdk-") else PLUGIN_PACKAGES
    assert needed <= set(pins), f"{path.name} does not pin {sorted(needed - set(pins))}"


@pytest.mark.parametrize("path", SDK_FILES + PLUGIN_FILES, ids=lambda p: p.name)
def test_each_file_names_its_source_and_pythons(path):
    text = path.read_text()
    assert "n2-manifest.json" in text
    assert re.search(r"^# python: 3\.\d+( 3\.\d+)*", text, re.M)


def test_the_2_29_releases_differ_where_neuron_says():
    """2.29.1 is 2.29.0's NxDI with a newer compiler and torch-neuronx: one file per release."""
    a = dict(line.split("==") for line in requirements(CONSTRAINTS / "sdk-2.29.0.txt"))
    b = dict(line.split("==") for line in requirements(CONSTRAINTS / "sdk-2.29.1.txt"))
    assert {k for k in a if a[k] != b[k]} == {"neuronx-cc", "torch-neuronx"}
    assert a["neuronx-distributed-inference"] == "0.9.17334" and a["neuronx-cc"] == "2.24.5133.0"


def sdk_venv(tmp_path: Path, *args: str, python: str = "python3") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "ci/scripts/sdk-venv.sh", str(tmp_path / "venv"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": python})


def test_sdk_venv_refuses_an_unknown_release_listing_the_known(tmp_path):
    r = sdk_venv(tmp_path, "ci/constraints/sdk-9.99.txt")
    assert r.returncode == 2 and "sdk-2.29.0.txt" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "venv").exists()


def test_sdk_venv_refuses_a_python_the_release_does_not_support(tmp_path):
    version = subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    constraints = tmp_path / "sdk-test.txt"
    constraints.write_text("# python: 3.0\nneuronx-cc==2.24.5133.0\n")
    r = sdk_venv(tmp_path, str(constraints))
    assert r.returncode == 2 and f"Python {version}" in r.stderr and "supports Python 3.0" in r.stderr
    assert not (tmp_path / "venv").exists()
