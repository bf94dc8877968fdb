"""Run-level state of a harness session: what to measure, on what, and the engines built once.

Parsed from pytest options once at configure time so that bad input (an unknown model, a
thresholds file with a typo, a backend that cannot run here) stops the session before any test,
with one message.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends import BACKENDS, make_engine
from harness.backends.base import BackendError, Engine
from harness.checkpoint import cached_checkpoint, inspect_checkpoint, stderr_progress
from harness.gates import Threshold, load_thresholds
from harness.hardware import HardwareProfile, complete_profile, cpu_model, detect_profile_name, get_profile
from harness.spec import MODELS, RunShape, SpecError, get_model, get_shape
from harness.tokenizer import CarbonTokenizer
from harness.versions import installed_versions


@dataclass(frozen=True)
class ModelRef:
    """A model to measure: its label (for thresholds and reports) and where its checkpoint is,
    or None when it is a synthetic one still to be built into the cache."""

    label: str
    path: Path | None
    real: bool


def identify_model(config: dict[str, Any], fallback: str) -> str:
    """The spec name whose architecture a config.json has, so thresholds apply to real checkpoints."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
    for spec in MODELS.values():
        if all(config.get(k) == getattr(spec, k) for k in keys):
            return spec.name
    return fallback


def resolve_model(value: str, model_root: Path | None) -> ModelRef:
    """A name from spec (real checkpoint under ``model_root`` if present, else synthetic) or a path."""
    try:
        spec = get_model(value)
    except SpecError:
        spec = None
    if spec is not None:
        if model_root is not None:
            candidate = model_root / spec.hf_name
            if candidate.is_dir():
                return ModelRef(spec.name, candidate, True)
        return ModelRef(spec.name, None, False)
    path = Path(value).expanduser()
    if not path.exists():
        raise ValueError(f"--carbon-model {value!r} is neither a known model ({', '.join(MODELS)}) nor an existing "
                         "checkpoint directory")
    info = inspect_checkpoint(path, verify=True)
    return ModelRef(identify_model(info.config, path.name), path, not info.synthetic)


def resolve_draft(value: str, model_root: Path | None) -> ModelRef:
    """A speculative draft: ``self`` (the target drafts for itself) or what ``--carbon-model`` accepts."""
    from harness.speculative import SELF_DRAFT

    if value == SELF_DRAFT:
        return ModelRef(SELF_DRAFT, None, False)
    try:
        return resolve_model(value, model_root)
    except ValueError as exc:
        message = str(exc).replace(f"--carbon-model {value!r}", f"--carbon-draft {value!r}", 1)
        raise ValueError(f"{message} (or {SELF_DRAFT!r}: the target as its own draft)") from None


@dataclass
class HarnessConfig:
    backend: str = "hf"
    models: list[ModelRef] = field(default_factory=list)
    shapes: list[RunShape] = field(default_factory=list)
    device: str = "auto"
    dtype: str = "auto"
    cache_dir: Path = Path("~/.cache/carbon-harness").expanduser()
    thresholds: list[Threshold] = field(default_factory=list)
    threshold_files: list[str] = field(default_factory=list)
    hardware_name: str = "cpu"
    runs: int = 5
    warmup: int = 1
    model_root: Path | None = None
    variants: tuple[str, ...] = ()
    cores_per_worker: int | None = None
    neuron_cpu: bool = False  # the neuron backend in NxDI's CPU mode
    nxdi_source: Path | None = None  # NxDI from a source checkout instead of the installed package
    drafts: list[ModelRef] = field(default_factory=list)  # speculative drafts (label "self": the target)
    speculation_length: int = 4
    endpoint: str | None = None  # a running OpenAI-compatible server (--carbon-endpoint)
    served_model: str | None = None
    serve: str | None = None  # a server the session starts itself (--carbon-serve vllm)
    serve_timeout_s: float = 600.0


def parse_backend(value: str) -> str:
    if value not in BACKENDS:
        raise ValueError(f"--carbon-backend {value!r}; known backends: {', '.join(BACKENDS)}")
    return value


def assign_worker_cores(config: HarnessConfig, worker_id: str) -> str | None:
    """On a multi-chip host each pytest-xdist worker takes a disjoint NeuronCore range, set in
    NEURON_RT_VISIBLE_CORES before the runtime starts; returns the range (None if not asked)."""
    if not config.cores_per_worker:
        return None
    from harness.backends.neuron import visible_cores

    total = get_profile(config.hardware_name).logical_cores
    if not total:
        raise ValueError(f"--carbon-cores-per-worker needs a hardware profile with logical_cores; "
                         f"{config.hardware_name!r} has none (pass --carbon-hardware trn2.48xlarge)")
    cores = visible_cores(worker_id, config.cores_per_worker, total)
    os.environ["NEURON_RT_VISIBLE_CORES"] = cores
    return cores


def worker_cpu_threads(cpus: int, workers: int) -> int:
    """CPU threads per pytest-xdist worker: the machine's CPUs shared out, at least one each."""
    if cpus < 1 or workers < 1:
        raise ValueError(f"cpus={cpus} and workers={workers} must be at least 1")
    return max(1, cpus // workers)


def limit_worker_threads(environ: dict[str, str] | None = None) -> int | None:
    """In a pytest-xdist worker, cap torch's intra-op threads (and OMP_NUM_THREADS, for what the
    worker starts) at this worker's share of the CPUs; returns the cap (None outside xdist, or where
    the user set OMP_NUM_THREADS).

    Why: each worker's torch otherwise starts one OpenMP thread per CPU, so ``-n 2`` on 2 CPUs runs 4
    spinning threads on 2 cores: the smoke CTE ranged from 13 to 244 ms (3.2-3.4 ms with one thread
    each), and a 24 ms speculative run took 0.3-0.8 s next to a busy neighbour."""
    env = os.environ if environ is None else environ
    workers = env.get("PYTEST_XDIST_WORKER_COUNT")
    if not env.get("PYTEST_XDIST_WORKER") or not workers or env.get("OMP_NUM_THREADS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = worker_cpu_threads(cpus, int(workers))
    env["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    return threads


def check_backend_available(config: HarnessConfig) -> None:
    """Fail the session at start, once, when the backend cannot run on this machine. For NxDI's CPU
    mode this imports NxDI (stubbing only the Neuron-only packages), so an API break of a candidate
    NxDI release, or a transformers it does not support, stops the session with its ImportError."""
    if config.backend == "openai" and not (config.endpoint or config.serve):
        raise BackendError("--carbon-backend openai needs --carbon-endpoint URL of a running server "
                           "or --carbon-serve vllm")
    if config.backend != "neuron":
        return
    if config.neuron_cpu:
        import_nxdi_for_cpu(config.nxdi_source)
        return
    from harness.backends.neuron import neuron_unavailable_reason

    reason = neuron_unavailable_reason()
    if reason:
        raise BackendError(f"--carbon-backend neuron cannot run here: {reason} (or add --carbon-neuron-cpu to run "
                           "NxDI's CPU mode)")


NXDI_CPU_MODULES = ("neuronx_distributed_inference.models.config",
                    "neuronx_distributed_inference.models.llama.modeling_llama",
                    "neuronx_distributed_inference.utils.hf_adapter")


def import_nxdi_for_cpu(source: Path | None) -> Any:
    """Import NxDI for its CPU mode (from ``source`` or the installed package) and return where it
    came from; any failure is one BackendError naming NxDI's location, the import error and the
    transformers version (NxDI 0.9 pins transformers==4.57.*)."""
    import importlib

    from harness.backends.neuron_stubs import NeuronImportError, install

    try:
        where = install(source)
        for module in NXDI_CPU_MODULES:
            importlib.import_module(module)
    except NeuronImportError as exc:
        raise BackendError(str(exc)) from None
    except Exception as exc:  # an API break of this NxDI build or of its dependencies
        versions = installed_versions(("transformers",))
        raise BackendError(f"NxDI from {source or 'the installed package'} cannot be imported for its CPU mode: "
                           f"{type(exc).__name__}: {exc} (transformers {versions.get('transformers')} is installed; "
                           "NxDI 0.9 pins transformers==4.57.*)") from None
    return where


def nxdi_tier_line(config: HarnessConfig) -> str:
    """The report-header line on the NxDI CPU tier: what runs it, or what would enable it."""
    from harness.backends.neuron_stubs import installed

    where = installed()
    if where is not None:
        stubbed = ", ".join(where.stubbed) or "nothing"
        mode = "neuron backend in NxDI CPU mode" if config.neuron_cpu else "NxDI CPU-mode tests"
        return f"carbon-harness: {mode}: NxDI from {where.nxdi_path}; stubbed Neuron-only packages: {stubbed}"
    if config.nxdi_source is not None:
        return f"carbon-harness: NxDI CPU tier: NxDI from {config.nxdi_source} (imported on first use)"
    return ("carbon-harness: NxDI CPU tier: off (pass --carbon-nxdi-source DIR, an NxDI checkout, in a transformers "
            "4.57 environment: nox -s trn2-stack)")


def engines_to_unload(resident: list[tuple[Any, float | None]], new_bytes: float | None,
                      budget: float | None) -> list[Any]:
    """Which resident engines (least recently used first, with their planned bytes per rank) to
    close so that the next one fits the per-rank HBM ``budget``. Unknown sizes are not guessed:
    with one, everything resident is closed. No budget (not a device): nothing is closed."""
    if budget is None:
        return []
    if new_bytes is None or any(b is None for _, b in resident):
        return [k for k, _ in resident]
    total = new_bytes + sum(b for _, b in resident if b is not None)
    out = []
    for k, b in resident:
        if total <= budget:
            break
        out.append(k)
        total -= b or 0.0
    return out


class Session:
    """The engines of a session, built once per (model, shape) and closed at the end. On a Neuron
    device, engines that would not fit in HBM beside the next one are closed first (several 8B
    shapes do not fit together); pytest groups tests by model and shape, so that is rare."""

    def __init__(self, config: HarnessConfig, progress: Callable[[str], None] = stderr_progress) -> None:
        self.config = config
        self.progress = progress
        self._engines: dict[tuple[str, str], Engine] = {}
        self._checkpoints: dict[str, Path] = {}
        self._tokenizers: dict[str, CarbonTokenizer] = {}
        self._hardware: HardwareProfile | None = None
        self.load_log: list[dict[str, Any]] = []
        self._server: Any = None
        self._endpoint: Any = None
        self._endpoint_error: Exception | None = None
        self._spec_server: tuple[str, Any, Any] | None = None  # (draft label, VLLMServer, Endpoint)
        self._spec_errors: dict[str, Exception] = {}  # drafts whose server failed: not started again

    @property
    def hardware(self) -> HardwareProfile:
        """The hardware profile; a CPU's bandwidth is measured here, once per session."""
        if self._hardware is None:
            self._hardware = complete_profile(get_profile(self.config.hardware_name))
        return self._hardware

    def checkpoint(self, ref: ModelRef) -> Path:
        if ref.label not in self._checkpoints:
            self._checkpoints[ref.label] = ref.path or cached_checkpoint(ref.label, self.config.cache_dir,
                                                                         progress=self.progress)
        return self._checkpoints[ref.label]

    def tokenizer(self, ref: ModelRef) -> CarbonTokenizer:
        if ref.label not in self._tokenizers:
            self._tokenizers[ref.label] = CarbonTokenizer.from_checkpoint(self.checkpoint(ref))
        return self._tokenizers[ref.label]

    def _planned_bytes(self, label: str, shape: RunShape) -> float | None:
        """HBM bytes per rank of a neuron engine (weights + KV cache; doubled once the output-logits
        build of the same shape is loaded beside it), None when its architecture is unknown."""
        from harness.plan import make_plan

        spec = MODELS.get(label)
        if spec is None:
            return None
        plan = make_plan(spec, shape, self.hardware)
        return plan.weight_bytes_per_rank + plan.kv_bytes_per_rank

    def _make_room(self, ref: ModelRef, shape: RunShape) -> None:
        if self.config.backend != "neuron" or self.config.neuron_cpu:
            return
        budget = self.hardware.per_core(self.hardware.memory_bytes)
        resident = []
        for (label, shape_name), engine in self._engines.items():
            planned = self._planned_bytes(label, engine.shape)
            copies = 2 if getattr(engine, "_logits_model", None) is not None else 1
            resident.append(((label, shape_name), None if planned is None else planned * copies))
        for key in engines_to_unload(resident, self._planned_bytes(ref.label, shape), budget):
            self.progress(f"unloading {key[0]}/{key[1]}: it and {ref.label}/{shape.name} do not fit in HBM together")
            self._engines.pop(key).close()

    def _make_engine(self, path: Path, shape: RunShape, label: str) -> Engine:
        cfg = self.config
        return make_engine(cfg.backend, path, shape, label, device=cfg.device, dtype=cfg.dtype, cache_dir=cfg.cache_dir,
                           variants=cfg.variants, hardware=cfg.hardware_name, neuron_cpu=cfg.neuron_cpu,
                           nxdi_source=cfg.nxdi_source, endpoint=self.endpoint() if cfg.backend == "openai" else None)

    def engine(self, ref: ModelRef, shape: RunShape) -> Engine:
        key = (ref.label, shape.name)
        if key in self._engines:
            self._engines[key] = self._engines.pop(key)  # most recently used last
        else:
            self._make_room(ref, shape)
            path = self.checkpoint(ref)
            self.progress(f"loading {ref.label} ({self.config.backend}, shape {shape.name}) from {path}")
            start = time.perf_counter()
            engine = self._make_engine(path, shape, ref.label)
            self.load_log.append({"model": ref.label, "shape": shape.name, "load_s": engine.info.load_s,
                                  "compile_s": engine.info.compile_s, "total_s": time.perf_counter() - start})
            self.progress(f"loaded {ref.label}/{shape.name} in {engine.info.load_s:.2f} s")
            self._engines[key] = engine
        return self._engines[key]

    def draft_engine(self, draft: ModelRef, target: ModelRef, shape: RunShape) -> Engine:
        """The speculative draft's engine for a target: its own engine (own KV cache) even when the
        draft is the target itself (``self``; on hf the two share one copy of the weights)."""
        ref = target if draft.label == "self" else draft
        key = (f"draft:{draft.label}:{target.label}", shape.name)
        if key not in self._engines:
            path = self.checkpoint(ref)
            self.progress(f"loading draft {ref.label} for {target.label} ({self.config.backend}, shape {shape.name})")
            engine = self._make_engine(path, shape, ref.label)
            self.load_log.append({"model": ref.label, "shape": shape.name, "role": "draft", "target": target.label,
                                  "load_s": engine.info.load_s, "compile_s": engine.info.compile_s})
            self._engines[key] = engine
        return self._engines[key]

    def endpoint(self) -> Any:
        """The serving endpoint: --carbon-endpoint, or a vLLM server this session starts on the first
        model's checkpoint (once; stopped by ``close``). Raises ServerError / ServingError saying why not."""
        if self._endpoint_error is not None:
            raise self._endpoint_error  # tried once this session: do not start a failing server again
        try:
            return self._start_endpoint()
        except Exception as exc:
            self._endpoint_error = exc
            raise

    def _start_endpoint(self) -> Any:
        if self._endpoint is None:
            from harness.backends.openai import Endpoint, resolve_endpoint, run_async

            if self.config.endpoint:
                url = self.config.endpoint
            elif self.config.serve == "vllm":
                from harness.serving_server import start_vllm

                ref = self.config.models[0]
                log = self.config.cache_dir / "serving" / "logs" / f"vllm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
                self._server = start_vllm(self.checkpoint(ref), self.config.cache_dir, log, served_model=ref.label,
                                          timeout_s=self.config.serve_timeout_s, progress=self.progress)
                url = self._server.url
            else:
                raise BackendError("no server: pass --carbon-endpoint URL or --carbon-serve vllm")
            self._endpoint = run_async(resolve_endpoint(Endpoint.from_env(url, self.config.served_model)))
        return self._endpoint

    def speculative_endpoint(self, draft: ModelRef) -> Any:
        """A vLLM server on the first model with ``draft`` as its speculative draft (``self``: the
        model drafts for itself), started by this session with --carbon-serve vllm. One runs at a time:
        starting the next draft's stops the previous one (tests/serving/conftest.py orders tests by draft). Raises
        BackendError when the session does not start servers (a running server's draft is unknown)."""
        if self.config.serve != "vllm":
            raise BackendError("speculative serving needs a server the harness starts with its draft: --carbon-serve "
                               "vllm (a server at --carbon-endpoint runs whatever draft it was started with, "
                               "which the harness cannot know)")
        if draft.label in self._spec_errors:
            raise self._spec_errors[draft.label]
        if self._spec_server is not None and self._spec_server[0] == draft.label:
            return self._spec_server[2]
        self.stop_speculative_server()
        try:
            self._spec_server = self._start_speculative_server(draft)
        except Exception as exc:
            self._spec_errors[draft.label] = exc
            raise
        return self._spec_server[2]

    def _start_speculative_server(self, draft: ModelRef) -> tuple[str, Any, Any]:
        from harness.backends.openai import Endpoint, resolve_endpoint, run_async
        from harness.serving_server import speculative_server_cpu_bind, start_vllm
        from harness.speculative_serving import vllm_speculative_config

        target = self.config.models[0]
        draft_path = self.checkpoint(target if draft.label == "self" else draft)
        log = (self.config.cache_dir / "serving" / "logs"
               / f"vllm-draft-{draft.label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
        server = start_vllm(self.checkpoint(target), self.config.cache_dir, log, served_model=target.label,
                            timeout_s=self.config.serve_timeout_s, progress=self.progress,
                            speculative_config=vllm_speculative_config(draft_path, self.config.speculation_length),
                            cpu_bind=speculative_server_cpu_bind())
        try:
            endpoint = run_async(resolve_endpoint(Endpoint.from_env(server.url, target.label)))
        except Exception:
            server.stop()
            raise
        return draft.label, server, endpoint

    def stop_speculative_server(self) -> None:
        """Stop the speculative server, if one runs (the next draft's start, the speculative tests'
        module teardown, the session's end)."""
        if self._spec_server is not None:
            label, server, _ = self._spec_server
            self.progress(f"stopping vLLM with draft {label} (pid {server.proc.pid}); its log: {server.log_path}")
            server.stop()
            self._spec_server = None

    @property
    def server(self) -> Any:
        """The server this session started (a VLLMServer), or None."""
        return self._server

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
        self.stop_speculative_server()
        if self._server is not None:
            self.progress(f"stopping vLLM (pid {self._server.proc.pid}); its log: {self._server.log_path}")
            self._server.stop()
            self._server = None


# ---------------------------------------------------------------------------------------------
# The run manifest: every number carries its context
# ---------------------------------------------------------------------------------------------

VERSIONED = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pytest-benchmark",
             "neuronx-distributed-inference", "neuronx-cc", "torch-neuronx", "libneuronxla")


def package_versions() -> dict[str, str]:
    return {"python": platform.python_version(), **installed_versions(VERSIONED)}


def git_sha(repo: Path = Path(__file__).resolve().parent.parent) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def run_manifest(session: Session) -> dict[str, Any]:
    cfg = session.config
    return {
        "versions": package_versions(),
        "harness_git_sha": git_sha(),
        "backend": cfg.backend,
        "device": cfg.device,
        "dtype": cfg.dtype,
        "models": [{"label": m.label, "path": str(m.path) if m.path else None, "real": m.real} for m in cfg.models],
        "shapes": [s.name for s in cfg.shapes],
        "hardware": session.hardware.to_dict(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch_threads(),
        "runs": cfg.runs,
        "warmup": cfg.warmup,
        "threshold_files": cfg.threshold_files,
        "variants": list(cfg.variants),
        "drafts": [{"label": d.label, "path": str(d.path) if d.path else None, "real": d.real} for d in cfg.drafts],
        "speculation_length": cfg.speculation_length,
        "neuron_rt_visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "engines": session.load_log,
        "nxdi": nxdi_manifest(),
        "endpoint": session._endpoint.url if session._endpoint is not None else cfg.endpoint,
        "served_model": session._endpoint.model if session._endpoint is not None else cfg.served_model,
        "serve": cfg.serve,
        "argv": sys.argv,
    }


def torch_threads() -> int | None:
    """torch's intra-op threads in this process (None if torch is not loaded)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def nxdi_manifest() -> dict[str, Any] | None:
    """Which NxDI build this process imports, from where, and what was stubbed (None: no NxDI)."""
    import importlib.util

    from harness.backends.neuron_stubs import installed

    where = installed()
    if where is None and importlib.util.find_spec("neuronx_distributed_inference") is None:
        return None
    from harness.backends.neuron import nxdi_build

    return {**nxdi_build(), "source": where.source if where else None,
            "stubbed_packages": list(where.stubbed) if where else []}


def default_threshold_paths(rootdir: Path) -> list[Path]:
    for candidate in (rootdir / "fixtures" / "thresholds", Path(__file__).resolve().parent.parent / "fixtures" / "thresholds"):
        if candidate.is_dir():
            return [candidate]
    return []


def check_device_dtype(backend: str, device: str, dtype: str) -> None:
    """Reject a device or dtype the backend cannot run, once at start rather than in every test."""
    if not str(device).strip():
        raise ValueError("--carbon-device '' is empty; expected auto, cpu, cuda or cuda:N")
    if not str(dtype).strip():
        raise ValueError("--carbon-dtype '' is empty; expected auto, bf16, fp16 or fp32")
    if backend == "hf":
        from harness.backends.hf import DTYPES, resolve_device

        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"--carbon-dtype {dtype!r} is not supported; expected auto, {', '.join(DTYPES)}")
        try:
            resolve_device(device)
        except (BackendError, RuntimeError) as exc:  # torch.device('tpu') raises RuntimeError
            raise ValueError(f"--carbon-device {device!r}: {exc}") from None


def make_config(options: dict[str, Any], rootdir: Path) -> HarnessConfig:
    """HarnessConfig from the plugin's option values; raises ValueError with the bad option named."""
    model_root = Path(options["model_root"]).expanduser() if options.get("model_root") else None
    if model_root is not None and not model_root.is_dir():
        raise ValueError(f"--carbon-model-root {model_root} is not a directory")
    backend = parse_backend(options["backend"])
    models = [resolve_model(m, model_root) for m in (options.get("models") or ["carbon-tiny"])]
    shapes = [get_shape(s) for s in (options.get("shapes") or ["smoke", "report-bs1"])]
    for p in options.get("thresholds") or ():
        if not str(p).strip():
            raise ValueError("--carbon-thresholds '' is empty: give a thresholds file or directory")
    if not str(options.get("cache_dir") or "").strip():
        raise ValueError("--carbon-cache-dir '' is empty: give a directory (default ~/.cache/carbon-harness)")
    check_device_dtype(backend, options.get("device", "auto"), options.get("dtype", "auto"))
    files = [Path(p) for p in options["thresholds"]] if options.get("thresholds") else default_threshold_paths(rootdir)
    hardware = options.get("hardware") or detect_profile_name()
    get_profile(hardware)  # unknown names fail here, with the known ones listed
    runs, warmup = int(options.get("runs", 5)), int(options.get("warmup", 1))
    from harness.backends.neuron import check_variants

    try:
        variants = check_variants(options.get("variants") or ())
    except BackendError as exc:
        raise ValueError(f"--carbon-variant: {exc}") from None
    from harness.speculative import EMBEDDED_DRAFTS

    drafts = [resolve_draft(d, model_root) for d in (options.get("drafts") or EMBEDDED_DRAFTS)]
    cores = options.get("cores_per_worker")
    for shape in shapes:
        if cores and cores < shape.tp_degree:
            raise ValueError(f"--carbon-cores-per-worker {cores} is less than shape {shape.name!r} tp_degree="
                             f"{shape.tp_degree}: each worker needs at least tp_degree logical cores")
    neuron_cpu = bool(options.get("neuron_cpu"))
    if neuron_cpu and backend != "neuron":
        raise ValueError(f"--carbon-neuron-cpu runs the neuron backend in NxDI's CPU mode: add --carbon-backend neuron "
                         f"(the backend is {backend!r})")
    nxdi_source = Path(options["nxdi_source"]).expanduser() if options.get("nxdi_source") else None
    if nxdi_source is not None and not nxdi_source.is_dir():
        raise ValueError(f"--carbon-nxdi-source {nxdi_source} is not a directory (give an NxDI source checkout)")
    endpoint = options.get("endpoint")
    if endpoint:
        from harness.backends.openai import parse_endpoint

        endpoint = parse_endpoint(endpoint)
    serve = options.get("serve")
    if serve:
        from harness.serving_server import parse_serve

        serve = parse_serve(serve)
    if endpoint and serve:
        raise ValueError(f"--carbon-endpoint {endpoint} and --carbon-serve {serve}: pass one (a running server, or one "
                         "the session starts)")
    return HarnessConfig(backend=backend, endpoint=endpoint, served_model=options.get("served_model"), serve=serve,
                         serve_timeout_s=float(options.get("serve_timeout") or 600.0),
                         models=models, shapes=shapes, device=options.get("device", "auto"),
                         dtype=options.get("dtype", "auto"),
                         cache_dir=Path(options["cache_dir"]).expanduser(), thresholds=load_thresholds(files),
                         threshold_files=[str(f) for f in files], hardware_name=hardware, runs=runs, warmup=warmup,
                         model_root=model_root, variants=variants, cores_per_worker=options.get("cores_per_worker"),
                         neuron_cpu=neuron_cpu, nxdi_source=nxdi_source,
                         drafts=drafts, speculation_length=int(options.get("speculation_length", 4)))
