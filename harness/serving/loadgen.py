"""Load generation like ``vllm bench serve``: named workloads of token-id requests, sent at a fixed
concurrency and/or a request rate (Poisson, or gamma arrivals with burstiness), after a warm-up
at the measured concurrency; sweeps over either.

Arrivals follow vLLM's ``get_request``: inter-arrival times are gamma-distributed with shape
``burstiness`` and mean ``1 / request_rate`` (burstiness 1 is a Poisson process; lower is burstier);
``request_rate`` inf sends everything at once, bounded only by ``max_concurrency``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.carbon.dna import batch_suite, prompt_suite
from harness.carbon.tokenizer import CarbonTokenizer
from harness.serving.client import Endpoint, RequestResult, client_session, stream_completion
from harness.serving.metrics import serving_metrics


@dataclass(frozen=True)
class Request:
    prompt_ids: tuple[int, ...]
    max_tokens: int
    label: str = ""


@dataclass(frozen=True)
class Workload:
    """Requests and the concurrency the reference measured them at."""

    name: str
    requests: tuple[Request, ...]
    max_concurrency: int | None
    description: str = ""

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt_ids) for r in self.requests)

    def context(self) -> dict[str, Any]:
        lens = [len(r.prompt_ids) for r in self.requests]
        outs = [r.max_tokens for r in self.requests]
        return {"workload": self.name, "num_prompts": len(self.requests), "input_len": max(lens),
                "output_len": max(outs), "workload_concurrency": self.max_concurrency}


def dna_prompt_ids(tokenizer: CarbonTokenizer, tokens: int, seed: int) -> tuple[int, ...]:
    """``<dna>`` + (tokens - 1) random 6-mers: a DNA prompt of exactly ``tokens`` ids."""
    if tokens < 1:
        raise ValueError(f"a prompt needs at least 1 token, got {tokens}")
    rng = np.random.default_rng(seed)
    bp = "".join(rng.choice(list("ACGT"), size=6 * (tokens - 1)))
    ids = tuple(tokenizer.encode("<dna>" + bp))
    assert len(ids) == tokens, (len(ids), tokens)
    return ids


def uniform_workload(name: str, tokenizer: CarbonTokenizer, num_prompts: int, input_len: int, output_len: int,
                     max_concurrency: int | None, description: str = "") -> Workload:
    reqs = tuple(Request(dna_prompt_ids(tokenizer, input_len, seed=i), output_len, f"{name}-{i}")
                 for i in range(num_prompts))
    return Workload(name, reqs, max_concurrency, description)


def dna_suite_workload(tokenizer: CarbonTokenizer, output_len: int = 180) -> Workload:
    """The 7-case DNA suite (``<dna>`` + 1080 bp = 181 tokens), one request at a time as the reference."""
    reqs = tuple(Request(tuple(tokenizer.encode(c.prompt)), output_len, c.name) for c in prompt_suite(1080))
    return Workload("dna-suite", reqs, 1, "7 cases x (<dna> + 1080 bp), 180 new tokens, batch 1")


def batch_suite_workload(tokenizer: CarbonTokenizer, output_len: int = 170) -> Workload:
    """The 16-prompt batch suite (``<dna>`` + 1020 bp = 171 tokens) as 16 concurrent requests."""
    reqs = tuple(Request(tuple(tokenizer.encode(c.prompt)), output_len, c.name) for c in batch_suite(1020, 16))
    return Workload("batch-suite", reqs, 16, "16 x (<dna> + 1020 bp), 170 new tokens, 16 concurrent (A100 reference)")


# The seeds' A10 serving runs (vLLM / SGLang): 500M ~1.3k output tok/s at 32 concurrent, 3B ~0.45k at 12.
A10_WORKLOADS = {"a10-500m": (2048, 6000, 32), "a10-3b": (2048, 8192, 12), "a10-smoke": (64, 32, 4)}


def get_workload(name: str, tokenizer: CarbonTokenizer) -> Workload:
    """A named workload: dna-suite, batch-suite, a10-500m, a10-3b, a10-smoke (CPU-sized a10 shape)."""
    if name == "dna-suite":
        return dna_suite_workload(tokenizer)
    if name == "batch-suite":
        return batch_suite_workload(tokenizer)
    if name in A10_WORKLOADS:
        input_len, output_len, conc = A10_WORKLOADS[name]
        return uniform_workload(name, tokenizer, 2 * conc, input_len, output_len, conc,
                                f"{2 * conc} x {input_len} in / {output_len} out at {conc} concurrent")
    raise ValueError(f"unknown workload {name!r}; known: dna-suite, batch-suite, {', '.join(A10_WORKLOADS)}")


WORKLOADS = ("dna-suite", "batch-suite", *A10_WORKLOADS)


@dataclass(frozen=True)
class LoadSpec:
    """How requests are sent: vLLM's ``--max-concurrency``, ``--request-rate``, ``--burstiness``."""

    max_concurrency: int | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    warmup: int | None = None  # requests before the timed run; None: one per concurrent slot
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency} must be at least 1 (or None: unbounded)")
        if not self.request_rate > 0:
            raise ValueError(f"request_rate={self.request_rate} must be positive (inf: all at once)")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness={self.burstiness} must be positive (1: Poisson)")
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"warmup={self.warmup} must be >= 0")

    def warmup_requests(self, num_requests: int) -> int:
        if self.warmup is not None:
            return self.warmup
        return min(num_requests, self.max_concurrency or num_requests)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        return d


def arrival_offsets(n: int, request_rate: float, burstiness: float, seed: int = 0) -> np.ndarray:
    """Send times (s after start) of ``n`` requests: cumulative gamma(shape=burstiness,
    scale=1/(rate*burstiness)) gaps, as vLLM; all zero for an infinite rate."""
    if math.isinf(request_rate):
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


@dataclass
class LoadResult:
    workload: Workload
    spec: LoadSpec
    results: list[RequestResult]
    duration_s: float
    warmup_results: list[RequestResult] = field(default_factory=list)

    def metrics(self, slos: dict[str, float] | None = None) -> dict[str, float]:
        return serving_metrics(self.results, self.duration_s, slos)

    def context(self) -> dict[str, Any]:
        return {**self.workload.context(), **{k: v for k, v in self.spec.to_dict().items()},
                "warmup_failed": sum(not r.success for r in self.warmup_results)}


async def _send_all(endpoint: Endpoint, requests: Sequence[Request], spec: LoadSpec,
                    offsets: np.ndarray) -> tuple[list[RequestResult], float]:
    limit = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
    async with client_session(endpoint) as http:
        t0 = time.perf_counter()

        async def one(req: Request, at: float) -> RequestResult:
            delay = at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)  # the arrival process, not a wait for a result
            if limit is None:
                return await stream_completion(http, endpoint, req.prompt_ids, req.max_tokens, t0)
            async with limit:
                return await stream_completion(http, endpoint, req.prompt_ids, req.max_tokens, t0)

        results = await asyncio.gather(*(one(r, float(at)) for r, at in zip(requests, offsets)))
        return list(results), time.perf_counter() - t0


def run_load(endpoint: Endpoint, workload: Workload, spec: LoadSpec,
             progress: Callable[[str], None] | None = None) -> LoadResult:
    """Warm up at the measured concurrency, then send the workload and time it."""
    reqs = list(workload.requests)
    if not reqs:
        raise ValueError(f"workload {workload.name!r} has no requests")
    warm_n = spec.warmup_requests(len(reqs))
    warm: list[RequestResult] = []
    if warm_n:
        warm_reqs = [reqs[i % len(reqs)] for i in range(warm_n)]
        warm_spec = LoadSpec(spec.max_concurrency, math.inf, 1.0, 0, spec.seed)
        warm, _ = asyncio.run(_send_all(endpoint, warm_reqs, warm_spec, np.zeros(warm_n)))
    if progress:
        progress(f"{workload.name}: {len(reqs)} requests, concurrency {spec.max_concurrency or 'unbounded'}, "
                 f"rate {spec.request_rate}/s (warm-up: {warm_n})")
    offsets = arrival_offsets(len(reqs), spec.request_rate, spec.burstiness, spec.seed)
    results, duration = asyncio.run(_send_all(endpoint, reqs, spec, offsets))
    return LoadResult(workload, spec, results, duration, warm)


def sweep(endpoint: Endpoint, workload: Workload, over: str, values: Sequence[float], base: LoadSpec = LoadSpec(),
          progress: Callable[[str], None] | None = None) -> list[LoadResult]:
    """One run per value of ``max_concurrency`` or ``request_rate``, each with its own warm-up."""
    if over not in ("max_concurrency", "request_rate"):
        raise ValueError(f"sweep over {over!r}: expected max_concurrency or request_rate")
    out = []
    for v in values:
        if over == "max_concurrency":
            if not float(v).is_integer():
                raise ValueError(f"max_concurrency {v} must be an integer")
            spec = LoadSpec(int(v), base.request_rate, base.burstiness, base.warmup, base.seed)
        else:
            spec = LoadSpec(base.max_concurrency, float(v), base.burstiness, base.warmup, base.seed)
        out.append(run_load(endpoint, workload, spec, progress))
    return out
