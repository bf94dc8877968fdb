"""What a loaded NxDI model records about its build in the engine's info (every benchmark's extra_info
and a release check's configuration drift read it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.backends.neuron.artifacts import observed_strategy
from harness.backends.neuron.config import baseline_kernels


def build_record(kwargs: Mapping[str, Any], variants: Sequence[str], build: Mapping[str, Any], key: Any,
                 artifact_dir: Path | None, sharding_log: Any, cpu: bool, scoring_only: bool,
                 compile_s: float | None) -> dict[str, Any]:
    """The artifact, its sharding, kernels and mode, and whether this load compiled."""
    extra: dict[str, Any] = {"artifact_key": key.digest if key else None,
                             "artifact_dir": str(artifact_dir) if artifact_dir else None,
                             "attention_sharding": observed_strategy(sharding_log),
                             "variants": list(variants), "kernels": baseline_kernels(kwargs),
                             "nxdi_mode": "cpu" if cpu else "device", "nxdi_build": build,
                             "tp_degree": kwargs["tp_degree"],
                             "cte_bucket": kwargs["context_encoding_buckets"][0],
                             # pre-sharded weights are loaded from the artifact; load includes warm-up
                             "load_includes": "weight sharding in memory (CPU mode)" if cpu else
                                              "pre-sharded weights from the artifact, warm-up",
                             "build": "scoring" if scoring_only else "generation",
                             # whether this load compiled: a release check gates compile_s only where
                             # both sides compiled in the same round
                             "compile": "none (CPU mode)" if cpu else "compiled" if compile_s is not None
                                        else "cache hit"}
    return extra
