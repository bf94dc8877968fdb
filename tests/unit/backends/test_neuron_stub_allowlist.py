"""The Neuron stubs answer only their allow-list (issue 20, item 6): a Neuron-only name NxDI's CPU
mode was not seen to use raises, naming it, instead of quietly handing back another stub that is
falsy and iterates as empty; the stubbed calls actually made are counted and reported in the NxDI
CPU tier's summary line. Each probe runs in a fresh process: stubbing changes the import system."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.backends.neuron.stubs import NEURON_ONLY_PACKAGES
from tests.unit.backends.test_neuron_cpu_mode import make_tree
from tests.unit.conftest import REPO, run_pytest

pytestmark = pytest.mark.unit

PROBE = """
import importlib.machinery, torch
from pathlib import Path
from harness.backends.neuron.stubs import install
install(Path({source!r}))
if importlib.machinery.PathFinder.find_spec("torch_neuronx") is not None:
    print("torch_neuronx is installed here: nothing to probe")
    raise SystemExit(0)
import torch_neuronx.xla_impl.ops as ops
{body}
"""


def probe(tmp_path, body: str) -> subprocess.CompletedProcess:
    source = make_tree(tmp_path / "vendor", "neuronx-distributed-inference/src/neuronx_distributed_inference",
                       "neuronx-distributed/src/neuronx_distributed")
    return subprocess.run([sys.executable, "-c", PROBE.format(source=str(source), body=body)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


@pytest.fixture(autouse=True)
def _stubbed_here():
    """Asks sys.path only (PathFinder): in a process where the NxDI CPU tier already ran, the stub
    finder would answer for torch_neuronx itself."""
    from importlib.machinery import PathFinder

    assert "torch_neuronx" in NEURON_ONLY_PACKAGES
    if PathFinder.find_spec("torch_neuronx") is not None:
        pytest.skip("torch_neuronx is installed on this host: it is not stubbed, so there is no stub to probe")


OFF_THE_LIST = {
    "module-attribute": ("ops.not_a_neuron_name", "NeuronStubMissing: torch_neuronx.xla_impl.ops.not_a_neuron_name "
                                                  "is not on the Neuron stub allow-list"),
    "stub-attribute": ("ops.RmsNorm.some_method", "NeuronStubMissing: torch_neuronx.xla_impl.ops.RmsNorm.some_method "
                                                  "is not on the Neuron stub allow-list"),
    "truth-value": ("bool(ops.RmsNorm)", "TypeError: torch_neuronx.xla_impl.ops.RmsNorm is a Neuron-only stub: it has "
                                         "no truth value"),
    "iteration": ("list(ops.RmsNorm)", "TypeError: torch_neuronx.xla_impl.ops.RmsNorm is a Neuron-only stub: it cannot "
                                       "be iterated"),
    "submodule": ("importlib.import_module('torch_neuronx.not_a_module')",
                  "ModuleNotFoundError: torch_neuronx.not_a_module is not on the Neuron stub allow-list"),
}

TRY_EACH = """
import importlib
for case, expression in {cases!r}.items():
    try:
        eval(expression)
    except Exception as exc:
        print(case, "->", type(exc).__name__ + ":", exc)
    else:
        print(case, "-> no error")
"""


@pytest.fixture(scope="module")
def off_the_list(tmp_path_factory) -> dict[str, str]:
    """Each off-the-list use, tried in one fresh process: what it raised."""
    r = probe(tmp_path_factory.mktemp("stubs"), TRY_EACH.format(cases={k: e for k, (e, _) in OFF_THE_LIST.items()}))
    assert r.returncode == 0, r.stderr
    return dict(line.split(" -> ", 1) for line in r.stdout.splitlines() if " -> " in line)


@pytest.mark.parametrize("case", OFF_THE_LIST)
def test_a_name_off_the_allow_list_raises_naming_it(off_the_list, case):
    raised = off_the_list[case]
    assert raised.startswith(OFF_THE_LIST[case][1]), raised
    assert "Neuron-only" in raised and "harness/backends/neuron/stub_allowlist.py" in raised


def test_an_allow_listed_stub_works_and_its_calls_are_counted(tmp_path):
    r = probe(tmp_path, """
from harness.backends.neuron.stubs import stub_calls
def op(x):
    return x
assert ops.xla_hlo_call(op) is op  # a stub decorator leaves the function as it is
class Norm(ops.RmsNorm):  # a stub can be subclassed
    pass
assert isinstance(Norm(), ops.RmsNorm)
assert not hasattr(ops, "not_a_neuron_name")  # off the list: an AttributeError, as for a missing name
print("calls:", stub_calls())
""")
    assert r.returncode == 0, r.stderr
    assert "calls: {'torch_neuronx.xla_impl.ops.xla_hlo_call': 1}" in r.stdout


def test_the_cpu_tier_summary_line_lists_the_stubbed_calls_made(tmp_path, nxdi_source):
    """A real child pytest of the NxDI CPU tier (the real NxDI 0.9 sources imported in CPU mode):
    its decorators run at import, so the line names them with their counts."""
    vendor = nxdi_source
    r = run_pytest("-q", "tests/unit/core/test_spec.py", "--carbon-backend", "neuron", "--carbon-neuron-cpu",
                   f"--carbon-nxdi-source={vendor}", cache_dir=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("carbon-harness: NxDI CPU tier: stubbed")), None)
    assert line is not None, r.stdout[-3000:]
    assert "stubbed Neuron-only calls made: " in line
    assert "torch_neuronx.xla_impl.ops.xla_hlo_call x" in line and "nki.jit x" in line, line
