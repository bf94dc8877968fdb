"""The install never pulls CUDA: the README's install command, ``.ci/run`` and every nox session take
torch from PyTorch's CPU wheel index (on Linux, PyPI's torch wheel depends on ~20 nvidia-*/cuda-*
packages, about 3 GB that a CPU machine never uses).

The text-level checks always run. The resolution check (``test_readme_install_resolves_no_cuda``)
is opt-in, ``CARBON_INSTALL_DRY_RUN=1``: it resolves the README's command with ``pip install
--dry-run --report`` in a fresh virtualenv with this machine's pip configuration, wheel cache and
find-links bypassed, so it needs PyPI and the CPU index (a minute or two). ``CARBON_TORCH_CPU_INDEX``
names a stand-in for the CPU index (a PEP 503 simple index holding the same ``+cpu`` wheels) where
download.pytorch.org cannot be reached."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import ci_run_commands
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_PREFIXES = ("nvidia-", "nvidia_", "cuda-", "cuda_", "triton")


def readme_commands() -> list[str]:
    """The README's first code block: the install command and the test command, one a line."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no ```bash block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


def index_of(argv: list[str], option: str) -> str | None:
    """The value of ``--option URL`` or ``--option=URL`` in argv, else None."""
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def test_readme_install_is_one_command_naming_the_cpu_index():
    commands = readme_commands()
    installs = [c for c in commands if c.startswith("pip install")]
    assert len(installs) == 1, commands
    argv = shlex.split(installs[0])
    assert CPU_INDEX in (index_of(argv, "--extra-index-url"), index_of(argv, "--index-url")), (
        f"the README's install command does not name PyTorch's CPU index ({CPU_INDEX}): {installs[0]}")
    assert any(a.startswith("torch==") for a in argv), f"torch is not pinned, so PyPI's CUDA build may win: {argv}"


def test_readme_install_gives_up_on_an_unreachable_index_in_seconds():
    """Where the CPU index cannot be reached (a box with only a local mirror), pip's default five retries
    with back-off cost ~8 s for every package resolved, each against that index: the install then ran
    past 9 minutes here. One retry and a short timeout keep it to the plain install's time."""
    argv = shlex.split(next(c for c in readme_commands() if c.startswith("pip install")))
    retries, timeout = index_of(argv, "--retries"), index_of(argv, "--timeout")
    assert retries is not None and int(retries) <= 1, f"--retries {retries}: pip's default is 5: {argv}"
    assert timeout is not None and float(timeout) <= 15, f"--timeout {timeout}: a dropped connection waits that long per package: {argv}"


def test_ci_run_runs_exactly_the_readme_commands():
    assert ci_run_commands() == readme_commands()


def test_the_cpu_workflow_runs_the_readme_commands():
    steps = [line.split("#")[0].strip() for line in (REPO / "ci" / "cpu.yml").read_text().splitlines()]
    for command in readme_commands():
        assert f"- run: {command}" in steps, f"ci/cpu.yml does not run the README's {command!r}"


class RecordingSession:
    """Stands in for nox.Session to record what each session function installs, in order, without
    building virtualenvs (a real one is minutes; ``nox`` itself is the README's test command)."""

    def __init__(self, tmp: Path) -> None:
        self.posargs: list[str] = []
        self.env: dict[str, str] = {}
        self.installs: list[list[str]] = []
        self._tmp = tmp

    def install(self, *args: str) -> None:
        self.installs.append([str(a) for a in args])

    def run(self, *args: Any, **kwargs: Any) -> None:
        argv = [str(a) for a in args]
        if argv[:4] == ["python", "-m", "pip", "install"]:
            self.installs.append(argv[4:])

    def create_tmp(self) -> str:
        return str(self._tmp)

    def skip(self, *args: Any) -> None:
        raise SessionSkipped

    def warn(self, *args: Any) -> None:
        pass

    log = warn


class SessionSkipped(Exception):
    pass


def load_noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("carbon_noxfile_under_test", REPO / "noxfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def registered_sessions() -> dict[str, Any]:
    """noxfile.py's sessions, loaded once (nox refuses to register a session name twice)."""
    import nox.registry

    load_noxfile()
    return dict(nox.registry.get())


def nox_sessions() -> dict[str, Any]:
    pytest.importorskip("nox", reason="nox is in the [test] extra: pip install -e '.[test]'")
    return registered_sessions()


@pytest.mark.parametrize("name", ["trn2-stack", "latest", "serving", "release-check", "mutation"])
def test_each_nox_session_takes_torch_from_the_cpu_index_first(name, tmp_path, monkeypatch):
    monkeypatch.setenv("CARBON_NXDI_SOURCE", str(tmp_path))  # a source without releases/: every path runs
    sessions = nox_sessions()
    assert name in sessions, sorted(sessions)
    session = RecordingSession(tmp_path)
    try:
        sessions[name](session)
    except SessionSkipped:
        pass
    assert session.installs, f"nox session {name} installs nothing"
    first = session.installs[0]
    assert any(a.startswith("torch==") for a in first), f"{name}: the first install is not torch: {first}"
    assert index_of(first, "--index-url") == CPU_INDEX, (
        f"{name}: torch is not taken from PyTorch's CPU index ({CPU_INDEX}): {first}")


def cpu_index_reachable(url: str) -> str | None:
    """None when the index answers for torch, else why not."""
    if url.startswith("file://"):
        return None if Path(url[7:], "torch").is_dir() else f"{url} has no torch/ directory"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=20):
            return None
    except OSError as exc:
        return f"{url} cannot be reached: {exc}"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CARBON_INSTALL_DRY_RUN") != "1",
                    reason="opt-in: CARBON_INSTALL_DRY_RUN=1 resolves the README's install from PyPI and the "
                           "CPU index in a fresh virtualenv (network, a minute or two)")
def test_readme_install_resolves_no_cuda(tmp_path):
    index = os.environ.get("CARBON_TORCH_CPU_INDEX", CPU_INDEX)
    problem = cpu_index_reachable(index)
    assert problem is None, f"CARBON_INSTALL_DRY_RUN=1 was asked for, but {problem} (CARBON_TORCH_CPU_INDEX " \
                            "names a stand-in)"
    install = next(c for c in readme_commands() if c.startswith("pip install"))
    argv = [index if a == CPU_INDEX else a for a in shlex.split(install)[2:]]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf: no local find-links, indexes or constraints
    report = tmp_path / "report.json"
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--no-cache-dir",
                        "--quiet", "--report", str(report), *argv], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    resolved = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    cuda = sorted(n for n in resolved if n.startswith(CUDA_PREFIXES))
    assert not cuda, f"the README's install pulls CUDA packages: {cuda}"
    if sys.platform == "linux":
        assert resolved["torch"].endswith("+cpu"), resolved["torch"]
