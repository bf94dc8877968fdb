"""The layers of ``harness/`` hold (``[tool.importlinter]`` in pyproject.toml): import-linter itself,
in a fresh process, on this checkout, and on a copy with one import planted that climbs a layer, so
the contracts are shown to catch what they exist for rather than to pass on anything."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.release.children import child_env
from tests.helpers import REPO

pytestmark = pytest.mark.unit

LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter", reason="the layer check needs import-linter: pip install -e '.[test]'")
    env = {**child_env(), "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_layers_and_contracts_hold():
    r = lint_imports(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    for contract in ("harness layers", "core imports neither torch nor pytest", "the serving client never imports torch",
                     "only the plugin imports pytest", "no import circles, at any depth",
                     "a release check reads NxDI trees without the CPU-mode import stubs"):
        assert f"{contract} KEPT" in r.stdout, r.stdout


@pytest.mark.parametrize("module, planted, broken", [
    ("core/spec.py", "import harness.plugin.hooks", "harness.core is not allowed to import harness.plugin"),
    ("core/measure.py", "import torch", "harness.core is not allowed to import torch"),
    ("serving/client.py", "import harness.backends.hf", "harness.serving is not allowed to import harness.backends"),
    ("carbon/fastbpe.py", "import harness.carbon.tokenizer", "No cycles are allowed in harness.carbon"),
])
def test_a_planted_import_breaks_a_contract(tmp_path, module, planted, broken):
    shutil.copytree(REPO / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "harness" / module
    target.write_text(target.read_text() + f"\n{planted}  # planted by the test\n")
    r = lint_imports(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert broken in r.stdout, r.stdout
