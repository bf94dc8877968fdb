"""The per-release constraints files of ci/constraints/ (issue 30, item 2): each pins every Neuron
package of its release exactly (a spec range such as ``==0.10.*`` matched 2.30's and 2.31's NxDI,
``==2.*`` every compiler), names the Pythons the release supports, and sdk-venv.sh refuses what it
cannot honour with one line."""

from __future__ import annotations

import json
import os
import re
import shutil
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
# the framework a vLLM Neuron plugin runs on, pinned in its file where a source confirms the version (issue 46)
PLUGIN_FRAMEWORK = {"vllm", "nrtpy", "torch", "libtorch-neuronx-lite", "transformers"}
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
    framework = PLUGIN_FRAMEWORK if path.name.startswith("vllm-neuron-") else set()
    assert all(NEURON_NAME.search(name) or name in framework for name in pins), \
        f"{path.name}: pins a non-Neuron package: {sorted(pins)}"
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


# Issue: sdk-venv.sh picks its interpreter from the constraints file when PYTHON is unset (python3 where the
# file's "# python:" line names its version, else the newest python3.X on PATH the line names). These tests
# build a PATH of their own, from real interpreters (never pyenv shims: a shim is a script that picks its
# Python from pyenv's own settings, not from its name).
TOOLS = ("sed", "head", "sort", "dirname", "grep", "mktemp", "rm", "sha256sum", "cut", "tr", "mv", "cp", "cat")
PLUGIN_2_33 = "ci/constraints/vllm-neuron-2.33.0.txt"  # python: 3.11 3.12 3.13


def real_python(minor: str) -> Path | None:
    """A real CPython 3.<minor> binary (an ELF executable that reports that version), or None."""
    roots = [Path(p) for p in {os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv"), "/root/.pyenv"} if p]
    candidates = [c for root in roots for c in sorted((root / "versions").glob(f"3.{minor}.*/bin/python3.{minor}"))]
    candidates += [Path(d) / f"python3.{minor}" for d in ("/usr/local/bin", "/usr/bin")]
    for candidate in candidates:
        real = candidate.resolve()
        if "shims" in real.parts or not real.is_file() or not os.access(real, os.X_OK):
            continue
        with real.open("rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        r = subprocess.run([str(real), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
        if r.returncode == 0 and r.stdout.strip() == f"3.{minor}":
            return real
    return None


def pythons(*minors: str) -> dict[str, Path]:
    found = {m: real_python(m) for m in minors}
    missing = [f"3.{m}" for m, p in found.items() if p is None]
    if missing:
        pytest.skip(f"needs real Python {', '.join(missing)} binaries (not pyenv shims): provide them under "
                    f"~/.pyenv/versions/3.X.Y/bin/ (pyenv install {' '.join(missing)}) or as /usr/bin/python3.X")
    return found  # type: ignore[return-value]


def path_of(tmp_path: Path, links: dict[str, Path]) -> str:
    """A PATH holding only the given interpreter links and the few tools the script uses (none of them a Python)."""
    bin_dir, tools = tmp_path / "bin", tmp_path / "tools"
    bin_dir.mkdir()
    tools.mkdir()
    for name, target in links.items():
        (bin_dir / name).symlink_to(target)
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (tools / tool).symlink_to(found)
    return f"{bin_dir}:{tools}"


def sdk_venv_on(path: str, *args: str, python: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": path} if python is None else {"PATH": path, "PYTHON": python}
    return subprocess.run([shutil.which("bash") or "/bin/bash", "ci/scripts/sdk-venv.sh", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=env)


def test_sdk_venv_falls_back_to_a_supported_python3_x_when_python3_is_not_one(tmp_path):
    found = pythons("10", "12")
    path = path_of(tmp_path, {"python3": found["10"], "python3.12": found["12"]})
    r = sdk_venv_on(path, "--which-python", PLUGIN_2_33)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "bin" / "python3.12")
    line, = r.stderr.strip().splitlines()
    assert "python3 is Python 3.10" in line and "building with python3.12 (Python 3.12" in line, line
    assert PLUGIN_2_33 in line


def test_sdk_venv_falls_back_to_the_newest_supported_python3_x(tmp_path):
    found = pythons("10", "11", "12")
    path = path_of(tmp_path, {"python3": found["10"], "python3.11": found["11"], "python3.12": found["12"]})
    r = sdk_venv_on(path, "--which-python", PLUGIN_2_33)
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "bin" / "python3.12"), r.stderr


def test_sdk_venv_takes_python3_where_the_release_supports_it(tmp_path):
    found = pythons("11", "12")
    path = path_of(tmp_path, {"python3": found["11"], "python3.12": found["12"]})
    r = sdk_venv_on(path, "--which-python", PLUGIN_2_33)
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "bin" / "python3"), r.stderr


def test_sdk_venv_skips_a_python3_x_that_is_another_version(tmp_path):
    """A python3.12 that runs 3.10 (a stray link) is not taken for 3.12."""
    found = pythons("10")
    path = path_of(tmp_path, {"python3": found["10"], "python3.12": found["10"]})
    r = sdk_venv_on(path, "--which-python", PLUGIN_2_33)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr


def test_sdk_venv_names_what_to_install_when_no_python_fits(tmp_path):
    found = pythons("10")
    path = path_of(tmp_path, {"python3": found["10"]})
    for args in (["--which-python", PLUGIN_2_33], [str(tmp_path / "venv"), PLUGIN_2_33]):
        r = sdk_venv_on(path, *args)
        assert r.returncode == 2 and r.stdout == "", (args, r.stdout, r.stderr)
        line, = r.stderr.strip().splitlines()
        assert "needs Python 3.11, 3.12 or 3.13" in line and "python3 is 3.10" in line, line
        assert "no python3.13, python3.12 or python3.11 is on PATH" in line, line
        assert "apt-get install python3.12 python3.12-venv" in line and "set PYTHON" in line, line
        assert not (tmp_path / "venv").exists()


def test_sdk_venv_takes_python_as_set_without_falling_back(tmp_path):
    found = pythons("10", "12")
    path = path_of(tmp_path, {"python3": found["10"], "python3.12": found["12"]})
    r = sdk_venv_on(path, str(tmp_path / "venv"), PLUGIN_2_33, python="python3")
    assert r.returncode == 2 and "python3 is Python 3.10" in r.stderr and "supports Python 3.11 3.12 3.13" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "venv").exists()
    r = sdk_venv_on(path, "--which-python", PLUGIN_2_33, python="python3.12")
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "bin" / "python3.12") and r.stderr == ""


@pytest.mark.parametrize("name", sorted(PLUGIN_RELEASES))
def test_each_plugin_file_pins_the_framework_its_sources_confirm_and_names_the_rest(name):
    """Issue 46, item 4: vLLM Neuron's setup guide says the framework (vllm, torch, libtorch-neuronx-lite, nrtpy,
    libneuronxla, transformers) is not included with the plugin, so an unpinned file let pip pick. Each version a
    source confirms is pinned exactly, the source on its line; each it could not confirm is named as such."""
    framework = COMPONENTS[PLUGIN_RELEASES[name]]["framework"]
    text = (CONSTRAINTS / name).read_text()
    pinned = pins(CONSTRAINTS / name)
    for package, (version, source) in framework["confirmed"].items():
        assert pinned.get(package) == version, (name, package)
        line = next(x for x in text.splitlines() if x.startswith(f"{package}=="))
        assert f"source: {source.split()[0]}" in line, (name, line)
        if package == "vllm":  # PyPI's, not the Neuron index's: sdk-venv.sh leaves it to the second install
            assert "from: pypi" in line
    said = " ".join(text.split())
    assert "not confirmed" in said.lower()
    for package in framework["unconfirmed"]:
        assert package in said and package not in pinned, (name, package)


# Issue 55, item 6: pins that hold. What the 2.32+ plugin and its vLLM ask of pip, as published
# (fixtures/ci/vllm-neuron-requirements.json: the fork's requirements/core.txt at its commit, vLLM's wheel metadata).
REQUIREMENTS = json.loads((REPO / "fixtures" / "ci" / "vllm-neuron-requirements.json").read_text())["releases"]
REQ_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def unpinned(path: Path) -> set[str]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("# unpinned:")]
    assert len(lines) <= 1, f"{path.name}: more than one '# unpinned:' line"
    return {canonical(n) for n in lines[0].split(":", 1)[1].split()} if lines else set()


@pytest.mark.parametrize("release", sorted(REQUIREMENTS))
def test_every_package_the_plugin_leaves_open_is_pinned_or_named_unpinned(release):
    """A range in the plugin's requirements is a package pip picks at build time: the file pins it, or names it on
    its '# unpinned:' line, which makes ci/scripts/hold-resolved.sh hold every later build to the first's set."""
    path = CONSTRAINTS / f"vllm-neuron-{release}.txt"
    pinned, open_ = {canonical(k) for k in pins(path)}, unpinned(path)
    assert not pinned & open_, f"{path.name}: pinned and named unpinned: {sorted(pinned & open_)}"
    plugin = REQUIREMENTS[release]["plugin"]
    if plugin["requires"] is None:  # not readable: the file says so, and the hold is on
        assert "could not be read" in " ".join(path.read_text().split()) and open_
    else:
        text = " ".join(path.read_text().split())
        assert plugin["source"].split(" (")[0] in text, f"{path.name} does not name what it read"
        for line in plugin["requires"]:
            name = canonical(REQ_NAME.match(line).group(1))
            if "==" not in line:
                assert name in pinned | open_, f"{path.name}: the plugin leaves {line!r} open: pin it or name it unpinned"
    assert "hold-resolved.sh" in path.read_text()


@pytest.mark.parametrize("release", sorted(REQUIREMENTS))
def test_torch_is_pinned_to_what_the_plugins_vllm_pins(release):
    """libtorch-neuronx-lite follows vLLM's torch (the plugin's requirements say so): torch is the one vLLM pins."""
    vllm_pins = dict(r.split("==") for r in REQUIREMENTS[release]["vllm"]["requires"] if re.fullmatch(r"torch==\S+", r))
    pinned = pins(CONSTRAINTS / f"vllm-neuron-{release}.txt")
    assert pinned["torch"] == vllm_pins["torch"]
    line = next(x for x in (CONSTRAINTS / f"vllm-neuron-{release}.txt").read_text().splitlines() if x.startswith("torch=="))
    assert "from: pypi" in line  # never fetched from the Neuron index alone (sdk-venv.sh's --no-deps install)
