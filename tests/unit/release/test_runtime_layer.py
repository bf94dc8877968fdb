"""The runtime layer in a verdict (``harness.release.runtime_layer``): each side's SDK constraints name the
runtime, collectives and driver their release ships; the host's dpkg says what both sides ran on. A side on
another runtime than its release's is named, and where both shared one the verdict says what that hides."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.neuron_host import neuron_os_packages
from harness.release.runtime_layer import (
    BLIND,
    RUNTIME,
    constraints_os_packages,
    markdown,
    runtime_layer,
    side_constraints,
)
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

CONSTRAINTS = sorted((REPO / "ci" / "constraints").glob("*.txt"))


class Ran:
    def __init__(self, stdout: str) -> None:
        self.stdout, self.stderr, self.returncode = stdout, "", 0


def host(runtime: str, collectives: str, dkms: str) -> dict[str, str]:
    """The probe's ``neuron_os_packages`` on a host with these versions, through the probe's own parser of
    ``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` (its output format)."""
    lines = [f"aws-neuronx-runtime-lib\t{runtime}\tii ", f"aws-neuronx-collectives\t{collectives}\tii ",
             f"aws-neuronx-dkms\t{dkms}\tii ", "aws-neuronx-tools\t2.31.15.0\trc "]
    return neuron_os_packages(lambda *a, **k: Ran("\n".join(lines) + "\n"))


def side(name: str, packages: dict[str, str]) -> dict:
    return {"neuron_os_packages": packages, "sdk_constraints": side_constraints(
        {"CARBON_SDK_CONSTRAINTS": str(REPO / "ci" / "constraints" / name)})}


@pytest.mark.parametrize("path", CONSTRAINTS, ids=lambda p: p.name)
def test_every_constraints_file_names_the_runtime_its_release_ships(path: Path):
    shipped = constraints_os_packages(path.read_text())
    assert shipped.get(RUNTIME) and shipped.get("aws-neuronx-collectives") and shipped.get("aws-neuronx-dkms"), path


def test_a_229_baseline_on_a_231_host_is_named_and_the_blind_spot_said():
    dlami = host("2.33.10.0-4d7e2f0ab", "2.33.10.0-8a1c3f", "2.29.0.0")  # a 2.31 DLAMI's runtime
    layer = runtime_layer({"baseline": side("sdk-2.29.0.txt", dlami), "candidate": side("sdk-2.31.txt", dlami)},
                          {"baseline": None, "candidate": None})
    assert layer["sides"]["candidate"]["mismatches"] == []
    assert layer["sides"]["baseline"]["mismatches"][0] == (
        "aws-neuronx-runtime-lib 2.33.10.0-4d7e2f0ab, where Neuron SDK 2.29.0 ships 2.31.24.0")
    assert f"both sides ran on runtime 2.33.10.0-4d7e2f0ab; {BLIND}" in " ".join(layer["notes"])
    assert any("--baseline-image" in line for line in markdown(layer))


def test_an_aa_check_on_its_own_runtime_has_nothing_to_say():
    dlami = host("2.31.24.0", "2.31.24.0", "2.27.4.0")
    layer = runtime_layer({"baseline": side("sdk-2.29.0.txt", dlami), "candidate": side("sdk-2.29.1.txt", dlami)},
                          {"baseline": None, "candidate": None})
    assert layer["notes"] == [] and layer["shared"] and markdown(layer) == []


def test_each_side_in_its_own_image_sees_its_own_runtime():
    layer = runtime_layer({"baseline": side("sdk-2.29.0.txt", host("2.31.24.0", "2.31.24.0", "2.27.4.0")),
                           "candidate": side("vllm-neuron-2.33.0.txt", host("2.35.30.0", "2.35.43.0", "2.31.7.0"))},
                          {"baseline": "dlc:2.29", "candidate": "dlc:2.33"})
    assert layer["notes"] == [] and not layer["shared"]
    assert layer["sides"]["candidate"]["runtime"] == "2.35.30.0" and layer["sides"]["candidate"]["image"] == "dlc:2.33"


def test_a_host_without_the_neuron_runtime_says_so():
    none = neuron_os_packages(lambda *a, **k: Ran(""))
    layer = runtime_layer({"baseline": side("sdk-2.29.0.txt", none), "candidate": side("sdk-2.31.txt", none)},
                          {"baseline": None, "candidate": None})
    assert layer["notes"] == ["no Neuron runtime on this host (dpkg lists no aws-neuronx-runtime-lib): the runtime "
                              "layer is not part of this check"]


def test_a_venv_without_its_constraints_file_says_what_to_set(tmp_path):
    got = side_constraints({"CARBON_SDK_CONSTRAINTS": str(tmp_path / "missing.txt")})
    assert got["file"] is None and "CARBON_SDK_CONSTRAINTS" in got["why"]
