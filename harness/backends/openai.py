"""The engine adapter over an OpenAI-compatible server: a static batch sent as concurrent streamed
requests through the torch-free client (``harness.serving.client``), read back as a
``GenerationResult`` with the server's own timings per request."""

from __future__ import annotations

import asyncio
import time

import torch

from harness.backends.base import Batch, Engine, EngineInfo, GenerationResult, Selector
from harness.core.errors import BackendCannot
from harness.core.spec import RunShape
from harness.serving.client import (
    Endpoint,
    RequestResult,
    ServingError,
    _aiohttp,
    client_session,
    resolve_endpoint,
    run_async,
    stream_completion,
)
from harness.serving.metrics import failure_summary


class OpenAIEngine(Engine):
    """A served model measured through its API: ``generate`` sends a batch's rows as concurrent
    streamed requests. A server exposes no separate CTE / TKG step and no full-vocabulary logits,
    so ``prefill`` and ``decode_step`` / ``logits`` are not available; the serving benchmarks
    (tests/serving) measure TTFT / ITL instead."""

    def __init__(self, endpoint: Endpoint, shape: RunShape, model_name: str, checkpoint: str = "") -> None:
        _aiohttp()
        start = time.perf_counter()
        self.endpoint = run_async(resolve_endpoint(endpoint))
        self.shape = shape
        self.info = EngineInfo("openai", model_name, checkpoint, shape.name, device=self.endpoint.url,
                               dtype="server", load_s=time.perf_counter() - start,
                               extra={"served_model": self.endpoint.model})

    def requests(self, batch: Batch, max_new_tokens: int) -> list[RequestResult]:
        rows = [batch.input_ids[i, :n].tolist() for i, n in enumerate(batch.prompt_lengths.tolist())]

        async def go() -> list[RequestResult]:
            async with client_session(self.endpoint) as http:
                t0 = time.perf_counter()
                return list(await asyncio.gather(*(stream_completion(http, self.endpoint, r, max_new_tokens, t0)
                                                   for r in rows)))

        return run_async(go())

    def generate(self, batch: Batch, max_new_tokens: int, select: Selector | None = None) -> GenerationResult:
        if select is not None:
            raise BackendCannot("a server samples on its side: custom token selection (FNS) needs logits")
        self.check_batch(batch, max_new_tokens)
        start = time.perf_counter()
        results = self.requests(batch, max_new_tokens)
        e2e_ms = (time.perf_counter() - start) * 1000.0
        if not all(r.success for r in results):
            raise ServingError(f"{sum(not r.success for r in results)} of {len(results)} requests failed: "
                               f"{failure_summary(results)}")
        tokens = torch.tensor([r.output_ids for r in results], dtype=torch.long)
        ttft = max(r.ttft_ms or 0.0 for r in results)
        return GenerationResult(tokens, cte_ms=ttft, tkg_ms=[g for r in results for g in r.itl_ms], e2e_ms=e2e_ms)

    def prefill(self, batch: Batch) -> torch.Tensor:
        raise BackendCannot("a server exposes no separate prefill step: TTFT in tests/serving measures it")

    def decode_step(self) -> torch.Tensor:
        raise BackendCannot("a server exposes no separate decode step: ITL in tests/serving measures it")

    def logits(self, batch: Batch) -> torch.Tensor:
        raise BackendCannot("a server returns top-k logprobs, not full-vocabulary logits "
                                  "(fetch_prompt_logprobs gives the top-k)")
