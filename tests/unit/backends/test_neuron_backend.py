"""The NxDI backend's pure logic, on a machine without Neuron: NeuronConfig kwargs, artifact keys,
cache validation and locking with real files and processes, GQA log parsing, core assignment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.neuron.artifacts import (
    KEY_FILE,
    check_sharding,
    compile_env_key,
    compile_work_dir,
    compiled_dir_problem,
    environment,
    load_sharding_log,
    neuron_artifact_key,
    observed_strategy,
    package_digest,
    parse_sharding_log,
    save_sharding_log,
)
from harness.backends.neuron.config import (
    COMPILE_VARIANTS,
    baseline_kernels,
    check_compile_variants,
    neuron_config_kwargs,
    variant_env,
)
from harness.backends.neuron.batching import adapter_generate_kwargs, decode_attention_mask, generated_tokens, pad_rows
from harness.backends.neuron.host import neuron_unavailable_reason, visible_cores
from harness.core.errors import BackendError
from harness.core.plan import CONVERT_TO_MHA, REPLICATE, attention_sharding
from harness.core.spec import MODELS, SHAPES
from harness.core.storage import build_once
from tests.helpers import REPO, run_pytest
from tests.unit.conftest import run_in_processes

pytestmark = pytest.mark.unit

SAMPLING = {"top_k": 1, "top_p": 1.0, "temperature": 1.0, "do_sample": False}


def reference_kwargs(bs, ctx, seq, new):
    return {"tp_degree": 4, "batch_size": bs, "ctx_batch_size": bs, "max_context_length": ctx, "seq_len": seq,
            "max_length": seq, "max_new_tokens": new, "torch_dtype": "bfloat16", "logical_nc_config": 2,
            "enable_bucketing": True, "context_encoding_buckets": [ctx], "token_generation_buckets": [seq],
            "on_device_sampling_config": SAMPLING, "padding_side": "right", "fused_qkv": False,
            "save_sharded_checkpoint": True}


@pytest.mark.parametrize("shape,expected", [
    ("report-bs1", reference_kwargs(1, 256, 512, 180)),
    ("smoke", reference_kwargs(1, 32, 160, 128)),
    ("a100-style-bs16", reference_kwargs(16, 256, 512, 170)),
    ("dna-suite-bs1", reference_kwargs(1, 256, 512, 180)),
])
@pytest.mark.parametrize("model", ["carbon-500m", "carbon-3b", "carbon-8b"])
def test_kwargs_are_what_the_reference_runs_compiled(model, shape, expected):
    assert neuron_config_kwargs(model, shape) == expected
    assert neuron_config_kwargs(MODELS[model], SHAPES[shape]) == expected


def test_variants_of_the_optimisation_pass():
    kw = neuron_config_kwargs("carbon-3b", "a100-style-bs16", ["qkv-kernel", "kv-cache-fp8", "mlp-kernel",
                                                               "no-flash-attention"])
    assert kw["fused_qkv"] and kw["qkv_kernel_enabled"] and kw["kv_cache_quant"] and kw["mlp_kernel_enabled"]
    assert kw["kv_quant_config"] == {"direct_cast": True} and kw["attn_kernel_enabled"] is False
    assert neuron_config_kwargs("carbon-3b", "a100-style-bs16")["on_device_sampling_config"] == SAMPLING  # not mutated
    assert set(COMPILE_VARIANTS) == {"fused-qkv", "qkv-kernel", "kv-cache-fp8", "mlp-kernel", "no-flash-attention"}
    assert variant_env(["kv-cache-fp8"]) == {"XLA_HANDLE_SPECIAL_SCALAR": "1", "UNSAFE_FP8FNCAST": "1"}


@pytest.mark.parametrize("name", ["topk-kernel", "nki-cte-mlp"])
def test_retired_variants_say_why(name):
    with pytest.raises(BackendError, match=f"variant '{name}' was removed: "):
        check_compile_variants([name])


@pytest.mark.parametrize("shape,lnc,expected", [
    ("report-bs1", 2, "sharded-kernel"),  # CTE bucket 256 at LNC 2: the reference runs had flash attention
    ("smoke", 2, "none"),  # bucket 32
    ("report-bs1", 1, "none"),
])
def test_the_baselines_kernels_are_explicit(shape, lnc, expected, monkeypatch):
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    kernels = baseline_kernels({**neuron_config_kwargs("carbon-3b", shape), "logical_nc_config": lnc})
    assert kernels == {"cte_flash_attention": expected, "qkv_kernel": False, "mlp_kernel": False, "top_k_kernel": True,
                       "kv_cache_dtype": "bfloat16", "logical_nc_config": lnc}
    off = baseline_kernels(neuron_config_kwargs("carbon-3b", shape, ["no-flash-attention"]))
    assert off["cte_flash_attention"] == "none"
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")  # overrides the kwarg, as NxDI's _get_lnc does
    assert baseline_kernels(neuron_config_kwargs("carbon-3b", "report-bs1"))["cte_flash_attention"] == "none"


def test_cpu_mode_kwargs_are_the_reference_with_what_cpu_mode_requires():
    device = neuron_config_kwargs("carbon-tiny", "smoke")
    cpu = neuron_config_kwargs("carbon-tiny", "smoke", on_cpu=True)
    assert {k: v for k, v in cpu.items() if device.get(k) != v} == {
        "on_cpu": True, "tp_degree": 1, "max_context_length": 160, "context_encoding_buckets": [160],
        "torch_dtype": "float32", "attn_kernel_enabled": False}


def test_decode_mask_has_ones_exactly_below_each_position():
    mask = decode_attention_mask(torch.tensor([[3], [1], [5]]), 5)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_compile_env_enters_the_key_and_each_build_gets_its_own_work_dir(tmp_path):
    assert compile_env_key([], {"NEURON_LOGICAL_NC_CONFIG": "1", "HOME": "/root"}) == {"NEURON_LOGICAL_NC_CONFIG": "1"}
    assert compile_env_key(["kv-cache-fp8"], {})["UNSAFE_FP8FNCAST"] == "1"
    kw = neuron_config_kwargs("carbon-3b", "report-bs1")
    keys = {neuron_artifact_key("f00d", SHAPES["report-bs1"], kw, VERSIONS, env).digest
            for env in ({}, {"NEURON_LOGICAL_NC_CONFIG": "1"}, {"NEURON_LOGICAL_NC_CONFIG": "2"})}
    assert len(keys) == 3
    a, b = tmp_path / ".key.123.partial", tmp_path / ".key.456.partial"
    assert compile_work_dir(a) != compile_work_dir(b) and compile_work_dir(a).parent == tmp_path


def test_environment_sets_and_restores(monkeypatch):
    monkeypatch.setenv("CARBON_PROBE_A", "old")
    monkeypatch.delenv("CARBON_PROBE_B", raising=False)
    with environment({"CARBON_PROBE_A": "new", "CARBON_PROBE_B": "1"}):
        assert (os.environ["CARBON_PROBE_A"], os.environ["CARBON_PROBE_B"]) == ("new", "1")
    assert os.environ["CARBON_PROBE_A"] == "old" and "CARBON_PROBE_B" not in os.environ


def test_package_digest_changes_with_the_source(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    before = package_digest(pkg)
    assert package_digest(pkg) == before
    (pkg / "a.py").write_text("x = 2\n")
    assert package_digest(pkg) != before


def test_neuron_extra_states_a_range_that_admits_the_releases_to_qualify():
    """Both Neuron libraries are named (NxD unpinned let pip pair any NxD with NxDI), and the range
    admits SDK 2.28 and 2.29 and a later candidate, so a release check can install one beside it."""
    import tomllib

    from packaging.requirements import Requirement

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())
    reqs = {r.name: r.specifier for r in map(Requirement, extra["project"]["optional-dependencies"]["neuron"])}
    assert set(reqs) == {"neuronx-distributed-inference", "neuronx-distributed", "torch-neuronx", "neuronx-cc"}
    for name, versions in {"neuronx-distributed-inference": ("0.8.0", "0.9.0", "0.10.0"),
                           "neuronx-distributed": ("0.17.0", "0.18.0", "0.19.0"),
                           "torch-neuronx": ("2.8.0", "2.9.0", "2.10.0")}.items():
        assert all(reqs[name].contains(v) for v in versions), (name, reqs[name])


def test_module_imports_without_nxdi():
    code = ("import sys, harness.backends.neuron.engine, harness.backends.neuron.config as n; "
            "assert not any(m.startswith(('neuronx', 'torch_neuronx')) for m in sys.modules); print(n.COMPILE_VARIANTS)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def stated_host(tmp_path: Path, modules: set[str], devices: tuple[str, ...]):
    """A host stated explicitly, not the machine the test runs on: which Neuron modules import
    (a find_spec answering only for them) and a device directory holding ``devices``."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in devices:
        (dev / name).write_text("")
    return (lambda module: object() if module in modules else None), dev


NXDI = "neuronx_distributed_inference"


@pytest.mark.parametrize("modules,devices,expected", [
    (set(), ("neuron0",), "torch_neuronx is not importable"),
    ({"torch_neuronx"}, ("neuron0",), f"{NXDI} is not importable"),
    ({"torch_neuronx", NXDI}, ("neuronx",), "/neuron* device: run on a Trainium2 instance"),
    ({"torch_neuronx", NXDI}, (), "/neuron* device: run on a Trainium2 instance"),
    ({"torch_neuronx", NXDI}, ("neuron0",), None),
], ids=["bare-cpu", "torch-neuronx-only", "stack-no-device-name", "stack-no-device", "trn2"])
def test_unavailable_reason_names_what_is_missing(tmp_path, modules, devices, expected):
    find_spec, dev = stated_host(tmp_path, modules, devices)
    reason = neuron_unavailable_reason(find_spec, dev)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason
        assert "is not importable" in expected or f"no {dev}/neuron* device" in reason


VERSIONS = {"neuronx-distributed-inference": "0.9.0", "neuronx-cc": "2.22", "torch-neuronx": "2.9.0"}


def key_for(**changes):
    kw = {**neuron_config_kwargs("carbon-3b", "report-bs1"), **changes.pop("kwargs", {})}
    return neuron_artifact_key(changes.pop("fp", "f00d"), SHAPES["report-bs1"], kw, {**VERSIONS, **changes})


def test_artifact_key_covers_checkpoint_kwargs_and_versions():
    base = key_for()
    assert base.digest == key_for().digest
    assert len({base.digest, key_for(fp="beef").digest, key_for(kwargs={"fused_qkv": True}).digest,
                key_for(**{"neuronx-cc": "2.23"}).digest}) == 4


def fake_compile(tmp: Path, key) -> None:
    """Stands in for NxDI's compile, which cannot run here: the files it leaves behind."""
    (tmp / "neuron_config.json").write_text(json.dumps({"neuron_config": key.options["neuron_config"]}))
    (tmp / "model.pt").write_bytes(b"traced")
    (tmp / "weights").mkdir()
    for rank in range(key.options["neuron_config"]["tp_degree"]):
        (tmp / "weights" / f"tp{rank}_sharded_checkpoint.safetensors").write_bytes(b"w")
    (tmp / KEY_FILE).write_text(key.canonical())


def test_complete_fake_artifact_is_accepted(tmp_path):
    key = key_for()
    fake_compile(tmp_path, key)
    assert compiled_dir_problem(tmp_path, key) is None


@pytest.mark.parametrize("damage,problem", [
    (lambda d: (d / "model.pt").unlink(), "model.pt is missing or empty"),
    (lambda d: (d / "model.pt").write_bytes(b""), "model.pt is missing or empty"),
    (lambda d: (d / "neuron_config.json").write_text("{"), "neuron_config.json is not valid JSON"),
    (lambda d: (d / "neuron_config.json").unlink(), "neuron_config.json is missing"),
    (lambda d: (d / KEY_FILE).write_text('{"other": 1}'), "names a different artifact key"),
    (lambda d: [(d / "weights" / f"tp{r}_sharded_checkpoint.safetensors").unlink() for r in (1, 2, 3)],
     "lacks the sharded checkpoints of ranks [1, 2, 3]"),
    (lambda d: __import__("shutil").rmtree(d / "weights"), "built with save_sharded_checkpoint"),
])
def test_damaged_artifacts_are_named(tmp_path, damage, problem):
    key = key_for()
    fake_compile(tmp_path, key)
    damage(tmp_path)
    assert problem in compiled_dir_problem(tmp_path, key)


def _worker(dest: str, log: str) -> None:
    key = key_for()

    def build(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write("compile\n")
        fake_compile(tmp, key)

    def validate(path: Path) -> None:
        problem = compiled_dir_problem(path, key)
        if problem:
            raise ValueError(problem)

    build_once(Path(dest), build, validate)


def test_fake_compile_runs_once_across_processes_and_a_corrupt_cache_is_rebuilt(tmp_path):
    dest, log = tmp_path / "neuron" / key_for().digest, tmp_path / "log"
    assert run_in_processes(_worker, (str(dest), str(log)), 3) == [0, 0, 0]
    assert log.read_text() == "compile\n"
    (dest / "model.pt").write_bytes(b"")  # a crashed writer, a full disk ...
    _worker(str(dest), str(log))
    assert log.read_text() == "compile\ncompile\n" and (dest / "model.pt").read_bytes() == b"traced"


# The exact warning of NxDI 0.9 modules/attention/gqa.py determine_sharding_strategy.
def nxdi_warning(tp: int, kv: int) -> str:
    return (f"TP degree ({tp}) and KV heads ({kv}) are not divisible. Overriding attention sharding strategy to "
            "GQA.CONVERT_TO_MHA!")


@pytest.mark.parametrize("model", ["carbon-500m", "carbon-3b", "carbon-8b"])
def test_compile_log_agrees_with_the_plan_at_tp4(model):
    spec = MODELS[model]
    planned = attention_sharding(spec.num_attention_heads, spec.num_key_value_heads, 4)
    log = ["Compiling ...", nxdi_warning(4, spec.num_key_value_heads)] if planned.fallback else ["Compiling ..."]
    records = parse_sharding_log(log)
    assert observed_strategy(records) == (CONVERT_TO_MHA if model != "carbon-3b" else REPLICATE)
    assert check_sharding(planned, records) is None


def test_disagreeing_log_is_reported():
    planned = attention_sharding(32, 4, 4)  # Carbon-3B: no fallback expected
    message = check_sharding(planned, parse_sharding_log([nxdi_warning(4, 4)]))
    assert message == ("NxDI sharded attention as convert-to-mha but the plan predicted replicate-to-tp-degree "
                       "(tp=4, kv heads=4)")
    assert "tp=8" in check_sharding(attention_sharding(16, 8, 4), parse_sharding_log([nxdi_warning(8, 8)]))


@pytest.mark.parametrize("worker,cores", [("master", "0-15"), ("gw0", "0-15"), ("gw1", "16-31"), ("gw3", "48-63")])
def test_visible_cores_are_disjoint_ranges(worker, cores):
    assert visible_cores(worker, 16, 64) == cores


def test_visible_cores_single_core_and_overflow():
    assert visible_cores("gw5", 1, 64) == "5"
    with pytest.raises(ValueError, match="worker gw4 needs cores 64-79 but the host has 64 logical cores: "
                                         r"with --carbon-cores-per-worker 16 run at most 4 workers \(-n 4\)"):
        visible_cores("gw4", 16, 64)
    with pytest.raises(ValueError, match="not an xdist worker id"):
        visible_cores("worker-1", 4, 64)


def test_xdist_workers_get_disjoint_cores(tmp_path, carbon_cache_dir):
    """Real pytest-xdist workers: each sees its own NEURON_RT_VISIBLE_CORES."""
    pytest.importorskip("xdist", reason="needs pytest-xdist: pip install -e '.[test]'")
    out = tmp_path / "seen"
    out.mkdir()
    (tmp_path / "test_cores.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_record(i):\n"
        f"    open(os.path.join({str(out)!r}, os.environ['PYTEST_XDIST_WORKER']), 'w')"
        ".write(os.environ['NEURON_RT_VISIBLE_CORES'])\n")
    r = run_pytest("-n", "2", "-q", "--carbon-cores-per-worker", "16", "--carbon-hardware", "trn2.48xlarge",
                   "--rootdir", str(tmp_path), str(tmp_path / "test_cores.py"), cache_dir=carbon_cache_dir, cwd=tmp_path,
                   timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = {f.name: f.read_text() for f in out.iterdir()}
    assert seen == {"gw0": "0-15", "gw1": "16-31"}


def test_pad_rows_fills_the_static_batch(carbon_tokenizer):
    batch = Batch.from_prompts(carbon_tokenizer, ["<dna>ACGTAC", "<dna>GGGGGGTTTTTT"])
    full = pad_rows(batch, 4)
    assert full.input_ids.shape == (4, 3)
    assert full.input_ids[2:].tolist() == [batch.input_ids[1].tolist()] * 2
    assert pad_rows(full, 4) is full
    with pytest.raises(BackendError, match="batch of 4 prompts exceeds the compiled batch_size=2"):
        pad_rows(full, 2)


def test_adapter_kwargs_force_exact_lengths(carbon_tokenizer):
    batch = Batch.from_prompts(carbon_tokenizer, ["<dna>ACGTAC"])
    kw = adapter_generate_kwargs(batch, 180)
    assert (kw["max_new_tokens"], kw["do_sample"], kw["pad_token_id"], kw["eos_token_id"]) == (180, False, 151643, [])
    assert kw["input_ids"] is batch.input_ids and kw["attention_mask"] is batch.attention_mask


def test_generated_tokens_are_split_from_the_prompt():
    out = torch.arange(4 * 7).reshape(4, 7)
    assert generated_tokens(out, 3, 2, 4).tolist() == [[3, 4, 5, 6], [10, 11, 12, 13]]
    with pytest.raises(BackendError, match="generated 4 tokens per row, expected exactly 5"):
        generated_tokens(out, 3, 2, 5)


def test_sharding_log_is_kept_with_the_artifact(tmp_path):
    records = parse_sharding_log([nxdi_warning(4, 8)])
    save_sharding_log(tmp_path / "log.json", records)
    assert load_sharding_log(tmp_path / "log.json") == records
    save_sharding_log(tmp_path / "none.json", [])
    assert load_sharding_log(tmp_path / "none.json") == []  # compiled, no override: REPLICATE
    assert load_sharding_log(tmp_path / "missing.json") is None  # unknown: fall back to the load log
