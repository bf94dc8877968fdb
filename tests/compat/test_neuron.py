"""Neuron contracts that need no device: the NxDI backend run through NxDI's real model code.

With ``--carbon-backend neuron`` they run against the session's engines (a Trn2 device, or NxDI's
CPU mode with ``--carbon-neuron-cpu``); otherwise, when NxDI is given (``--carbon-nxdi-source DIR``
or installed), against NxDI's own CPU mode on the embedded default: the NxDI CPU tier. Each of the
defects found when the backend first ran (issue 8) has its test here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.hf import HFEngine
from harness.backends.neuron.artifacts import capture_neuron_logs
from harness.backends.neuron.config import (
    COMPILE_VARIANTS,
    flash_attention_strategy,
    inference_config_kwargs,
    neuron_config_kwargs,
)
from harness.backends.neuron.engine import NeuronEngine, adapter_generate_kwargs
from harness.carbon.checkpoint import MANIFEST_FILE
from harness.carbon.dna import prompt_suite
from harness.core.errors import BackendError
from harness.core.paths import REPO_ROOT
from harness.core.plan import CONVERT_TO_MHA, attention_sharding
from harness.core.spec import get_shape
from harness.core.vocab import PAD_TOKEN_ID
from harness.workloads.accuracy import check_accuracy
from harness.workloads.golden import GOLDEN_TOKENS

pytestmark = [pytest.mark.compat, pytest.mark.neuron]

SMOKE_BS3 = replace(get_shape("smoke"), name="smoke-bs3", batch_size=3)
STEPS = 8


def reference_shape(shape):
    """The fp32 transformers reference holds prompt + continuation in one forward pass."""
    return replace(shape, name=f"{shape.name}-reference", max_context_length=shape.seq_len)


@pytest.fixture(scope="module")
def padded_batch(carbon_tokenizer) -> Batch:
    """Three right-padded rows of different lengths (31, 16 and 2 tokens)."""
    return Batch.from_prompts(carbon_tokenizer, [prompt_suite(180)[0].prompt, "<dna>" + "ACGTTGCA" * 11, "hi <dna>"])


@pytest.fixture(scope="module")
def hf_reference(carbon_tiny_checkpoint):
    engine = HFEngine(carbon_tiny_checkpoint, reference_shape(SMOKE_BS3), "carbon-tiny", device="cpu", dtype="fp32")
    yield engine
    engine.close()


# --- the accuracy contract, on the session's engines or the CPU tier ---------------------------------

def test_neuron_matches_hf_fp32_reference(carbon_neuron_engine, carbon_session, carbon_model, carbon_shape,
                                          carbon_model_tokenizer):
    engine = carbon_neuron_engine
    reference = HFEngine(carbon_session.checkpoint(carbon_model), reference_shape(carbon_shape), carbon_model.label,
                         device="cpu", dtype="fp32")
    prompts = [c.prompt for c in prompt_suite(carbon_shape.prompt_bp or 180)][: carbon_shape.batch_size]
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts)
    report = check_accuracy(reference, engine, batch, GOLDEN_TOKENS)
    assert report.passed, report.summary()
    if engine.info.dtype == "fp32":  # NxDI's CPU mode: the same greedy tokens, not only close logits
        assert torch.equal(engine.generate(batch, GOLDEN_TOKENS).tokens, reference.generate(batch, GOLDEN_TOKENS).tokens)


def test_neuron_attention_sharding_matches_the_plan(carbon_neuron_engine):
    """The plan comes from the checkpoint's own config.json, so a checkpoint outside ``MODELS``
    (compiled without a plan, hence no ``attention_sharding_planned``) is still checked."""
    info = carbon_neuron_engine.info
    assert "attention_sharding_mismatch" not in info.extra, info.extra.get("attention_sharding_mismatch")
    for key in ("attention_sharding", "tp_degree"):
        assert key in info.extra, f"the engine's info.extra has no {key!r}: {sorted(info.extra)}"
    config = json.loads((Path(info.checkpoint) / "config.json").read_text())
    heads = config["num_attention_heads"]
    planned = attention_sharding(heads, config.get("num_key_value_heads", heads), info.extra["tp_degree"])
    assert info.extra["attention_sharding"] == planned.strategy, (info.extra["attention_sharding"], planned)
    if "attention_sharding_planned" in info.extra:  # the engine's own plan (a MODELS label) agrees with it
        assert info.extra["attention_sharding_planned"] == planned.strategy


# --- the NxDI CPU tier: the embedded default in NxDI's CPU mode ----------------------------------------

def test_right_padded_batch_matches_reference_tokens_and_logits(nxdi_cpu_engine, hf_reference, padded_batch):
    """Defect 1: a decode mask with a one appended per step attends to the pad slots context
    encoding wrote (0.12 -> 0.52 logit error over 5 steps on a padded row); ones exactly below each
    row's position give the reference's logits."""
    engine = nxdi_cpu_engine(SMOKE_BS3)
    expected = hf_reference.generate(padded_batch, STEPS).tokens
    assert torch.equal(engine.generate(padded_batch, STEPS).tokens, expected)
    stepped = [engine.prefill(padded_batch)] + [engine.decode_step() for _ in range(STEPS - 1)]
    assert torch.equal(torch.stack(stepped, 1).long(), expected)  # prefill/decode_step: the same tokens
    actual = engine.continuation_logits(padded_batch, expected)
    reference = hf_reference.continuation_logits(padded_batch, expected)
    assert (actual - reference).abs().max().item() < 1e-4


def test_generation_ignores_the_configs_eos(nxdi_cpu, carbon_tiny_checkpoint, tmp_path, hf_reference, padded_batch):
    """Defect 2: with on-device sampling the adapter takes the device's tokens, so min_new_tokens
    cannot stop config.json's EOS from ending a row: here the EOS id is a token greedy decoding
    emits at step 3 of row 0, and every row must still get all its tokens."""
    expected = hf_reference.generate(padded_batch, STEPS).tokens
    checkpoint = tmp_path / "eos-checkpoint"
    # a checkpoint derived on purpose: without the harness's manifest, which records the original config.json
    shutil.copytree(carbon_tiny_checkpoint, checkpoint, ignore=shutil.ignore_patterns("model.safetensors", MANIFEST_FILE))
    (checkpoint / "model.safetensors").symlink_to(carbon_tiny_checkpoint / "model.safetensors")
    config = json.loads((checkpoint / "config.json").read_text())
    config["eos_token_id"] = int(expected[0, 2])
    (checkpoint / "config.json").write_text(json.dumps(config))
    engine = NeuronEngine(checkpoint, SMOKE_BS3, "carbon-tiny", hardware="cpu", cpu=True)
    try:
        assert torch.equal(engine.generate(padded_batch, STEPS).tokens, expected)
    finally:
        engine.close()


def test_speed_is_measured_on_the_build_without_output_logits(nxdi_cpu_engine, padded_batch):
    """Defect 3: output_logits gathers fp32 logits every step; timings come from the reference
    build, teacher-forced logits from a separate output-logits build."""
    engine = nxdi_cpu_engine(SMOKE_BS3)
    assert engine.model.neuron_config.output_logits is False
    assert "output_logits" not in engine.kwargs
    engine.reset()
    assert engine._prefill(padded_batch).logits is None  # tokens only: nothing gathered
    assert engine.logits_model().neuron_config.output_logits is True
    assert engine.logits_model() is not engine.model


def test_latency_hooks_time_both_submodels_and_reset_forgets(nxdi_cpu_engine, padded_batch):
    engine = nxdi_cpu_engine(SMOKE_BS3)
    first = engine.generate(padded_batch, STEPS)
    assert first.cte_ms > 0 and len(first.tkg_ms) == STEPS - 1 and all(ms > 0 for ms in first.tkg_ms)
    engine.reset()
    assert torch.equal(engine.generate(padded_batch, STEPS).tokens, first.tokens)


def test_build_identity_is_recorded_and_smoke_generated(nxdi_cpu_engine):
    """Defect 4: builds published under one version differ (0.9.0 at c63afe0 cannot generate):
    the digest of the sources this process imported is recorded."""
    build = nxdi_cpu_engine(SMOKE_BS3).info.extra["nxdi_build"]
    assert len(build["nxdi_sha256"]) == 16 and len(build["nxd_sha256"]) == 16
    assert Path(build["nxdi_path"]).name == "neuronx_distributed_inference"


@pytest.mark.slow
def test_a_build_that_cannot_generate_fails_at_load(nxdi_cpu, carbon_tiny_checkpoint, tmp_path):
    """Defect 4: NxDI 0.9.0 at commit c63afe0 reads an undefined ``tensor_capture_hook`` in the
    adapter. The same break, made in a copy of this NxDI's sources, must stop the engine at load
    with a clear error, not in the middle of a benchmark."""
    source = Path(nxdi_cpu.nxdi_path).parent
    broken = tmp_path / "neuronx-distributed-inference" / "src"
    shutil.copytree(source, broken)
    adapter = broken / "neuronx_distributed_inference" / "utils" / "hf_adapter.py"
    text = adapter.read_text()
    line = '        tensor_capture_hook = kwargs.get("tensor_capture_hook", None)\n'
    assert line in text
    adapter.write_text(text.replace(line, ""))
    nxd = Path(nxdi_cpu.nxd_path).parent
    shutil.copytree(nxd, tmp_path / "neuronx-distributed" / "src")
    code = ("import sys; from pathlib import Path; from harness.backends.neuron.engine import NeuronEngine; "
            "from harness.core.spec import get_shape; "
            f"NeuronEngine(Path({str(carbon_tiny_checkpoint)!r}), get_shape('smoke'), 'carbon-tiny', hardware='cpu', "
            f"cpu=True, nxdi_source=Path({str(tmp_path)!r}))")
    env = {k: v for k, v in os.environ.items() if k != "MASTER_PORT"}  # this process holds its gloo port
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env)
    assert r.returncode != 0
    assert "the installed NxDI build cannot generate (NameError: name 'tensor_capture_hook' is not defined)" in r.stderr


def test_kv_cache_fp8_variant_stores_the_cache_in_fp8(nxdi_cpu, carbon_tiny_checkpoint):
    """Defect 5: ``kv_cache_quant`` alone only adds a compiler flag; the cache dtype comes from
    ``kv_quant_config``. Built in NxDI's CPU mode (writing an fp8 cache needs the device)."""
    from harness.backends.neuron.artifacts import environment
    from harness.backends.neuron.config import variant_env
    from harness.backends.neuron.engine import nxdi_model

    def cache_dtypes(kwargs: dict) -> set:
        with environment(variant_env(["kv-cache-fp8"])):
            model = nxdi_model(carbon_tiny_checkpoint, kwargs)
            model.to_cpu()
        return {p.dtype for p in model.context_encoding_model.model.kv_mgr.past_key_values}

    kwargs = neuron_config_kwargs("carbon-tiny", SMOKE_BS3, ["kv-cache-fp8"], on_cpu=True)
    assert cache_dtypes(kwargs) == {torch.float8_e4m3fn}
    assert cache_dtypes({**kwargs, "kv_quant_config": None}) == {torch.float32}  # the flag alone: no fp8
    with pytest.raises(BackendError, match="NxDI's CPU mode cannot run variants"):
        NeuronEngine(carbon_tiny_checkpoint, SMOKE_BS3, "carbon-tiny", variants=["kv-cache-fp8"], hardware="cpu",
                     cpu=True)


def neuron_config_attributes(kwargs: dict) -> dict:
    from neuronx_distributed_inference.models.config import NeuronConfig, to_dict

    return {k: json.dumps(v, sort_keys=True, default=str) for k, v in to_dict(NeuronConfig(**kwargs)).items()}


@pytest.mark.parametrize("variant", sorted(COMPILE_VARIANTS))
def test_every_variant_changes_what_it_names(nxdi_cpu, variant):
    """Defect 6: a variant that builds the baseline's NeuronConfig measures nothing (``topk-kernel``
    did); each one changes every attribute it declares in NxDI's real NeuronConfig (and may change
    what NxDI derives from them, e.g. ``tile_cc`` for the MLP kernel)."""
    base = neuron_config_attributes(neuron_config_kwargs("carbon-500m", "report-bs1"))
    changed = neuron_config_attributes(neuron_config_kwargs("carbon-500m", "report-bs1", [variant]))
    differ = {k for k in base.keys() | changed.keys() if base.get(k) != changed.get(k)}
    assert set(COMPILE_VARIANTS[variant].kwargs) <= differ, differ


@pytest.fixture(scope="module")
def nxdi_attention(nxdi_cpu, carbon_tiny_checkpoint):
    """A real attention module of NxDI's Llama, as ``to_cpu()`` builds it from NxDI's own configs
    (nothing generates, so this runs on a release whose adapter cannot)."""
    import torch
    from neuronx_distributed_inference.modules.attention.attention_base import NeuronAttentionBase

    from harness.backends.neuron.engine import nxdi_model
    from harness.core.ports import free_port

    if not torch.distributed.is_initialized():
        os.environ["MASTER_PORT"] = str(free_port())
    model = nxdi_model(carbon_tiny_checkpoint, neuron_config_kwargs("carbon-tiny", "smoke", on_cpu=True))
    model.to_cpu()
    return next(m for m in model.context_encoding_model.model.modules() if isinstance(m, NeuronAttentionBase))


@pytest.mark.parametrize("q_len", [32, 160, 256, 512, 768, 1024, 1536, 2048, 4096, 8192])
@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("enabled", [None, True, False])
def test_baseline_flash_attention_is_nxdis_choice(nxdi_attention, q_len, lnc, enabled):
    """Defect 6: the baseline is not kernel-free: at LNC 2 NxDI selects the flash kernel for CTE
    buckets that are multiples of 256; ``flash_attention_strategy`` says so, checked here against
    NxDI's own ``get_flash_attention_strategy`` on its real attention module, with only the two
    settings under test changed."""
    import copy

    attention = copy.copy(nxdi_attention)
    attention.attn_kernel_enabled, attention.logical_nc_config = enabled, lnc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NxDI warns when LNC 2 disables the kernel
        nxdi = type(nxdi_attention).get_flash_attention_strategy(attention, q_len, has_attention_mask=True)
    expected = {"NONE": "none", "SHARDED_KERNEL": "sharded-kernel", "UNSHARDED_KERNEL": "unsharded-kernel"}[nxdi.name]
    assert flash_attention_strategy(q_len, lnc, enabled) == expected


def test_pad_id_goes_to_the_inference_config(nxdi_cpu, nxdi_cpu_engine):
    """Defect 8: NeuronConfig drops ``pad_token_id`` ("Unexpected keyword arguments"); it belongs
    to the inference config."""
    from neuronx_distributed_inference.models.config import NeuronConfig

    kwargs = neuron_config_kwargs("carbon-tiny", "smoke", on_cpu=True)
    with capture_neuron_logs() as lines:
        NeuronConfig(**kwargs)
        NeuronConfig(**kwargs, pad_token_id=PAD_TOKEN_ID)  # how the backend passed it before
    assert [line for line in lines if "Unexpected keyword arguments" in line] == [
        f"NeuronConfig init: Unexpected keyword arguments: {{'pad_token_id': {PAD_TOKEN_ID}}}"]
    assert inference_config_kwargs() == {"pad_token_id": PAD_TOKEN_ID}
    assert nxdi_cpu_engine(SMOKE_BS3).model.config.pad_token_id == PAD_TOKEN_ID


def test_sharded_weights_are_saved_with_the_artifact(nxdi_cpu):
    """Defect 9: without ``save_sharded_checkpoint`` every load re-shards the weights."""
    from neuronx_distributed_inference.models.config import NeuronConfig

    assert NeuronConfig(**neuron_config_kwargs("carbon-3b", "report-bs1")).save_sharded_checkpoint is True


def test_cpu_tier_logs_the_gqa_override(nxdi_cpu_engine):
    """tp 1 with carbon-tiny's 2 KV heads: NxDI logs the CONVERT_TO_MHA override, as the plan says."""
    info = nxdi_cpu_engine(SMOKE_BS3).info
    assert info.extra["attention_sharding"] == info.extra["attention_sharding_planned"] == CONVERT_TO_MHA
    assert {(r.tp_degree, r.kv_heads) for r in nxdi_cpu_engine(SMOKE_BS3).sharding_log} == {(1, 2)}


def test_adapter_kwargs_are_accepted_by_nxdis_adapter(nxdi_cpu_engine, padded_batch):
    """The exact kwargs the backend passes, through NxDI's adapter: all rows, all tokens."""
    engine = nxdi_cpu_engine(SMOKE_BS3)
    out = engine.adapter.generate(**adapter_generate_kwargs(padded_batch, 4))
    assert out.shape == (3, padded_batch.input_ids.shape[1] + 4)


def test_nxdi_logs_are_captured_not_lost(nxdi_cpu):
    with capture_neuron_logs() as lines:
        logging.getLogger("Neuron").warning("probe")
    assert lines == ["probe"]


def test_one_token_prompts_are_refused(nxdi_cpu_engine):
    """NxDI 0.9 reads a pad slot for a one-token prompt; the engine refuses it rather than measure
    a wrong first token."""
    with pytest.raises(BackendError, match=r"rows \[0\] have a 1-token prompt"):
        nxdi_cpu_engine(SMOKE_BS3).generate(Batch.from_ids([[151669], [151669, 151672]]), 2)


def test_nxdi_still_reads_a_pad_slot_for_one_token_prompts(nxdi_cpu_engine, hf_reference):
    """The NxDI behaviour behind that refusal, through NxDI's own adapter. When a new NxDI release
    fixes it, this fails: then lift ``MIN_PROMPT_TOKENS`` in harness/backends/neuron/engine.py."""
    from harness.backends.neuron.engine import adapter_generate_kwargs, pad_rows

    engine = nxdi_cpu_engine(SMOKE_BS3)
    batch = Batch.from_ids([[151669], [151669, 151672, 151673]])
    out = engine.adapter.generate(**adapter_generate_kwargs(pad_rows(batch, 3), 2))[:2, -2:]
    expected = hf_reference.generate(batch, 2).tokens
    assert torch.equal(out[1], expected[1])  # the two-token row is right
    assert not torch.equal(out[0], expected[0]), "NxDI now handles one-token prompts: lift MIN_PROMPT_TOKENS"


def test_header_and_manifest_say_what_was_stubbed(nxdi_cpu, carbon_session):
    from harness.session.manifest import run_manifest
    from harness.session.preflight import nxdi_tier_line

    line = nxdi_tier_line(carbon_session.config)
    assert f"NxDI from {nxdi_cpu.nxdi_path}" in line
    assert f"stubbed Neuron-only packages: {', '.join(nxdi_cpu.stubbed)}" in line
    manifest = run_manifest(carbon_session)["nxdi"]
    assert manifest["stubbed_packages"] == list(nxdi_cpu.stubbed) and len(manifest["nxdi_sha256"]) == 16
    assert manifest["nxdi_version"].count(".") == 2  # from the package's _version.py
