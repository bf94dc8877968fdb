"""A planted slowdown: a copy of an NxDI source tree whose token-generation step does ``extra_ms``
more CPU work, for showing that a release check catches what it exists to catch (and lets a change
well under its tolerance pass). Used by the suite and by ``python -m harness.release.power``.

The work is a spin on ``time.process_time`` right after NxDI's token-generation sub-model returns
(``NeuronBaseForCausalLM._get_model_outputs``), so it lands inside every timed decode step and
costs the same process CPU time whatever else the machine is doing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.backends.neuron.sources import source_roots

ANCHOR = "            is_run_on_neuron = self.token_generation_model.is_neuron()\n"
MODEL_BASE = Path("neuronx_distributed_inference") / "models" / "model_base.py"


class PlantError(ValueError):
    """The tree cannot be planted (not an NxDI tree, or its token-generation path has moved)."""


def copy_nxdi_tree(source: Path, dest: Path) -> Path:
    """``dest`` laid out as ``carbon-harness nxdi-source`` lays a tree out (``neuronx-distributed-inference/src`` and a link to the
    source's neuronx-distributed); returns the copied ``neuronx_distributed_inference`` package."""
    nxdi_src, nxd_src = source_roots(source)
    target = dest / "neuronx-distributed-inference" / "src"
    shutil.copytree(nxdi_src / "neuronx_distributed_inference", target / "neuronx_distributed_inference",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if nxd_src is not None:
        (dest / "neuronx-distributed").mkdir(parents=True, exist_ok=True)
        # absolute: a link relative to the caller's directory would dangle from inside dest
        (dest / "neuronx-distributed" / "src").symlink_to(nxd_src.resolve(), target_is_directory=True)
    return target / "neuronx_distributed_inference"


def _plant(source: Path, dest: Path, code: str) -> Path:
    """A copy of ``source`` (``copy_nxdi_tree``) with ``code`` run at the start of each TKG step."""
    package = copy_nxdi_tree(source, dest)
    model_base = package.parent / MODEL_BASE
    text = model_base.read_text()
    if text.count(ANCHOR) != 1:
        raise PlantError(f"{source_roots(source)[0] / MODEL_BASE}: the token-generation call ({ANCHOR.strip()!r}) is "
                         "not found exactly once; this NxDI release lays out its forward differently")
    model_base.write_text(text.replace(ANCHOR, code + ANCHOR))
    return dest


def plant_tkg_slowdown(source: Path, dest: Path, extra_ms: float) -> Path:
    """A copy of ``source`` with ``extra_ms`` of CPU work added to each TKG step."""
    if not extra_ms >= 0:
        raise PlantError(f"extra_ms={extra_ms!r} must be a non-negative number of milliseconds")
    spin = (f"            import time as _planted_time  # planted: {extra_ms} ms of CPU work per TKG step\n"
            f"            _planted_end = _planted_time.process_time() + {extra_ms / 1000.0!r}\n"
            "            while _planted_time.process_time() < _planted_end:\n"
            "                pass\n")
    return _plant(source, dest, spin)


def plant_nxdi_host_work(source: Path, dest: Path, calls: int) -> Path:
    """A copy of ``source`` whose TKG step makes ``calls`` more Python calls (a local function called in a
    loop, no sleep, no spin): host work per step, as NxDI's c63afe0 added with its tensor_capture_hook,
    which the work counts name (``..._planted_host_work``) and ``--gate-work`` fails."""
    if not (isinstance(calls, int) and calls > 0):
        raise PlantError(f"calls={calls!r} must be a positive number of Python calls per TKG step")
    code = (f"            def _planted_host_work():  # planted: {calls} Python calls per TKG step\n"
            "                return None\n"
            f"            for _ in range({calls}):\n"
            "                _planted_host_work()\n")
    return _plant(source, dest, code)


def plant_process_noise(source: Path, dest: Path, median_ms: float, sigma: float) -> Path:
    """A copy of ``source`` whose every process draws, once, a lognormal amount of CPU work (median
    ``median_ms``, log-sigma ``sigma``) and spins it in each TKG step: heavy per-process noise, the same
    law on both sides of an A/A check (give the copy as both), for showing that noise the rounds cannot
    tame ends INCONCLUSIVE, never FAIL. Each process draws from the OS's entropy, not a seed."""
    if not median_ms >= 0 or not sigma >= 0:
        raise PlantError(f"median_ms={median_ms!r}, sigma={sigma!r}: both must be non-negative numbers")
    spin = ("            import math as _planted_math, random as _planted_random, time as _planted_time  # planted: "
            f"lognormal({median_ms} ms, {sigma}) of CPU work per TKG step, drawn once per process\n"
            "            _planted_ms = globals().get('_PLANTED_PROCESS_MS')\n"
            "            if _planted_ms is None:\n"
            f"                _planted_ms = {median_ms!r} * _planted_math.exp({sigma!r} * "
            "_planted_random.SystemRandom().gauss(0.0, 1.0))\n"
            "                globals()['_PLANTED_PROCESS_MS'] = _planted_ms\n"
            "            _planted_end = _planted_time.process_time() + _planted_ms / 1000.0\n"
            "            while _planted_time.process_time() < _planted_end:\n"
            "                pass\n")
    return _plant(source, dest, spin)


def plant_one_crash(source: Path, dest: Path, marker: Path) -> Path:
    """A copy of ``source`` whose first TKG step after ``marker`` exists removes it and raises: one
    process crashes (the first to decode, such as a check's first baseline perf round with
    ``--no-conformance``), every later one runs the release unchanged."""
    marker = marker.resolve()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("the next TKG step raises once\n")
    crash = ("            import os as _planted_os  # planted: one crash, while the marker exists\n"
             f"            if _planted_os.path.exists({str(marker)!r}):\n"
             f"                _planted_os.remove({str(marker)!r})\n"
             "                raise RuntimeError('planted crash: this process fails once')\n")
    return _plant(source, dest, crash)


# ----------------------------------------------------------------------------------------------
# Plants in a served side's vLLM: a sitecustomize on that side's PYTHONPATH (--candidate-env), so they
# reach its server and the engine-core processes it spawns, and nothing else on the machine.
# ----------------------------------------------------------------------------------------------

SERVED_HOOK = '''"""Planted by carbon-harness (harness.release.plant) in this side's vLLM only: {what}."""
import importlib.abc
import importlib.util
import os
import sys

TARGET = {target!r}

# pytest's assertion rewriting puts its own import hook first on sys.meta_path and loads an installed
# plugin's modules (harness.*) itself, past the finder below: a planted harness module was left unpatched in
# the side's pytest (the contract zoo's tokenizer-shift passed, 2026-11-27). Plain asserts keep it first.
if TARGET.split(".")[0] == "harness":
    os.environ["PYTEST_ADDOPTS"] = (os.environ.get("PYTEST_ADDOPTS", "") + " --assert=plain").strip()


def _patch(module):
{patch}


class _Plant(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module, run=run):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Plant())
'''

SLOW_STEP = '''    import time

    runner = module.GPUModelRunner
    original = runner.execute_model

    def execute_model(self, *args, **kwargs):
        end = time.perf_counter() + {seconds!r}
        while time.perf_counter() < end:
            pass
        return original(self, *args, **kwargs)

    runner.execute_model = execute_model'''

PERTURB = '''    import torch

    runner = module.CPUModelRunner
    original = runner.load_model

    def load_model(self, *args, **kwargs):
        original(self, *args, **kwargs)
        head = self.model.lm_head.weight
        noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
        with torch.no_grad():
            head.add_({scale!r} * head.float().std() * noise.to(head.dtype))

    runner.load_model = load_model'''


def _served_plant(dest: Path, what: str, target: str, patch: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "sitecustomize.py").write_text(SERVED_HOOK.format(what=what, target=target, patch=patch))
    return dest


def plant_served_step_slowdown(dest: Path, extra_ms: float) -> Path:
    """A directory whose ``sitecustomize`` makes every step of vLLM's model runner spin ``extra_ms``
    of CPU time before it runs (every decode step: a per-token slowdown). Give it as the side's
    ``PYTHONPATH``."""
    return _served_plant(dest, f"every model-runner step spins {extra_ms:g} ms first",
                         "vllm.v1.worker.gpu_model_runner", SLOW_STEP.format(seconds=extra_ms / 1000.0))


ONE_AT_A_TIME = '''    config = module.SchedulerConfig
    original = config.__post_init__

    def __post_init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.max_num_active_seqs = 1  # admit one request into RUNNING at a time: no batching

    config.__post_init__ = __post_init__'''


def plant_served_no_batching(dest: Path) -> Path:
    """A directory whose ``sitecustomize`` makes vLLM's scheduler run one request at a time
    (``max_num_active_seqs = 1``): a batch's concurrent requests take turns, so the server runs about a step per
    token of every request instead of one per token of the longest (more work per batch, the same outputs: the
    served work gate's plant). Give it as the side's ``PYTHONPATH``; vLLM 0.32 has ``max_num_active_seqs``."""
    return _served_plant(dest, "the scheduler admits one request at a time", "vllm.config.scheduler", ONE_AT_A_TIME)


def plant_served_weight_noise(dest: Path, scale: float = 0.5) -> Path:
    """A directory whose ``sitecustomize`` adds seeded noise (``scale`` x the weights' std) to the served
    model's LM head once vLLM's CPU model runner has loaded it: wrong tokens from the same checkpoint
    files, as a loader bug would give."""
    return _served_plant(dest, f"the LM head gets N(0, ({scale:g} std)^2) noise after loading",
                         "vllm.v1.worker.cpu_model_runner", PERTURB.format(scale=scale))


DECODE_POSITION = '''    runner = module.CPUModelRunner
    original = runner._model_forward

    def _model_forward(self, *args, **kwargs):
        args = list(args)
        positions = kwargs.get("positions", args[1] if len(args) > 1 else None)
        batch = getattr(self, "input_batch", None)
        if (positions is not None and batch is not None and positions.dim() == 1 and batch.num_reqs > 0
                and positions.shape[0] == batch.num_reqs and int(positions.min()) > 0):
            positions = positions + {shift!r}  # a pure decode step: one token per request, none at position 0
            if "positions" in kwargs:
                kwargs["positions"] = positions
            else:
                args[1] = positions
        return original(self, *args, **kwargs)

    runner._model_forward = _model_forward'''


def plant_served_decode_position(dest: Path, shift: int = 1) -> Path:
    """A directory whose ``sitecustomize`` makes vLLM's CPU model runner rotate every decode step's token
    at ``shift`` positions past its own (RoPE), while prefill keeps its positions: a decode-only defect
    that a prefill (``prompt_logprobs``) never runs into, and that the output contract's decode path must
    catch. Give it as the side's ``PYTHONPATH``."""
    if not isinstance(shift, int) or shift == 0:
        raise PlantError(f"shift={shift!r} must be a non-zero whole number of positions")
    return _served_plant(dest, f"every decode step's positions are shifted by {shift:+d} (prefill untouched)",
                         "vllm.v1.worker.cpu_model_runner", DECODE_POSITION.format(shift=shift))


EOS_IGNORED = '''    original = module.check_stop

    def check_stop(request, max_model_len, *args, **kwargs):
        if request.num_tokens >= max_model_len or request.num_output_tokens >= request.max_tokens:
            return original(request, max_model_len, *args, **kwargs)
        return False  # an EOS or a stop token never ends a request: only its length does

    module.check_stop = check_stop'''


def plant_served_eos_ignored(dest: Path) -> Path:
    """A directory whose ``sitecustomize`` makes vLLM's scheduler end a request only at its length: an EOS
    (or a stop token id) no longer stops it, as a server that treats every request as ``ignore_eos`` would.
    Give it as the side's ``PYTHONPATH``."""
    return _served_plant(dest, "an EOS or stop token never ends a request (only its length does)",
                         "vllm.v1.core.sched.utils", EOS_IGNORED)


HOST_WORK = '''    model = module.LlamaModel
    original = model.forward

    def _planted_host_work():
        return None

    def forward(self, *args, **kwargs):
        for _ in range({calls!r}):
            _planted_host_work()
        return original(self, *args, **kwargs)

    model.forward = forward'''


def plant_host_work(dest: Path, calls: int) -> Path:
    """A directory whose ``sitecustomize`` makes every forward of transformers' ``LlamaModel`` (the decoder each
    prefill and decode step of the hf backend runs) make ``calls`` more Python calls, and nothing else: host work with no sleep, the
    kind a release adds (NxDI c63afe0's tensor_capture_hook on every step). For the host-work gate's checks
    (``release-check --gate-work``); give it first on the side's ``PYTHONPATH``."""
    if calls < 1:
        raise PlantError(f"calls={calls}: plant at least one extra call per step")
    return _served_plant(dest, f"{calls} more Python calls per Llama forward", "transformers.models.llama.modeling_llama",
                         HOST_WORK.format(calls=calls))


BEFORE_FORWARD = '''    model = module.LlamaModel
    original = model.forward

    def forward(self, *args, **kwargs):
        {work}
        return original(self, *args, **kwargs)

    model.forward = forward'''
SPIN = "sum(range({count!r}))  # CPU time in one C call: what a CPU-time timer sees, a call more for the counter"
SLEEP = "__import__('time').sleep({seconds!r})  # wall time only: no CPU, two calls more for the counter"


def plant_step_spin(dest: Path, count: int) -> Path:
    """A directory whose ``sitecustomize`` makes every forward of transformers' ``LlamaModel`` first spend
    ``sum(range(count))`` of CPU time (200,000: ~2.7 ms here): slower with the same work (a call or two more a
    step), the case the verdict's work section tells apart from grown host work. A spin, not a sleep: the hf
    checks time in process CPU time, which a sleep does not spend."""
    if count < 1:
        raise PlantError(f"count={count}: plant a spin of at least 1")
    return _served_plant(dest, f"sum(range({count})) before every Llama forward", "transformers.models.llama.modeling_llama",
                         BEFORE_FORWARD.format(work=SPIN.format(count=count)))


def plant_step_sleep(dest: Path, ms: float) -> Path:
    """A directory whose ``sitecustomize`` makes every forward of transformers' ``LlamaModel`` first sleep ``ms``:
    slower in wall time with the same work, and no slower in CPU time (``release-check --timer wall`` sees it,
    the default CPU-time timer of a host check cannot)."""
    if not 0 < ms < 1000:
        raise PlantError(f"ms={ms}: plant a sleep above 0 and under 1000 ms per step")
    return _served_plant(dest, f"a {ms:g} ms sleep before every Llama forward", "transformers.models.llama.modeling_llama",
                         BEFORE_FORWARD.format(work=SLEEP.format(seconds=ms / 1000.0)))
