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
"""

from __future__ import annotations

from pathlib import Path

from harness.release.plant import PlantError, _served_plant, copy_nxdi_tree

WRONG_THETA = 10000.0
WRONG_EPS = 1e-5
DEFECTS = ("rope-theta", "rms-eps", "tokenizer-shift", "eos-ignored")
# the criterion each defect is expected to break first (the contract's findings name it)
EXPECTED = {"rope-theta": "sigma ratio (scored)", "rms-eps": "sigma ratio (scored)", "tokenizer-shift": "tokenization",
            "eos-ignored": "EOS honoured"}

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

HOOKS = {
    "rope-theta": ("transformers.models.llama.modeling_llama", ROPE, f"RoPE with theta {WRONG_THETA:g}"),
    "rms-eps": ("transformers.models.llama.modeling_llama", EPS, f"every RMSNorm with eps {WRONG_EPS:g}"),
    "tokenizer-shift": ("harness.carbon.tokenizer", SHIFT, "the DNA content's first base dropped: 6-mers shift"),
    "eos-ignored": ("transformers.generation.stopping_criteria", EOS, "EOS never stops generation"),
    # not a defect: transformers' eager attention instead of SDPA, a correct bf16 implementation that the
    # calibration counts beside NxDI's (correct stacks differ from the yardstick by their own rounding)
    "correct-bf16-eager": ("transformers.models.llama.modeling_llama", EAGER, "eager attention (correct)"),
}

# NxDI's own modelling code, edited in a copy of its tree: (file under the package, old, new)
NXDI_EDITS = {
    "rope-theta": ("models/llama/modeling_llama.py", "base=config.rope_theta,", f"base={WRONG_THETA!r},"),
    "rms-eps": ("models/llama/modeling_llama.py", "eps=config.rms_norm_eps)", f"eps={WRONG_EPS!r})"),
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
    path.write_text(text.replace(old, new))
    return dest
