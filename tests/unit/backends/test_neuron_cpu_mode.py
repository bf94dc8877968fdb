"""The pieces around NxDI's CPU mode that need no NxDI: where a source tree is looked up, how the
Neuron-only packages are stubbed (in a fresh process: stubbing changes the import system), the
options that select the tier, and which engines a Neuron session unloads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.neuron.sources import NeuronImportError, source_roots
from harness.backends.neuron.stubs import NEURON_ONLY_PACKAGES
from harness.release.children import child_env
from harness.session.config import make_config
from harness.session.engines import engines_to_unload
from tests.helpers import REPO, plugin_options, run_pytest

pytestmark = pytest.mark.unit



def make_tree(root: Path, *packages: str) -> Path:
    for package in packages:
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    return root


def test_source_roots_accepts_a_checkout_and_the_vendor_layout(tmp_path):
    checkout = make_tree(tmp_path / "nxdi", "src/neuronx_distributed_inference")
    assert source_roots(checkout) == (checkout / "src", None)
    vendor = make_tree(tmp_path / "vendor", "neuronx-distributed-inference/src/neuronx_distributed_inference",
                       "neuronx-distributed/src/neuronx_distributed")
    assert source_roots(vendor) == (vendor / "neuronx-distributed-inference" / "src",
                                    vendor / "neuronx-distributed" / "src")


def test_source_roots_names_what_it_needs(tmp_path):
    with pytest.raises(NeuronImportError, match="holds no neuronx_distributed_inference package: give an NxDI checkout"):
        source_roots(tmp_path)
    with pytest.raises(NeuronImportError, match="is not a directory"):
        source_roots(tmp_path / "missing")


STUB_PROBE = """
import torch
from harness.backends.neuron.stubs import NeuronStubCalled, install
from pathlib import Path
where = install(Path({source!r}))
from neuronxcc import nki
from nkilib.core.mlp.mlp import mlp
if "torch_neuronx" in where.stubbed:  # not on a Trn2 host, where the real torch_neuronx answers
    from torch_neuronx.utils import get_platform_target
    assert get_platform_target() == "trn2"

@nki.jit
def kernel(x):
    return x + 1

assert kernel(1) == 2  # a stub decorator leaves the function as it is

class Op(mlp):
    def __init__(self, v):
        self.v = v

assert Op(3).v == 3  # a stub can be subclassed
try:
    mlp(torch.ones(2))
except NeuronStubCalled as exc:
    print("called:", exc)
import neuronx_distributed_inference
print("stubbed:", ",".join(where.stubbed))
"""


def test_neuron_only_packages_are_stubbed_and_calling_them_on_tensors_fails(tmp_path):
    """Which packages are stubbed depends on the host (only those not installed): the expectation
    asks the host, as install() does."""
    import importlib.util

    source = make_tree(tmp_path / "vendor", "neuronx-distributed-inference/src/neuronx_distributed_inference",
                       "neuronx-distributed/src/neuronx_distributed")
    r = subprocess.run([sys.executable, "-c", STUB_PROBE.format(source=str(source))], capture_output=True, text=True,
                       timeout=120, cwd=REPO, env=child_env())
    assert r.returncode == 0, r.stderr
    assert "called: nkilib.core.mlp.mlp.mlp was called on tensors: it is Neuron-only code" in r.stdout
    missing = [p for p in NEURON_ONLY_PACKAGES if importlib.util.find_spec(p) is None]
    assert f"stubbed: {','.join(missing)}" in r.stdout


def test_an_nxdi_that_fails_to_import_stops_the_session_with_its_error(tmp_path, carbon_cache_dir):
    """An API break of a candidate NxDI release shows up at session start, in one line."""
    source = make_tree(tmp_path / "candidate", "neuronx-distributed-inference/src/neuronx_distributed_inference",
                       "neuronx-distributed/src/neuronx_distributed")
    models = source / "neuronx-distributed-inference/src/neuronx_distributed_inference/models"
    models.mkdir()
    (models / "__init__.py").write_text("")
    (models / "config.py").write_text("from transformers import RenamedInThisRelease\n")
    (models.parent / "_version.py").write_text('__version__ = "0.7.3"\n')  # an older release: its own pin is named
    (source / "neuronx-distributed-inference/setup.py").write_text('install_requires=["transformers==4.56.*"]\n')
    r = run_pytest("--co", "-q", "tests/unit/core/test_spec.py", "--carbon-backend", "neuron", "--carbon-neuron-cpu",
                   "--carbon-nxdi-source", str(source), cache_dir=carbon_cache_dir, timeout=120)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "cannot be imported for its CPU mode: ImportError: cannot import name 'RenamedInThisRelease'" in r.stderr
    assert "NxDI 0.7.3 from " in r.stderr and "NxDI 0.7.3 pins transformers==4.56.*" in r.stderr


@pytest.mark.parametrize("changes,message", [
    ({"neuron_cpu": True}, "--carbon-neuron-cpu runs the neuron backend in NxDI's CPU mode: add --carbon-backend neuron"),
    ({"nxdi_source": "/nonexistent/nxdi"}, "--carbon-nxdi-source /nonexistent/nxdi is not a directory"),
    ({"backend": "neuron", "cores_per_worker": 2, "shapes": ["smoke"]},
     "--carbon-cores-per-worker 2 is less than shape 'smoke' tp_degree=4"),
])
def test_bad_neuron_options_are_named(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_config(plugin_options(**changes), REPO)


GIB = 2**30


@pytest.mark.parametrize("resident,new,budget,unload", [
    ([], 10 * GIB, 24 * GIB, []),
    ([("a", 10 * GIB), ("b", 10 * GIB)], 3 * GIB, 24 * GIB, []),  # 23 GiB fit
    ([("a", 10 * GIB), ("b", 10 * GIB)], 5 * GIB, 24 * GIB, ["a"]),  # least recently used first
    ([("a", 10 * GIB), ("b", 10 * GIB)], 20 * GIB, 24 * GIB, ["a", "b"]),
    ([("a", None), ("b", 1 * GIB)], 1 * GIB, 24 * GIB, ["a", "b"]),  # an unknown size is not guessed
    ([("a", 10 * GIB)], None, 24 * GIB, ["a"]),
    ([("a", 10 * GIB)], 30 * GIB, None, []),  # no HBM budget: not a device
])
def test_engines_to_unload(resident, new, budget, unload):
    assert engines_to_unload(resident, new, budget) == unload


def test_skipped_tiers_say_what_enables_them():
    from harness.plugin.fixtures import NXDI_TIER_SKIP
    from harness.plugin.tiers import skipped_tiers

    lines = skipped_tiers([NXDI_TIER_SKIP, NXDI_TIER_SKIP, "benchmarks disabled"])
    assert lines == ["NxDI CPU tier skipped (2 tests): to run it, nox -s trn2-stack, or pytest --carbon-nxdi-source "
                     "DIR (an NxDI checkout) with transformers 4.57"]
    assert skipped_tiers(["anything else"]) == []
