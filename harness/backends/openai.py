"""An engine over an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, vLLM-on-Neuron, SGLang).

Prompts go as token ids from the harness tokenizer, outputs come back as ids (``return_token_ids``)
and are counted as such, never re-tokenized. Every request is greedy (``temperature 0``) with a
fixed output length (``ignore_eos`` and ``min_tokens`` = ``max_tokens``: the published eos id 2 is
a BPE token). Requests stream, so each one yields TTFT, every inter-chunk gap and E2EL
(``harness.serving.RequestResult``). The API key comes from ``$CARBON_API_KEY`` and is never
logged or put in a result.

A failure (connection refused, HTTP error, a stream that stalls past the read timeout or ends
early) never raises out of a request: it becomes a failed ``RequestResult`` with a one-line
error, so a benchmark counts it in ``failed`` instead of hanging or losing the other requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import torch

from harness.backends.base import Batch, BackendError, Engine, EngineInfo, GenerationResult, Selector
from harness.serving import RequestResult, failure_summary
from harness.spec import RunShape

API_KEY_ENV = "CARBON_API_KEY"
INSTALL_HINT = "pip install 'carbon-harness[serving]' (aiohttp)"


class ServingError(BackendError):
    """A server could not be reached or answered something unusable; the message says which."""


def parse_endpoint(url: str) -> str:
    """The server's base URL (``http://HOST:PORT``, an optional trailing ``/v1`` dropped)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--carbon-endpoint {url!r}: expected http(s)://HOST:PORT of an OpenAI-compatible server")
    base = url.strip().rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


@dataclass(frozen=True)
class Endpoint:
    """Where a server listens and how long to wait for it. ``api_key`` is kept out of repr."""

    url: str
    model: str | None = None  # the served model name; None: the server's only model
    api_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0  # longest silence tolerated inside a stream

    @classmethod
    def from_env(cls, url: str, model: str | None = None, **kw: Any) -> "Endpoint":
        return cls(parse_endpoint(url), model, os.environ.get(API_KEY_ENV) or None, **kw)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def with_model(self, model: str) -> "Endpoint":
        return Endpoint(self.url, model, self.api_key, self.connect_timeout_s, self.read_timeout_s)


def _aiohttp():
    try:
        import aiohttp
    except ImportError:
        raise BackendError(f"the openai backend needs aiohttp: {INSTALL_HINT}") from None
    return aiohttp


def client_session(endpoint: Endpoint, limit: int = 0):
    aiohttp = _aiohttp()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=endpoint.connect_timeout_s,
                                    sock_read=endpoint.read_timeout_s)
    return aiohttp.ClientSession(timeout=timeout, headers=endpoint.headers(),
                                 connector=aiohttp.TCPConnector(limit=limit))


def completion_body(model: str, prompt_ids: Sequence[int], max_tokens: int, stream: bool = True,
                    **extra: Any) -> dict[str, Any]:
    """A greedy, fixed-length completions request on token ids (vLLM / SGLang extensions included)."""
    body = {"model": model, "prompt": [int(t) for t in prompt_ids], "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "min_tokens": max_tokens, "return_token_ids": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def _describe(exc: BaseException, url: str) -> str:
    aiohttp = _aiohttp()
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {url}: {exc.os_error or exc}"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"timed out waiting for {url} (connect or read timeout)"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"stream from {url} was cut: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"{url} closed the connection"
    return f"{type(exc).__name__} from {url}: {exc}"


def _chunk_ids(choice: dict[str, Any]) -> list[int] | None:
    ids = choice.get("token_ids")
    return [int(t) for t in ids] if ids is not None else None


async def stream_completion(http: Any, endpoint: Endpoint, prompt_ids: Sequence[int], max_tokens: int,
                            t0: float | None = None) -> RequestResult:
    """One streamed request; never raises for a server failure (see the module docstring)."""
    url = f"{endpoint.url}/v1/completions"
    start = time.perf_counter()
    result = RequestResult(prompt_len=len(prompt_ids), start_s=start - (t0 if t0 is not None else start),
                           expected_tokens=max_tokens)
    body = completion_body(endpoint.model or "", prompt_ids, max_tokens)
    last = start
    done = False
    try:
        async with http.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300].replace("\n", " ")
                result.error = f"HTTP {resp.status} from {url}: {text}"
                return result
            async for raw in resp.content:
                line = raw.strip()
                if not line or not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    result.error = f"server error in stream from {url}: {event['error']}"
                    return result
                for choice in event.get("choices") or []:
                    ids = _chunk_ids(choice)
                    if ids is None:
                        if choice.get("text"):
                            result.error = (f"{url} streams text without token ids: the server must support "
                                            "return_token_ids (vLLM >= 0.10) so tokens are counted exactly")
                            return result
                        continue
                    if not ids:
                        continue
                    now = time.perf_counter()
                    if result.ttft_ms is None:
                        result.ttft_ms = (now - start) * 1000.0
                    else:
                        result.itl_ms.append((now - last) * 1000.0)
                    last = now
                    result.output_ids.extend(ids)
    except Exception as exc:  # noqa: BLE001 - every client failure becomes a counted, described failure
        result.error = _describe(exc, url)
        return result
    finally:
        result.e2el_ms = (last - start) * 1000.0
    if not done:
        result.error = f"stream from {url} ended without [DONE] after {result.output_len} of {max_tokens} tokens"
    elif result.output_len != max_tokens:
        result.error = (f"{url} returned {result.output_len} tokens, asked for exactly {max_tokens} "
                        "(ignore_eos / min_tokens not honoured?)")
    return result


async def fetch_prompt_logprobs(http: Any, endpoint: Endpoint, prompt_ids: Sequence[int],
                                top_k: int) -> list[dict[int, float] | None]:
    """Top-``top_k`` log-probabilities at every prompt position (vLLM's ``prompt_logprobs``;
    the server needs ``--max-logprobs`` >= top_k). Position 0 has none (None)."""
    url = f"{endpoint.url}/v1/completions"
    body = completion_body(endpoint.model or "", prompt_ids, 1, stream=False, prompt_logprobs=top_k)
    async with http.post(url, json=body) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise ServingError(f"prompt_logprobs={top_k} refused by {url} (HTTP {resp.status}): {text[:300]}")
    choice = json.loads(text)["choices"][0]
    rows = choice.get("prompt_logprobs")
    if rows is None:
        raise ServingError(f"{url} returned no prompt_logprobs: the server must be vLLM with --max-logprobs >= {top_k}")
    return [None if row is None else {int(k): float(v["logprob"]) for k, v in row.items()} for row in rows]


async def served_models(http: Any, endpoint: Endpoint) -> list[str]:
    url = f"{endpoint.url}/v1/models"
    async with http.get(url) as resp:
        if resp.status != 200:
            raise ServingError(f"GET {url}: HTTP {resp.status}: {(await resp.text())[:300]}")
        return [m["id"] for m in (await resp.json())["data"]]


async def fetch_metrics(http: Any, endpoint: Endpoint) -> str:
    """The server's Prometheus text (``GET /metrics``; vLLM and SGLang serve one)."""
    url = f"{endpoint.url}/metrics"
    try:
        async with http.get(url) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ServingError(f"GET {url}: HTTP {resp.status}: {text[:300]}")
            return text
    except ServingError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise ServingError(_describe(exc, url)) from None


def metrics_text(endpoint: Endpoint) -> str:
    """``fetch_metrics`` from synchronous code (between benchmark runs)."""
    async def go() -> str:
        async with client_session(endpoint) as http:
            return await fetch_metrics(http, endpoint)

    return run_async(go())


async def resolve_endpoint(endpoint: Endpoint) -> Endpoint:
    """The endpoint with its model named: the given one, checked against /v1/models, or the only one."""
    async with client_session(endpoint) as http:
        try:
            models = await served_models(http, endpoint)
        except ServingError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ServingError(_describe(exc, f"{endpoint.url}/v1/models")) from None
    if endpoint.model:
        if endpoint.model not in models:
            raise ServingError(f"--carbon-served-model {endpoint.model!r} is not served at {endpoint.url}; "
                               f"it serves {models}")
        return endpoint
    if len(models) != 1:
        raise ServingError(f"{endpoint.url} serves {models}: name one with --carbon-served-model")
    return endpoint.with_model(models[0])


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


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
            raise NotImplementedError("a server samples on its side: custom token selection (FNS) needs logits")
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
        raise NotImplementedError("a server exposes no separate prefill step: TTFT in tests/serving measures it")

    def decode_step(self) -> torch.Tensor:
        raise NotImplementedError("a server exposes no separate decode step: ITL in tests/serving measures it")

    def logits(self, batch: Batch) -> torch.Tensor:
        raise NotImplementedError("a server returns top-k logprobs, not full-vocabulary logits "
                                  "(fetch_prompt_logprobs gives the top-k)")
