"""The per-release constraints files of ci/constraints/ (issue 30, item 2): each pins every Neuron
package of its release exactly (a spec range such as ``==0.10.*`` matched 2.30's and 2.31's NxDI,
``==2.*`` every compiler), names the Pythons the release supports, and sdk-venv.sh refuses what it
cannot honour with one line."""

from __future__ import annotations

import json
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


COMPONENTS = json.loads((REPO / "fixtures" / "ci" / "neuron-components.json").read_text())["releases"]
PLUGIN_RELEASES = {"vllm-neuron-2.31.1.txt": "2.31.0", "vllm-neuron-2.32.0.txt": "2.32.0",
                   "vllm-neuron-2.33.0.txt": "2.33.0"}  # 2.31.1 ships 2.31.0's plugin (the 07/20 beta wheel)


def pins(path: Path) -> dict[str, str]:
    return dict(line.split("==") for line in requirements(path))


@pytest.mark.parametrize("name", sorted(PLUGIN_RELEASES))
def test_each_plugin_file_pins_what_its_release_publishes(name):
    """Issue 39, item 5: the plugin, compiler and NKI as the release's component index lists them."""
    listed = COMPONENTS[PLUGIN_RELEASES[name]]
    pinned = pins(CONSTRAINTS / name)
    for package in ("vllm-neuron", "neuronx-cc", "nki"):
        assert pinned[package] == listed[package], (name, package)
    text = (CONSTRAINTS / name).read_text()
    for package in ("aws-neuronx-runtime-lib", "aws-neuronx-collectives", "aws-neuronx-dkms"):
        assert f"{package} {listed[package]}" in " ".join(text.split()), (name, package)


def test_the_plugin_history_is_the_published_one():
    """vllm-neuron-2.31.1.txt once said 2.30 and 2.31.0 shipped plugin 0.5.x: the indexes list 0.6.0 and
    0.21.0.1.0.0."""
    text = " ".join((CONSTRAINTS / "vllm-neuron-2.31.1.txt").read_text().split())
    for release in ("2.29.0", "2.30.0", "2.31.0", "2.32.0", "2.33.0"):
        assert f"{release} -> {COMPONENTS[release]['vllm-neuron']}" in text, release
    assert "0.5.x" not in text and "0.5.3" not in text


@pytest.mark.parametrize(("name", "release"), [("sdk-2.29.0.txt", "2.29.0"), ("sdk-2.30.txt", "2.30.0"),
                                               ("sdk-2.31.txt", "2.31.0")])
def test_each_sdk_file_names_the_runtime_its_release_ships(name, release):
    """The releases whose component index is recorded (fixtures/ci/neuron-components.json)."""
    text = (CONSTRAINTS / name).read_text()
    assert f"aws-neuronx-runtime-lib {COMPONENTS[release]['aws-neuronx-runtime-lib']}" in text


@pytest.mark.parametrize("path", SDK_FILES + PLUGIN_FILES, ids=lambda p: p.name)
def test_each_pin_is_hash_locked_or_says_why_not(path):
    for line in path.read_text().splitlines():
        if EXACT.match(line.split("#")[0].split(" --hash")[0].strip() or "#"):
            hashed = re.search(r"--hash=sha256:[0-9a-f]{64}", line)
            assert hashed or re.search(r"# no hash: \S.{20,}", line), f"{path.name}: {line!r} has no hash and no reason"


def test_sdk_venv_refuses_a_file_hashing_only_some_pins(tmp_path):
    constraints = tmp_path / "sdk-test.txt"
    version = subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    constraints.write_text(f"# python: {version}\nnki==0.7.0 --hash=sha256:{'0' * 64}\nneuronx-cc==2.28.7631.0\n")
    r = sdk_venv(tmp_path, str(constraints))
    assert r.returncode == 2 and "hashes 1 of its 2 pins" in r.stderr
    assert not (tmp_path / "venv").exists()
