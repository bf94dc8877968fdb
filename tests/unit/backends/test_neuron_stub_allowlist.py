"""The Neuron stubs answer only their allow-list (issue 20, item 6): a Neuron-only name NxDI's CPU
mode was not seen to use raises, naming it, instead of quietly handing back another stub that is
falsy and iterates as empty; the stubbed calls actually made are counted and reported in the NxDI
CPU tier's summary line. The error is one that NxDI's own probes (``hasattr``, ``getattr(..., None)``,
``except ImportError`` / ``except Exception``) cannot swallow (issue 31, item 3), shown on NxDI 0.9's
real code. Each probe runs in a fresh process: stubbing changes the import system."""

from __future__ import annotations

import json
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


MISSING = "NeuronStubMissing: torch_neuronx.xla_impl.ops.not_a_neuron_name is not on the Neuron stub allow-list"
OFF_THE_LIST = {
    "module-attribute": ("ops.not_a_neuron_name", MISSING),
    "stub-attribute": ("ops.RmsNorm.some_method", "NeuronStubMissing: torch_neuronx.xla_impl.ops.RmsNorm.some_method "
                                                  "is not on the Neuron stub allow-list"),
    # issue 31, item 3: the probes NxDI code branches on see the error, not a quiet "absent"
    "hasattr": ("hasattr(ops, 'not_a_neuron_name')", MISSING),
    "getattr-default": ("getattr(ops, 'not_a_neuron_name', None)", MISSING),
    "from-import-with-fallback": ("try:\n    from torch_neuronx.xla_impl.ops import not_a_neuron_name\n"
                                  "except ImportError:\n    not_a_neuron_name = None", MISSING),
    "except-exception": ("try:\n    ops.not_a_neuron_name\nexcept Exception:\n    pass", MISSING),
    "submodule-with-fallback": ("try:\n    import torch_neuronx.not_a_module\nexcept ImportError:\n    pass",
                                "NeuronStubMissing: torch_neuronx.not_a_module is not on the Neuron stub allow-list"),
    "subscript": ("ops.RmsNorm[0]", "NeuronStubMissing: torch_neuronx.xla_impl.ops.RmsNorm[] is not on the Neuron "
                                    "stub allow-list"),
    "isinstance": ("isinstance(object(), ops.RmsNorm)", "NeuronStubMissing: isinstance(<object>, "
                                                        "torch_neuronx.xla_impl.ops.RmsNorm) cannot be decided"),
    "issubclass": ("issubclass(int, ops.RmsNorm)", "NeuronStubMissing: issubclass(int, "
                                                   "torch_neuronx.xla_impl.ops.RmsNorm) cannot be decided"),
    "truth-value": ("bool(ops.RmsNorm)", "NeuronStubMissing: torch_neuronx.xla_impl.ops.RmsNorm is a Neuron-only "
                                         "stub: it has no truth value"),
    "iteration": ("list(ops.RmsNorm)", "NeuronStubMissing: torch_neuronx.xla_impl.ops.RmsNorm is a Neuron-only stub: "
                                       "it cannot be iterated"),
}

TRY_EACH = """
import importlib
for case, statement in {cases!r}.items():
    try:
        exec(statement)
    except BaseException as exc:
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


def test_the_off_list_error_passes_every_except_clause_short_of_baseexception():
    """hasattr, getattr's default, ``from X import Y`` and ``except ImportError`` / ``except Exception``
    all catch Exception subclasses: the error must be none."""
    from harness.backends.neuron.stubs import NeuronStubMissing

    assert not issubclass(NeuronStubMissing, Exception)
    assert issubclass(NeuronStubMissing, BaseException)


def test_an_allow_listed_stub_works_and_its_calls_are_counted(tmp_path):
    r = probe(tmp_path, """
from harness.backends.neuron.stubs import stub_calls
import torch_neuronx.xla_impl
def op(x):
    return x
assert ops.xla_hlo_call(op) is op  # a stub decorator leaves the function as it is
class Norm(ops.RmsNorm):  # a stub can be subclassed
    pass
assert isinstance(Norm(), ops.RmsNorm) and issubclass(Norm, ops.RmsNorm)  # a real subclass: decided
assert isinstance(Norm(), Norm) and not isinstance(object(), Norm)  # a real class of NxDI's: as Python decides
assert torch_neuronx.xla_impl.ops is ops  # an allowed submodule is an attribute of its package
print("calls:", stub_calls())
""")
    assert r.returncode == 0, r.stderr
    assert "calls: {'torch_neuronx.xla_impl.ops.xla_hlo_call': 1}" in r.stdout


# NxDI's own code that probes a Neuron-only name and takes another branch when it seems absent: with the
# name taken off the allow-list (as a newer NxDI needing a name the list lacks), importing the module must
# raise through that very line, not quietly take the branch a Trn2 host would not take.
NXDI_PROBES = {
    # attention_base.import_nki_cte_attention_kernel: without the kernel, flash attention is silently off
    "getattr-default": ("nkilib.core.attention.attention_cte.attention_cte",
                        "neuronx_distributed_inference.modules.attention.attention_base",
                        'attention_cte = getattr(mod, "attention_cte", None)'),
    # neuronx_distributed.trace.functions: without it, the persistent compile cache is silently off
    "from-import-except-ImportError": ("libneuronxla.neuron_xla_wlo_compile", "neuronx_distributed.trace.functions",
                                       "from libneuronxla import neuron_xla_wlo_compile # type: ignore"),
}

NXDI_PROBE = """
import importlib, json, traceback
from pathlib import Path
from harness.backends.neuron import stub_allowlist
from harness.backends.neuron.stubs import install
install(Path({source!r}))
del stub_allowlist.ALLOW_LIST[{name!r}]
try:
    importlib.import_module({module!r})
except BaseException as exc:
    print(json.dumps({{"raised": type(exc).__name__, "message": str(exc),
                      "lines": [f.line for f in traceback.extract_tb(exc.__traceback__)]}}))
else:
    print(json.dumps({{"raised": None}}))
"""


@pytest.mark.parametrize("site", NXDI_PROBES)
def test_nxdi_code_probing_a_name_off_the_list_fails_instead_of_branching(site, nxdi_source):
    from importlib.machinery import PathFinder

    name, module, line = NXDI_PROBES[site]
    if PathFinder.find_spec(name.split(".")[0]) is not None:
        pytest.skip(f"{name.split('.')[0]} is installed on this host: it is not stubbed")
    code = NXDI_PROBE.format(source=str(nxdi_source), name=name, module=module)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    outcome = json.loads(r.stdout.strip().splitlines()[-1])
    assert outcome["raised"] == "NeuronStubMissing", outcome
    assert outcome["message"].startswith(f"{name} is not on the Neuron stub allow-list"), outcome
    assert line in outcome["lines"], outcome["lines"]


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
