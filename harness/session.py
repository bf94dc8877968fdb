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
    info = inspect_checkpoint(path)
    return ModelRef(identify_model(info.config, path.name), path, not info.synthetic)


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


def check_backend_available(backend: str, config: HarnessConfig | None = None) -> None:
    """Fail the session at start, once, when the backend cannot run on this machine."""
    if backend == "openai" and config is not None and not (config.endpoint or config.serve):
        raise BackendError("--carbon-backend openai needs --carbon-endpoint URL of a running server "
                           "or --carbon-serve vllm")
    if backend == "neuron":
        from harness.backends.neuron import neuron_unavailable_reason

        reason = neuron_unavailable_reason()
        if reason:
            raise BackendError(f"--carbon-backend neuron cannot run here: {reason}")


class Session:
    """The engines of a session, built once per (model, shape) and closed at the end."""

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

    def engine(self, ref: ModelRef, shape: RunShape) -> Engine:
        key = (ref.label, shape.name)
        if key not in self._engines:
            path = self.checkpoint(ref)
            self.progress(f"loading {ref.label} ({self.config.backend}, shape {shape.name}) from {path}")
            start = time.perf_counter()
            engine = make_engine(self.config.backend, path, shape, ref.label, device=self.config.device,
                                 dtype=self.config.dtype, cache_dir=self.config.cache_dir,
                                 variants=self.config.variants, hardware=self.config.hardware_name,
                                 endpoint=self.endpoint() if self.config.backend == "openai" else None)
            self.load_log.append({"model": ref.label, "shape": shape.name, "load_s": engine.info.load_s,
                                  "compile_s": engine.info.compile_s, "total_s": time.perf_counter() - start})
            self.progress(f"loaded {ref.label}/{shape.name} in {engine.info.load_s:.2f} s")
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

    @property
    def server(self) -> Any:
        """The server this session started (a VLLMServer), or None."""
        return self._server

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
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
        "runs": cfg.runs,
        "warmup": cfg.warmup,
        "threshold_files": cfg.threshold_files,
        "variants": list(cfg.variants),
        "neuron_rt_visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "engines": session.load_log,
        "endpoint": session._endpoint.url if session._endpoint is not None else cfg.endpoint,
        "served_model": session._endpoint.model if session._endpoint is not None else cfg.served_model,
        "serve": cfg.serve,
        "argv": sys.argv,
    }


def default_threshold_paths(rootdir: Path) -> list[Path]:
    for candidate in (rootdir / "fixtures" / "thresholds", Path(__file__).resolve().parent.parent / "fixtures" / "thresholds"):
        if candidate.is_dir():
            return [candidate]
    return []


def make_config(options: dict[str, Any], rootdir: Path) -> HarnessConfig:
    """HarnessConfig from the plugin's option values; raises ValueError with the bad option named."""
    model_root = Path(options["model_root"]).expanduser() if options.get("model_root") else None
    if model_root is not None and not model_root.is_dir():
        raise ValueError(f"--carbon-model-root {model_root} is not a directory")
    backend = parse_backend(options["backend"])
    models = [resolve_model(m, model_root) for m in (options.get("models") or ["carbon-tiny"])]
    shapes = [get_shape(s) for s in (options.get("shapes") or ["smoke", "report-bs1"])]
    files = [Path(p) for p in options["thresholds"]] if options.get("thresholds") else default_threshold_paths(rootdir)
    hardware = options.get("hardware") or detect_profile_name()
    get_profile(hardware)  # unknown names fail here, with the known ones listed
    runs, warmup = int(options.get("runs", 5)), int(options.get("warmup", 1))
    from harness.backends.neuron import check_variants

    try:
        variants = check_variants(options.get("variants") or ())
    except BackendError as exc:
        raise ValueError(f"--carbon-variant: {exc}") from None
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
                         model_root=model_root, variants=variants, cores_per_worker=options.get("cores_per_worker"))
