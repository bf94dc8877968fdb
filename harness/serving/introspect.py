"""What a running vLLM server says about itself, read over HTTP: its version (``/version``), the model
it serves and that model's ``max_model_len`` (``/v1/models``), and its KV cache configuration (the
labels of the ``vllm:cache_config_info`` gauge on ``/metrics``: block size, prefix caching, cache dtype,
blocks). A release check records this for every served side, the team's own endpoint included, where
no argument list is known: a default the engine resolved at start (``--max-model-len`` unset, the
platform's block size) is known only this way.

A server that does not say one of them (an older vLLM, metrics off: ``--disable-log-stats`` publishes
no ``vllm:`` gauge) records why, never a guess. Synchronous (``urllib``), torch-free, loopback or the
team's URL only.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

CACHE_INFO = "vllm:cache_config_info"
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def cache_config_labels(metrics: str) -> dict[str, str] | None:
    """The labels of the first ``vllm:cache_config_info`` sample of a Prometheus text page (None
    without one)."""
    for line in metrics.splitlines():
        if line.startswith(CACHE_INFO + "{"):
            body = line[len(CACHE_INFO) + 1: line.rindex("}")]
            return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in LABEL.findall(body)}
    return None


def _get(url: str, api_key: str | None, timeout: float) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
        return resp.read().decode(errors="replace")


def server_facts(url: str, model: str | None = None, api_key: str | None = None,
                 timeout: float = 10.0) -> dict[str, Any]:
    """``{"version", "model", "max_model_len", "cache_config"}`` as ``url`` tells them (``model``: the
    served name to read, default its only or first one); a field the server would not give holds
    ``"unavailable (why)"``."""
    out: dict[str, Any] = {}
    try:
        out["version"] = json.loads(_get(f"{url}/version", api_key, timeout)).get("version")
    except (OSError, ValueError, AttributeError) as exc:
        out["version"] = f"unavailable ({exc})"
    try:
        data = json.loads(_get(f"{url}/v1/models", api_key, timeout))["data"]
        entry = next((m for m in data if m.get("id") == model), data[0] if data else {})
        out["model"] = entry.get("id")
        out["max_model_len"] = entry.get("max_model_len", "unavailable (not in /v1/models)")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        out["max_model_len"] = f"unavailable ({exc})"
    try:
        labels = cache_config_labels(_get(f"{url}/metrics", api_key, timeout))
        out["cache_config"] = labels if labels is not None else \
            f"unavailable (no {CACHE_INFO} on /metrics: the server runs with --disable-log-stats, or predates it)"
    except (OSError, ValueError) as exc:
        out["cache_config"] = f"unavailable ({exc})"
    return out
