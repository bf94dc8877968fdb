"""Build NxDI 0.9's real speculation configs from a source checkout, on a CPU machine, and print
what they hold as JSON (run as a subprocess by test_speculative.py: the import stubs below must
not leak into the test process).

Usage: python nxdi_speculation_probe.py VENDOR_DIR WORK_DIR < request.json

VENDOR_DIR holds ``neuronx-distributed-inference/src`` and ``neuronx-distributed/src``; NxDI is
imported the way the NxDI CPU tier imports it (``harness.backends.neuron.stubs``)."""

from __future__ import annotations

import copy
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
            import ast

            self.keys |= set(ast.literal_eval(message.split(":", 2)[-1].strip()))


def plain(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


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

    from harness.backends.neuron.config import derive_draft_neuron_config

    unexpected = _Unexpected()
    logging.getLogger().addHandler(unexpected)
    target_nc = NeuronConfig(**request["target_kwargs"])
    draft_nc = NeuronConfig(**request["draft_kwargs"])
    unexpected_at_init = sorted(unexpected.keys)
    # inference_demo.py run_inference, verbatim in effect: deep copy, speculation off
    demo = copy.deepcopy(target_nc)
    demo.speculation_length = 0
    demo.enable_fused_speculation = False
    ours = derive_draft_neuron_config(target_nc)
    def fields(config):  # nested config objects (on-device sampling) compared by their fields
        return {k: repr(vars(v) if hasattr(v, "__dict__") else v) for k, v in vars(config).items()}

    a, b, c = fields(draft_nc), fields(demo), fields(ours)
    kwargs_vs_demo = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    derived_vs_demo = sorted(k for k in set(c) | set(b) if c.get(k) != b.get(k))

    def loader(path):
        def load(config):
            for key, value in json.loads((Path(path) / "config.json").read_text()).items():
                setattr(config, key, value)
        return load

    draft_config = LlamaInferenceConfig(ours, load_config=loader(request["draft_checkpoint"]))
    target_config = LlamaInferenceConfig(target_nc, load_config=loader(request["target_checkpoint"]))
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
