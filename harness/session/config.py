"""What a session measures, on what: the pytest options turned into one ``HarnessConfig``.

Parsed once at configure time so that bad input (an unknown model, a thresholds file with a
typo, a backend that cannot run here) stops the session before any test, with one message that
names the option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.gates import Threshold, load_thresholds
from harness.backends.hf import cuda_device_name
from harness.carbon.checkpoint import inspect_checkpoint
from harness.core.errors import BackendError
from harness.core.hardware import detect_profile_name, get_profile
from harness.core.options import parse_backend, parse_endpoint, parse_serve
from harness.core.paths import default_threshold_paths
from harness.core.spec import MODELS, RunShape, SpecError, get_model, get_shape


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


def embedded_models() -> tuple[str, ...]:
    """The models that have no published checkpoint (the embedded default and its draft): always
    synthetic unless a model root happens to hold one."""
    from harness.core.spec import DEFAULT_MODEL
    from harness.core.speculation import EMBEDDED_DRAFTS

    return tuple(name for name in (DEFAULT_MODEL, *EMBEDDED_DRAFTS) if name in MODELS)


def model_root_names(spec: Any) -> tuple[str, ...]:
    """The directory names a model is looked for under --carbon-model-root: the published one
    (``Carbon-3B``), then the harness's name (``carbon-3b``)."""
    return tuple(dict.fromkeys(n for n in (spec.hf_name, spec.name) if n))


def root_listing(root: Path, limit: int = 12) -> str:
    """What a directory holds, for an error message (names sorted, at most ``limit``)."""
    names = sorted(p.name for p in root.iterdir())
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return shown or "nothing"


def find_in_model_root(value: str, spec: Any, model_root: Path) -> Path | None:
    """The checkpoint directory of ``spec`` under ``model_root`` (checked to be a Carbon checkpoint).
    A published model that is not there is an error naming the names looked for and what the root
    holds: a model root is given to measure real weights, never to fall back to random ones. The
    embedded models, which have no published checkpoint, are None (synthetic) when absent."""
    names = model_root_names(spec)
    for name in names:
        candidate = model_root / name
        if candidate.is_dir():
            info = inspect_checkpoint(candidate)  # a directory that is no checkpoint fails here, naming its file
            found = identify_model(info.config, "no known")
            if found != spec.name:
                raise ValueError(f"--carbon-model {value!r}: {candidate} holds a checkpoint of {found} architecture, "
                                 f"not {spec.name}'s")
            return candidate
    if spec.name in embedded_models():
        return None
    raise ValueError(f"--carbon-model {value!r}: --carbon-model-root {model_root} has no directory named "
                     f"{' or '.join(names)} (it holds: {root_listing(model_root)}); without --carbon-model-root "
                     f"{spec.name} is a synthetic checkpoint")


def resolve_model(value: str, model_root: Path | None) -> ModelRef:
    """A name from spec (its real checkpoint under ``model_root`` when one is given, else synthetic) or a path."""
    try:
        spec = get_model(value)
    except SpecError:
        spec = None
    if spec is not None:
        found = find_in_model_root(value, spec, model_root) if model_root is not None else None
        return ModelRef(spec.name, found, found is not None and not inspect_checkpoint(found).synthetic)
    path = Path(value).expanduser()
    if not path.exists():
        raise ValueError(f"--carbon-model {value!r} is neither a known model ({', '.join(MODELS)}) nor an existing "
                         "checkpoint directory")
    info = inspect_checkpoint(path, verify=True)
    return ModelRef(identify_model(info.config, path.name), path, not info.synthetic)


def resolve_draft(value: str, model_root: Path | None) -> ModelRef:
    """A speculative draft: ``self`` (the target drafts for itself) or what ``--carbon-model`` accepts."""
    from harness.core.speculation import SELF_DRAFT

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
    cpu_threads: int | None = None  # --carbon-cpu-threads: torch's intra-op threads where the model runs on this CPU
    neuron_cpu: bool = False  # the neuron backend in NxDI's CPU mode
    nxdi_source: Path | None = None  # NxDI from a source checkout instead of the installed package
    drafts: list[ModelRef] = field(default_factory=list)  # speculative drafts (label "self": the target)
    drafts_requested: bool = False  # --carbon-draft given: a draft that cannot run here is an error, not a skip
    speculation_length: int = 4
    endpoint: str | None = None  # a running OpenAI-compatible server (--carbon-endpoint)
    served_model: str | None = None
    serve: str | None = None  # a server the session starts itself (--carbon-serve vllm)
    serve_timeout_s: float = 600.0
    hf_compile: bool = False  # --carbon-hf-compile: a static KV cache and a compiled decode step (harness.backends.hf_compiled)
    work_counts: bool = True  # --carbon-work-counts: an untimed pass counts a CTE / TKG step's work (harness.core.work)


def served_dtype(dtype: str) -> str:
    """The dtype a vLLM server this session starts runs (``--carbon-dtype``; auto: fp32, the CPU's)."""
    return "fp32" if dtype == "auto" else dtype


def check_device_dtype(backend: str, device: str, dtype: str) -> None:
    """Reject a device or dtype the backend cannot run, once at start rather than in every test."""
    if not str(device).strip():
        raise ValueError("--carbon-device '' is empty; expected auto, cpu, cuda or cuda:N")
    if not str(dtype).strip():
        raise ValueError("--carbon-dtype '' is empty; expected auto, bf16, fp16 or fp32")
    if backend == "openai" and dtype not in ("auto", "bf16", "fp16", "fp32"):
        raise ValueError(f"--carbon-dtype {dtype!r}: with --carbon-backend openai it states the server's dtype; "
                         "expected auto (unknown), bf16, fp16 or fp32")
    if backend == "neuron" and dtype not in ("auto", "bf16", "fp32"):
        raise ValueError(f"--carbon-dtype {dtype!r}: with --carbon-backend neuron it is NeuronConfig's torch_dtype; "
                         "expected auto, bf16 or fp32")
    if backend == "hf":
        from harness.backends.hf import DTYPES, resolve_device

        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"--carbon-dtype {dtype!r} is not supported; expected auto, {', '.join(DTYPES)}")
        try:
            resolve_device(device)
        except (BackendError, RuntimeError) as exc:  # torch.device('tpu') raises RuntimeError
            raise ValueError(f"--carbon-device {device!r}: {exc}") from None


def check_hf_compile(backend: str, device: str) -> None:
    """--carbon-hf-compile compiles the transformers backend, where torch can compile for the device."""
    if backend != "hf":
        raise ValueError(f"--carbon-hf-compile compiles the transformers backend: it needs --carbon-backend hf "
                         f"(the backend is {backend!r})")
    from harness.backends.hf import resolve_device
    from harness.backends.hf_compiled import compile_unavailable_reason

    reason = compile_unavailable_reason(resolve_device(device))
    if reason:
        raise ValueError(reason)


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
    files = [Path(p).expanduser() for p in options["thresholds"]] if options.get("thresholds") else default_threshold_paths(rootdir)
    hardware = options.get("hardware") or detect_profile_name(cuda_device_name)
    get_profile(hardware)  # unknown names fail here, with the known ones listed
    runs, warmup = int(options.get("runs", 5)), int(options.get("warmup", 1))
    from harness.backends.neuron.config import check_compile_variants

    try:
        variants = check_compile_variants(options.get("variants") or ())
    except BackendError as exc:
        raise ValueError(f"--carbon-variant: {exc}") from None
    from harness.core.speculation import EMBEDDED_DRAFTS

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
    hf_compile = bool(options.get("hf_compile"))
    if hf_compile:
        check_hf_compile(backend, options.get("device", "auto"))
    endpoint = options.get("endpoint")
    if endpoint:
        endpoint = parse_endpoint(endpoint)
    serve = options.get("serve")
    if serve:
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
                         cpu_threads=options.get("cpu_threads"), neuron_cpu=neuron_cpu, nxdi_source=nxdi_source,
                         drafts=drafts, drafts_requested=bool(options.get("drafts")), speculation_length=int(options.get("speculation_length", 4)),
                         hf_compile=hf_compile, work_counts=options.get("work_counts", "on") != "off")
