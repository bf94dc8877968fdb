"""Build NxDI 0.9's real speculation configs from a source checkout, on a CPU machine, and print
what they hold as JSON (run as a subprocess by test_speculative.py: the import stubs below must
not leak into the test process).

Usage: python nxdi_speculation_probe.py VENDOR_DIR WORK_DIR < request.json

VENDOR_DIR holds ``neuronx-distributed-inference/src`` and ``neuronx-distributed/src``; NxDI is
imported the way the NxDI CPU tier imports it (``harness.backends.neuron.stubs``). The reference is
NxDI's own ``inference_demo.py``: its argument parser, ``create_neuron_config`` and ``run_inference``
(up to where it builds the model for a device) run on the flags that ask for the harness's settings,
and its configs are compared with the harness's field by field; checkpoints load through NxDI's
``load_pretrained_config``, as the harness's engine loads them."""

from __future__ import annotations

import argparse
import ast
import json
import logging
import sys
from pathlib import Path


class _Unexpected(logging.Handler):
    """NeuronConfig logs the kwargs it did not consume instead of raising: collect them."""

    def __init__(self):
        super().__init__()
        self.keys: set[str] = set()

    def emit(self, record):
        message = record.getMessage()
        if "Unexpected keyword arguments" in message:
            self.keys |= set(ast.literal_eval(message.split(":", 2)[-1].strip()))


def plain(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def load_inference_demo() -> tuple[dict, dict[int, str]]:
    """NxDI's ``inference_demo.py``, executed statement by statement from its source: its functions
    are NxDI's own. The module cannot be imported whole on a CPU (its MoE models need Neuron-only
    names that are not on the stub allow-list, its accuracy helpers torchvision), so an import that
    fails for that is left out (``exec_statements``: anything else that fails raises)."""
    import neuronx_distributed_inference

    root = Path(neuronx_distributed_inference.__file__).parent
    namespace, left_out = exec_statements(root / "inference_demo.py", neuronx_distributed_inference.__name__)
    missing = [name for name in ("setup_run_parser", "create_neuron_config", "run_inference") if name not in namespace]
    if missing:
        raise RuntimeError(f"inference_demo.py in {root} no longer defines {missing}")
    return namespace, left_out


def exec_statements(path: Path, package: str) -> tuple[dict, dict[int, str]]:
    """The namespace of module ``path`` (in ``package``, so relative imports resolve as they do for
    the module itself), its top-level statements executed one by one, and the statements left out,
    by line, with why. Only two failures leave a statement out: an import that cannot be made here
    (ImportError, or a Neuron-only name off the stub allow-list), whose literal constants are read
    from the imported module's source instead; and a statement that fails only because it names
    what such an import would have bound (NameError). Anything else raises, naming the line: a
    demo statement silently missing would make the demo's functions run on something else."""
    from harness.backends.neuron.stubs import NeuronStubMissing

    namespace: dict = {"__name__": f"{package}.{path.stem}", "__file__": str(path), "__package__": package}
    unbound: set[str] = set()
    left_out: dict[int, str] = {}
    for node in ast.parse(path.read_text()).body:
        try:
            exec(compile(ast.Module([node], type_ignores=[]), str(path), "exec"), namespace)
        except (ImportError, NeuronStubMissing) as exc:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                raise RuntimeError(f"{path}:{node.lineno}: {type(exc).__name__}: {exc}") from exc
            left_out[node.lineno] = f"{type(exc).__name__}: {exc}"
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                value = imported_constant(path, package, node, alias.name)
                if value is None:
                    unbound.add(bound)
                else:
                    namespace[bound] = value
        except NameError as exc:
            if exc.name not in unbound:
                raise RuntimeError(f"{path}:{node.lineno}: NameError: {exc}") from exc
            left_out[node.lineno] = f"NameError: {exc} (its import was left out)"
            unbound.update(t.id for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store))
    return namespace, left_out


def imported_constant(path: Path, package: str, node: ast.stmt, name: str):
    """The literal constant ``from MODULE import name`` binds (None: not a literal there, or not a
    ``from`` import), read from MODULE's source; MODULE is resolved as the import does (relative to
    ``package``), and looked up beside ``path``'s top-level package."""
    import importlib.util

    if not isinstance(node, ast.ImportFrom):
        return None
    module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
    top = path.parent
    for _ in package.split(".")[1:]:
        top = top.parent  # the top-level package's directory
    base = top.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        value = source_constant(candidate, name)
        if value is not None:
            return value
    return None


def source_constant(module_file: Path, name: str):
    """A literal top-level assignment ``name = ...`` in ``module_file``, or None."""
    if not module_file.is_file():
        return None
    for node in ast.parse(module_file.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def demo_argv(demo: dict, kwargs: dict) -> tuple[list[str], list[str]]:
    """The ``inference_demo run`` flags that ask for ``kwargs``, found in the demo's own parser by
    destination, and the kwargs the demo has no flag for."""
    parser = argparse.ArgumentParser()
    demo["setup_run_parser"](parser)
    flags = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    missing: list[str] = []
    for key, value in kwargs.items():
        if key == "on_device_sampling_config":  # the demo builds it from its sampling flags
            argv.append("--on-device-sampling")
            for name, setting in value.items():
                argv += [flags[name].option_strings[0]] if setting is True else (
                    [] if setting is False else [flags[name].option_strings[0], str(setting)])
            continue
        action = flags.get(key)
        if action is None:
            missing.append(key)
        elif action.nargs == 0:  # store_true
            if value:
                argv.append(action.option_strings[0])
        elif isinstance(value, list):
            argv += [action.option_strings[0], *map(str, value)]
        else:
            argv += [action.option_strings[0], str(value)]
    return argv, missing


def fields(config, prefix: str = "") -> dict[str, str]:
    """A config's fields, flattened: nested NxDI config objects (on-device sampling) field by field,
    with their class; any other value by its repr (a function or class by identity, never by its
    ``__dict__``, which is empty for every function and would make any two compare equal)."""
    out = {f"{prefix}__class__": f"{type(config).__module__}.{type(config).__qualname__}"}
    for k, v in vars(config).items():
        nested = type(v).__module__.startswith("neuronx_distributed") and hasattr(v, "__dict__") and not callable(v)
        out.update(fields(v, f"{prefix}{k}.") if nested else {f"{prefix}{k}": repr(v)})
    return out


class _DemoReachedTheModel(Exception):
    """Raised where run_inference constructs the target model (next it compiles for a device)."""

    def __init__(self, config):
        super().__init__("configs built")
        self.config = config


def demo_configs(demo: dict, args):
    """The target InferenceConfig (with its fused draft config) that the demo's ``run_inference``
    builds from ``args``, taken where it hands it to the model class: everything before that line
    (create_neuron_config, load_pretrained_config, the draft derivation, FusedSpecNeuronConfig) runs
    as NxDI wrote it."""
    from neuronx_distributed_inference.models.llama.modeling_llama import NeuronLlamaForCausalLM

    class StopAtModel(NeuronLlamaForCausalLM):
        def __init__(self, model_path, config):  # noqa: D107 - records instead of building for a device
            raise _DemoReachedTheModel(config)

    try:
        demo["run_inference"](StopAtModel, args)
    except _DemoReachedTheModel as reached:
        return reached.config
    raise RuntimeError("inference_demo.run_inference never constructed the model")


def main() -> None:
    vendor, work = Path(sys.argv[1]), Path(sys.argv[2])
    request = json.load(sys.stdin)
    sys.path.insert(0, request["harness_root"])
    from harness.backends.neuron.stubs import install

    install(vendor)
    from neuronx_distributed_inference.models.config import FusedSpecNeuronConfig, NeuronConfig
    from neuronx_distributed_inference.models.llama.modeling_llama import (
        LlamaInferenceConfig,
        NeuronLlamaForCausalLM,
    )
    from neuronx_distributed_inference.utils.hf_adapter import load_pretrained_config

    from harness.backends.neuron.config import derive_draft_neuron_config

    unexpected = _Unexpected()
    logging.getLogger().addHandler(unexpected)
    target_nc = NeuronConfig(**request["target_kwargs"])
    draft_nc = NeuronConfig(**request["draft_kwargs"])
    unexpected_at_init = sorted(unexpected.keys)
    logging.getLogger().removeHandler(unexpected)  # the demo passes all its arguments: NxDI logs most as unexpected
    # inference_demo.py itself: its argument parser and run_inference on the harness's target settings
    demo, demo_left_out = load_inference_demo()
    argv, no_demo_flag = demo_argv(demo, request["target_kwargs"])
    parser = argparse.ArgumentParser()
    demo["setup_run_parser"](parser)
    args = parser.parse_args([*argv, "--model-path", request["target_checkpoint"], "--compiled-model-path",
                              str(work / "demo-compiled"), "--draft-model-path", request["draft_checkpoint"],
                              "--prompt", "ACGT"])
    demo_config = demo_configs(demo, args)
    demo_target = demo_config.neuron_config
    demo_draft = demo_config.fused_spec_config.draft_config.neuron_config
    ours = derive_draft_neuron_config(target_nc)

    detail: dict[str, list] = {}

    def differ(x, y):
        a, b = fields(x), fields(y)
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        detail.update({k: [a.get(k), b.get(k)] for k in keys})
        return keys

    target_vs_demo = differ(target_nc, demo_target)
    kwargs_vs_demo = differ(draft_nc, demo_draft)
    # the harness's derivation applied to the demo's own target: must give the demo's draft exactly
    derived_vs_demo = differ(derive_draft_neuron_config(demo_target), demo_draft)

    # the harness's own configs through NxDI's save/load, with the loader production uses (engine.py)
    draft_config = LlamaInferenceConfig(ours, load_config=load_pretrained_config(request["draft_checkpoint"]))
    target_config = LlamaInferenceConfig(target_nc, load_config=load_pretrained_config(request["target_checkpoint"]))
    target_config.fused_spec_config = FusedSpecNeuronConfig(NeuronLlamaForCausalLM._model_cls,
                                                            draft_config=draft_config,
                                                            draft_model_path=request["draft_checkpoint"])
    saved = work / "compiled"
    saved.mkdir()
    target_config.save(str(saved))  # what model.compile() writes next to the traced model
    back = LlamaInferenceConfig.load(str(saved))
    fused = back.fused_spec_config
    print(json.dumps({
        "unexpected_kwargs": unexpected_at_init,
        "kwargs_vs_demo": kwargs_vs_demo,
        "target_vs_demo": target_vs_demo,
        "no_demo_flag": no_demo_flag,
        "demo_argv": argv,
        "demo_left_out": demo_left_out,  # line of inference_demo.py: why it was not executed
        "differences": detail,  # field: [harness, demo], for the assertion messages
        "derived_vs_demo": derived_vs_demo,
        "target": {k: plain(getattr(target_nc, k)) for k in ("speculation_length", "enable_fused_speculation",
                                                             "spec_batch_size", "tp_degree", "seq_len",
                                                             "kv_cache_tiling")},
        "trace_tokengen_model": target_nc.trace_tokengen_model,
        "draft": {k: plain(getattr(draft_nc, k)) for k in ("speculation_length", "enable_fused_speculation",
                                                           "tp_degree")},
        "loaded": {"speculation_length": back.neuron_config.speculation_length,
                   "enable_fused_speculation": back.neuron_config.enable_fused_speculation,
                   "fused_spec_config": type(fused).__name__,
                   "draft_speculation_length": fused.draft_config.neuron_config.speculation_length,
                   "draft_hidden_size": fused.draft_config.hidden_size,
                   "target_hidden_size": back.hidden_size,
                   "worker_cls": fused.worker_cls.__name__},
    }))


if __name__ == "__main__":
    main()
