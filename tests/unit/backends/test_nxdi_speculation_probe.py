"""The speculation probe compares the harness's configs with what NxDI's own ``inference_demo.py``
builds (issue 31, item 7): it runs the demo's top-level statements one by one and leaves out only
imports that cannot be made on a CPU, so a demo statement that fails for any other reason, or a
relative import, must not vanish silently; and its field-by-field comparison must tell two different
functions apart. A stand-in ``neuronx_distributed_inference`` package (real files, run in a fresh
process, since it shadows NxDI there) holds the demo shapes the probe has to handle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.unit.backends.nxdi_speculation_probe import fields

pytestmark = pytest.mark.unit

DEMO_FUNCTIONS = "def setup_run_parser(p): pass\ndef create_neuron_config(c, a): pass\ndef run_inference(c, a): pass\n"
LOAD = """
import json
from tests.unit.backends.nxdi_speculation_probe import load_inference_demo
try:
    loaded = load_inference_demo()
except Exception as exc:
    print(json.dumps({"raised": f"{type(exc).__name__}: {exc}"}))
else:
    demo = loaded[0] if isinstance(loaded, tuple) else loaded
    print(json.dumps({"names": sorted(k for k in demo if not k.startswith("__")), "LIMIT": demo.get("LIMIT"),
                      "HELPED": demo.get("HELPED")}))
"""


def load_demo(tmp_path: Path, demo: str) -> dict:
    package = tmp_path / "neuronx_distributed_inference"
    (package / "utils").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "utils" / "__init__.py").write_text("")
    (package / "utils" / "helpers.py").write_text("def helper():\n    return 41\n")
    # a module that cannot be imported here (it needs a package this host lacks), with a literal constant
    (package / "utils" / "constants.py").write_text("import not_a_package_here_31\nLIMIT = 7\n")
    (package / "inference_demo.py").write_text(demo + DEMO_FUNCTIONS)
    r = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_relative_imports_resolve_as_in_the_package(tmp_path):
    out = load_demo(tmp_path, "from .utils.helpers import helper\nfrom .utils.constants import LIMIT\n"
                              "HELPED = helper() + 1\n")
    assert out.get("HELPED") == 42, out  # imported relative to the demo's package
    assert out.get("LIMIT") == 7, out  # the module fails to import: its literal read from its own source


def test_an_import_that_fails_here_is_left_out_with_what_only_it_binds(tmp_path):
    out = load_demo(tmp_path, "import os\nimport not_a_package_here_31\nTABLE = {'x': not_a_package_here_31.X}\n")
    assert "raised" not in out, out
    assert "os" in out["names"] and "TABLE" not in out["names"] and "setup_run_parser" in out["names"]


@pytest.mark.parametrize("statement, error", [
    ("VALUE = undefined_name_31 + 1", "inference_demo.py:1: NameError: name 'undefined_name_31' is not defined"),
    # an ImportError raised by a statement that is not an import: not a Neuron-only import to leave out
    ("import importlib\nPLUGIN = importlib.import_module('not_a_package_here_31')",
     "inference_demo.py:2: ModuleNotFoundError: No module named 'not_a_package_here_31'"),
])
def test_any_other_failing_statement_raises_naming_its_line(tmp_path, statement, error):
    out = load_demo(tmp_path, statement + "\n")
    assert "raised" in out, f"the statement was dropped silently: {out}"
    assert out["raised"] == f"RuntimeError: {tmp_path}/neuronx_distributed_inference/{error}", out


class Config:
    def __init__(self, **values):
        self.__dict__.update(values)


def first():
    return 1


def second():
    return 2


def test_fields_tell_two_different_functions_apart():
    assert fields(Config(hook=first)) != fields(Config(hook=second))
    assert fields(Config(hook=first)) == fields(Config(hook=first))


def test_fields_tell_two_classes_of_the_same_fields_apart():
    class Other(Config):
        pass

    assert fields(Config(a=1)) != fields(Other(a=1))
