"""Pins that hold (issue 55, item 6): where a release's constraints file cannot pin every package its plugin leaves
open (the 2.32+ vLLM Neuron plugin: libtorch-neuronx-lite, transformers, fastapi, ...), the first build records the
venv's resolved set and every later build of the same release is held to it; a drift stops the leg in one line
naming the package and both versions, exit 2. The done-when runs for real: two real venvs, built one after the
other at the same path, holding a real wheel at two versions, through ci/scripts/hold-resolved.sh, the script
ci/scripts/sdk-venv.sh calls after every build."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.release import resolved
from harness.release.probe import resolved_record
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit


# --- the pure part ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_one_moved_version_is_the_one_drift_named_with_both_versions(seed):
    rng = random.Random(seed)
    recorded = {f"pkg-{i}": f"{rng.randint(0, 9)}.{rng.randint(0, 99)}" for i in range(rng.randint(1, 40))}
    moved = rng.choice(sorted(recorded))
    current = {**recorded, moved: recorded[moved] + ".1"}
    assert resolved.drifts(recorded, recorded) == []
    assert resolved.drifts(recorded, current) == [(moved, recorded[moved], current[moved])]
    line = resolved.drift_line("vllm-neuron-2.32.0", Path("/r.txt"), resolved.drifts(recorded, current))
    assert "\n" not in line
    assert f"{moved} {recorded[moved]} (recorded) -> {current[moved]} (this build)" in line


def test_a_package_gone_or_new_is_a_drift_and_every_drift_is_named():
    found = resolved.drifts({"a": "1", "b": "2"}, {"b": "2", "c": "3"})
    assert found == [("a", "1", None), ("c", None, "3")]
    line = resolved.drift_line("r", Path("/x"), found)
    assert "a 1 (recorded) -> (absent) (this build)" in line and "1 more: c (absent) (recorded) -> 3" in line
    assert "remove /x" in line


def test_names_are_compared_as_pip_compares_them():
    parsed = resolved.parse_set("# header\n\nMl_Dtypes==0.5.1\nprometheus.client==0.21  # note\n", "f")
    assert parsed == {"ml-dtypes": "0.5.1", "prometheus-client": "0.21"}
    assert resolved.drifts(parsed, {"ml-dtypes": "0.5.1", "prometheus-client": "0.21"}) == []


def test_a_record_line_that_is_not_name_version_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"rec:2: 'torch>=2' is not name==version"):
        resolved.parse_set("a==1\ntorch>=2\n", "rec")


def test_format_then_parse_is_the_same_set():
    packages = {"torch": "2.11.0", "libtorch-neuronx-lite": "2.11.0.1.0.1284", "a": "1"}
    assert resolved.parse_set(resolved.format_set(packages, "two\nlines"), "f") == packages


def test_the_script_shadows_no_stdlib_module_when_run_by_path():
    """hold-resolved.sh runs resolved.py by path: its directory comes first on sys.path."""
    names = {p.stem for p in (REPO / "harness" / "release").glob("*.py")}
    assert not names & set(sys.stdlib_module_names)


# --- real venvs through the leg's own script ---------------------------------------------------------------------

def wheel(directory: Path, name: str, version: str) -> Path:
    """A real (pure-Python) wheel, written as the wheel format says: what pip installs from any index."""
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(t.encode())}\n" for p, t in files.items())
    files[f"{name}-{version}.dist-info/RECORD"] = record + f"{name}-{version}.dist-info/RECORD,,\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
    return path


def build(venv: Path, wheels: Path, *pins: str) -> None:
    """A fresh venv at ``venv`` (rm -rf first, as sdk-venv.sh rebuilds) holding exactly ``pins``, installed by pip."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-index", "--find-links", str(wheels), "--disable-pip-version-check", *pins],
                   check=True, timeout=120, capture_output=True)


def hold(venv: Path, constraints: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "ci/scripts/hold-resolved.sh", str(venv), str(constraints)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})


def test_a_rebuild_with_one_package_at_another_version_stops_naming_it_and_both_versions(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version in (("carbonpin", "1.0"), ("carbonpin", "1.1"), ("carbonkeep", "2.0")):
        wheel(wheels, name, version)
    constraints = tmp_path / "vllm-neuron-9.9.9.txt"
    constraints.write_text("# python: 3.11\n# unpinned: carbonpin\ncarbonkeep==2.0\n")
    venv = tmp_path / "venvs" / "candidate-vllm-neuron-9.9.9"
    record = tmp_path / "venvs" / "resolved" / "vllm-neuron-9.9.9.txt"

    build(venv, wheels, "carbonpin==1.0", "carbonkeep==2.0")
    first = hold(venv, constraints)
    assert first.returncode == 0, first.stderr
    assert resolved.parse_set(record.read_text(), "r") == {"carbonpin": "1.0", "carbonkeep": "2.0"}
    told = resolved_record(venv)
    assert told["resolved_set"] == {"carbonpin": "1.0", "carbonkeep": "2.0"}
    assert told["resolved_hold"].startswith("recorded: vllm-neuron-9.9.9: first build: 2 packages")

    build(venv, wheels, "carbonpin==1.0", "carbonkeep==2.0")  # the same release rebuilt alike: held, no drift
    again = hold(venv, constraints)
    assert again.returncode == 0 and "2 packages held to" in again.stdout, again.stderr

    build(venv, wheels, "carbonpin==1.1", "carbonkeep==2.0")  # next month's build: pip picked another carbonpin
    drift = hold(venv, constraints)
    assert drift.returncode == 2 and drift.stdout == ""
    line, = drift.stderr.strip().splitlines()
    assert "carbonpin 1.0 (recorded) -> 1.1 (this build)" in line and "more" not in line, line
    assert str(record) in line
    assert resolved.parse_set(record.read_text(), "r")["carbonpin"] == "1.0"  # the record is never overwritten
    told = json.loads((venv / resolved.RESOLVED_FILE).read_text())
    assert told["status"] == "drift" and told["drift"] == [["carbonpin", "1.0", "1.1"]]


def test_a_file_that_pins_everything_holds_nothing(tmp_path):
    venv = tmp_path / "venvs" / "sdk-9.9"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    constraints = tmp_path / "sdk-9.9.txt"
    constraints.write_text("# python: 3.11\nnki==0.7.0\n")
    r = hold(venv, constraints)
    assert r.returncode == 0 and r.stdout == r.stderr == ""
    assert not (tmp_path / "venvs" / "resolved").exists() and resolved_record(venv) == {}


def test_sdk_venv_holds_every_build_before_its_probe():
    """The leg's own venv script calls the hold after the stamp (a reused venv is held too), before the probe."""
    text = (REPO / "ci" / "scripts" / "sdk-venv.sh").read_text()
    call = 'bash "$(dirname "$0")/hold-resolved.sh" "$venv" "$constraints"'
    assert text.count(call) == 1
    assert text.index('mv "$stamp.tmp" "$stamp"') < text.index(call) < text.index("-m harness.release.probe")
    assert f"\n{call}\n" in text  # at the top level (unindented), not inside the rebuild's branch


def test_the_set_is_the_venvs_own_not_what_pythonpath_adds(tmp_path):
    """A runner's PYTHONPATH (or user site) is not part of the venv a later build is held to."""
    venv = tmp_path / "venvs" / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    stray = tmp_path / "stray" / "intruder-1.0.dist-info"
    stray.mkdir(parents=True)
    (stray / "METADATA").write_text("Metadata-Version: 2.1\nName: intruder\nVersion: 1.0\n")
    constraints = tmp_path / "vllm-neuron-9.9.9.txt"
    constraints.write_text("# unpinned: x\n")
    r = hold(venv, constraints, PYTHONPATH=str(stray.parent))
    assert r.returncode == 0, r.stderr
    assert "intruder" not in resolved_record(venv)["resolved_set"]
