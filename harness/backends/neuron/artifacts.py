"""Compiled NxDI artifacts: what goes into their content-addressed key (checkpoint fingerprint,
NeuronConfig kwargs, compile environment, Neuron package versions, NxDI source digest), whether a
cached directory is complete, and the GQA sharding log NxDI writes while compiling."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.backends.neuron.config import variant_env
from harness.core.plan import CONVERT_TO_MHA, REPLICATE, AttentionSharding
from harness.core.spec import ArtifactKey, RunShape, artifact_key
from harness.core.versions import installed_versions

# The Python side of the Neuron stack: all of them change what compiles or how it runs, so all enter the
# artifact key and each side's recorded versions (torch-xla and nki too: the XLA bridge and the kernel
# language NxDI's kernels are written in). The OS side (runtime, driver, collectives) is recorded by
# harness.core.neuron_host; a release check never swaps it.
NEURON_PACKAGES = ("neuronx-distributed-inference", "neuronx-distributed", "neuronx-cc", "torch-neuronx",
                   "libneuronxla", "torch-xla", "nki", "torch", "transformers")
# Environment variables that change what neuronx-cc compiles: they enter the artifact key.
# NEURON_LOGICAL_NC_CONFIG overrides the logical_nc_config kwarg (NxDI config.py ``_get_lnc``).
COMPILE_ENV_VARS = ("NEURON_LOGICAL_NC_CONFIG", "NEURON_CC_FLAGS", "XLA_HANDLE_SPECIAL_SCALAR", "UNSAFE_FP8FNCAST")
SHARDING_OVERRIDE = re.compile(
    r"TP degree \((\d+)\) and KV heads \((\d+)\) are not divisible\. Overriding attention sharding strategy to "
    r"GQA\.CONVERT_TO_MHA")
KEY_FILE = "carbon_artifact_key.json"
COMPILED_MODEL_FILE = "model.pt"
# Touched each time an artifact is loaded: the runner's eviction (ci/scripts/cache-evict.sh) reads its
# mtime. A directory's atime cannot say this: loading never lists the directory, and ``du`` over the
# cache refreshes every atime.
LAST_USED_FILE = "last_used"
NEURON_CONFIG_FILE = "neuron_config.json"


def compile_env_key(variants: Iterable[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The compile-relevant environment, as it will be during the compile: part of the artifact key."""
    env = {k: environ[k] for k in COMPILE_ENV_VARS if k in environ}
    env.update(variant_env(variants))
    return env


@contextmanager
def environment(values: Mapping[str, str]):
    """Set environment variables for a block and restore them after (NxDI reads them at call time)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def compile_work_dir(artifact_tmp: Path) -> Path:
    """A trace/compile work directory of this build's own. NxDI traces into
    ``BASE_COMPILE_WORK_DIR`` (default ``/tmp/nxd_model/``) and deletes it first, so two builds
    sharing the default would delete each other's work."""
    return artifact_tmp.parent / f".{artifact_tmp.name}.work"


def touch_last_used(artifact_dir: Path) -> None:
    """Record that ``artifact_dir`` is being loaded now (its ``last_used`` file's mtime). A cache on a
    read-only volume cannot record it: that is said once, and the artifact is still loaded."""
    try:
        (artifact_dir / LAST_USED_FILE).touch()
    except OSError as exc:
        logging.getLogger(__name__).warning("cannot record the use of %s (%s): eviction by last use will see "
                                            "only its build time", artifact_dir, exc)


def neuron_versions() -> dict[str, str]:
    return installed_versions(NEURON_PACKAGES)


def package_digest(package_dir: str | Path) -> str:
    """sha256 over a package's Python sources (relative path and bytes, in sorted order): two builds
    published under one version (NxDI c63afe0 and ef2731e are both "0.9.0") differ here."""
    root = Path(package_dir)
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def nxdi_build() -> dict[str, str]:
    """Which NxDI and neuronx-distributed builds this process imports: version, location and a
    digest of their sources, for the run manifest and the artifact key."""
    out: dict[str, str] = {}
    for module, label in (("neuronx_distributed_inference", "nxdi"), ("neuronx_distributed", "nxd")):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            continue
        out.update(package_build(Path(next(iter(spec.submodule_search_locations))), label))
    return out


def package_version(package_dir: Path) -> str | None:
    """The ``__version__`` a package's ``_version.py`` declares, read without importing it."""
    version_file = package_dir / "_version.py"
    match = re.search(r'__version__\s*=\s*"([^"]+)"', version_file.read_text()) if version_file.is_file() else None
    return match.group(1) if match else None


def package_build(package_dir: Path, label: str) -> dict[str, str]:
    """``{label}_path``, ``{label}_version`` (where declared) and ``{label}_sha256`` of a package."""
    out = {f"{label}_path": str(package_dir)}
    version = package_version(package_dir)
    if version:
        out[f"{label}_version"] = version
    out[f"{label}_sha256"] = package_digest(package_dir)
    return out


def neuron_artifact_key(checkpoint_fingerprint: str, shape: RunShape, kwargs: Mapping[str, Any],
                        versions: Mapping[str, str], env: Mapping[str, str] | None = None,
                        model_options: Mapping[str, str] | None = None) -> ArtifactKey:
    """Compiled artifacts depend on the checkpoint, the NeuronConfig, the compile environment
    (``NEURON_LOGICAL_NC_CONFIG`` overrides the LNC kwarg), the compiler stack (NxDI's build digest
    included) and what a model class changes against NxDI's Llama (``model_options``, e.g. the
    scoring build's head). Without ``model_options`` the key is what it always was, so existing
    generation artifacts stay valid."""
    options: dict[str, Any] = {"neuron_config": dict(kwargs), "env": dict(env or {})}
    if model_options:
        options["model"] = dict(model_options)
    return artifact_key(checkpoint_fingerprint, shape, "neuron", dict(versions), **options)


def compiled_dir_problem(path: Path, key: ArtifactKey | None = None) -> str | None:
    """Why a cached compiled directory cannot be loaded (None if it looks complete)."""
    if not path.is_dir():
        return f"{path} does not exist"
    config = path / NEURON_CONFIG_FILE
    try:
        json.loads(config.read_text())
    except FileNotFoundError:
        return f"{config} is missing"
    except json.JSONDecodeError as exc:
        return f"{config} is not valid JSON ({exc})"
    traced = path / COMPILED_MODEL_FILE
    if not traced.is_file() or traced.stat().st_size == 0:
        return f"{traced} is missing or empty (an interrupted compile?)"
    weights = path / "weights"
    config = key.options.get("neuron_config", {}) if key is not None else {}
    if config.get("save_sharded_checkpoint") and not weights.is_dir():
        return f"{weights} is missing: the artifact was built with save_sharded_checkpoint"
    if weights.is_dir() and key is not None:
        tp = config.get("tp_degree", 1)
        missing = [r for r in range(tp) if not (weights / f"tp{r}_sharded_checkpoint.safetensors").is_file()]
        if missing:
            return f"{weights} lacks the sharded checkpoints of ranks {missing}"
    if key is not None:
        recorded = path / KEY_FILE
        try:
            if json.loads(recorded.read_text()) != json.loads(key.canonical()):
                return f"{recorded} names a different artifact key"
        except (FileNotFoundError, json.JSONDecodeError):
            return f"{recorded} is missing or unreadable"
    return None


@dataclass(frozen=True)
class ObservedSharding:
    tp_degree: int
    kv_heads: int
    strategy: str


def parse_sharding_log(lines: Iterable[str]) -> list[ObservedSharding]:
    """NxDI's "Overriding attention sharding strategy to GQA.CONVERT_TO_MHA" warnings."""
    out = []
    for line in lines:
        m = SHARDING_OVERRIDE.search(line)
        if m:
            out.append(ObservedSharding(int(m.group(1)), int(m.group(2)), CONVERT_TO_MHA))
    return out


def observed_strategy(records: list[ObservedSharding]) -> str:
    """What the compile did: CONVERT_TO_MHA if NxDI logged the override, else its default."""
    return CONVERT_TO_MHA if records else REPLICATE


def check_sharding(planned: AttentionSharding, records: list[ObservedSharding]) -> str | None:
    """A message when the compile log disagrees with the plan (None when they agree)."""
    observed = observed_strategy(records)
    if observed != planned.strategy:
        return (f"NxDI sharded attention as {observed} but the plan predicted {planned.strategy} "
                f"(tp={planned.tp_degree}, kv heads={planned.source_kv_heads})")
    for r in records:
        if (r.tp_degree, r.kv_heads) != (planned.tp_degree, planned.source_kv_heads):
            return (f"NxDI logged the override for tp={r.tp_degree}, kv heads={r.kv_heads}; "
                    f"the plan is for tp={planned.tp_degree}, kv heads={planned.source_kv_heads}")
    return None


SHARDING_FILE = "carbon_sharding_log.json"


def save_sharding_log(path: Path, records: list[ObservedSharding]) -> None:
    """Keep what the compile logged with the artifact: a cache hit compiles nothing, and the
    GQA decision must still be known."""
    path.write_text(json.dumps([{"tp_degree": r.tp_degree, "kv_heads": r.kv_heads, "strategy": r.strategy}
                                for r in records]))


def load_sharding_log(path: Path) -> list[ObservedSharding] | None:
    try:
        return [ObservedSharding(**r) for r in json.loads(path.read_text())]
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        self._seen: set[int] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if id(record) not in self._seen:  # a record reaches both loggers when "Neuron" propagates
            self._seen.add(id(record))
            self.lines.append(record.getMessage())


@contextmanager
def capture_neuron_logs():
    """Collect what NxDI logs: its "Neuron" logger (the GQA override is a warning there) and the
    root logger (``NeuronConfig`` warns about unexpected kwargs with ``logging.warning``)."""
    handler = _LogCapture()
    loggers = (logging.getLogger("Neuron"), logging.getLogger())
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
