"""What a server says of its own work (issue 49): a served side's engine runs in its server, so the client
counts nothing of it (its Python calls would be the client's, HTTP and JSON); vLLM's Prometheus counters on
``/metrics`` are the server's own exact counts. Read before and after one untimed batch, their differences are
that batch's work: engine steps (one observation of vLLM's tokens-per-step histogram per step that produced
output), the tokens those steps ran, prompt and generated tokens, finished requests, preemptions and prefix
cache queries and hits. More engine steps for the same batch is lost batching; preemptions, a KV cache too
small; more prompt tokens run than sent, recomputation.

Pure: the scrape itself is ``harness.serving.client.metrics_text``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

# the counts kept, by the name the verdict gives them: vLLM's counter (summed over its engines)
COUNTERS = {
    "engine_steps": "vllm:iteration_tokens_total_count",
    "step_tokens": "vllm:iteration_tokens_total_sum",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "requests": "vllm:request_success_total",
    "preemptions": "vllm:num_preemptions_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
}
REQUIRED = ("engine_steps", "generation_tokens")  # without these the server counts nothing we can use
SOURCE = "the server's /metrics (vLLM's Prometheus counters), before and after one untimed batch"


class ServerWorkError(ValueError):
    """A server whose /metrics do not carry the counts (stats off, or not vLLM)."""


def prometheus_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a Prometheus text exposition (comments skipped)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        samples.append((m["name"], dict(_LABEL.findall(m["labels"] or "")), value))
    return samples


def counters(text: str, model: str | None = None) -> dict[str, float]:
    """The ``COUNTERS`` of ``model`` (every model when None), summed over engines and label sets; a count the
    server does not export is left out, and one of ``REQUIRED`` missing is an error naming why."""
    names = {name: key for key, name in COUNTERS.items()}
    out: dict[str, float] = {}
    for name, labels, value in prometheus_samples(text):
        if name in names and (model is None or labels.get("model_name", model) == model):
            out[names[name]] = out.get(names[name], 0.0) + value
    missing = [COUNTERS[k] for k in REQUIRED if k not in out]
    if missing:
        raise ServerWorkError(f"the server's /metrics carry no {', '.join(missing)}"
                              + (f" for model {model!r}" if model else "")
                              + ": it runs with --disable-log-stats, or is not vLLM (a served side's work is then "
                              "not counted)")
    return out


def batch_work(before: Mapping[str, float], after: Mapping[str, float], requests: int) -> dict[str, Any]:
    """One batch's work from the counters around it: each count's difference, and the batch's size, so two
    sides' batches are compared as they were sent."""
    counts = {k: after[k] - before.get(k, 0.0) for k in after}
    return {"source": SOURCE, "requests_sent": requests, "counts": counts,
            "python_calls_note": "Python calls are not counted on a served side: they would be the client's"}


def describe_server_change(base: Mapping[str, float], new: Mapping[str, float]) -> list[str]:
    """Each count that moved, in words: "+12 engine_steps/batch (16 -> 28)"."""
    return [f"{new.get(k, 0.0) - base.get(k, 0.0):+.4g} {k}/batch ({base.get(k, 0.0):.4g} -> {new.get(k, 0.0):.4g})"
            for k in COUNTERS if base.get(k, 0.0) != new.get(k, 0.0)]
