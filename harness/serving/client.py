"""The torch-free client of an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, vLLM-on-Neuron,
SGLang), as vLLM's benchmark ``lib/`` is to vLLM: it never imports the engines it measures.

Prompts go as token ids from the harness tokenizer, outputs come back as ids (``return_token_ids``)
and are counted as such, never re-tokenized. Every request is greedy (``temperature 0``) with a
fixed output length (``ignore_eos`` and ``min_tokens`` = ``max_tokens``: the published eos id 2 is
a BPE token). Requests stream, so each one yields TTFT, every inter-chunk gap and E2EL
(``harness.serving.client.RequestResult``). The API key comes from ``$CARBON_API_KEY`` and is never
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

from harness.core.errors import BackendError
from harness.core.options import parse_endpoint

API_KEY_ENV = "CARBON_API_KEY"
INSTALL_HINT = "pip install 'carbon-harness[serving]' (aiohttp)"
# How long an idle pooled connection may be reused. uvicorn, the HTTP server of vLLM and SGLang, closes a
# connection idle for 5 s by default (vLLM: $VLLM_HTTP_TIMEOUT_KEEP_ALIVE); a client that keeps it longer
# (aiohttp's default is 15 s) can write its next request onto a connection the server is closing, and count
# a failed request the server never saw. That is what vLLM's own benchmark client (60 s) did on the loaded CI
# box: one request of 16 lost in 2 of 8 rounds, "Cannot write to closing transport" / "Server disconnected".
CLIENT_KEEP_ALIVE_S = 2.0


class ServingError(BackendError):
    """A server could not be reached or answered something unusable; the message says which."""


@dataclass
class RequestResult:
    """One request as the client saw it: ids returned by the server and the stream's timings."""

    prompt_len: int
    output_ids: list[int] = field(default_factory=list)
    ttft_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)  # one gap per streamed chunk after the first
    e2el_ms: float = 0.0
    start_s: float = 0.0  # when it was sent, seconds after the benchmark started
    error: str | None = None
    expected_tokens: int | None = None

    @property
    def success(self) -> bool:
        return self.error is None

    @property
    def output_len(self) -> int:
        return len(self.output_ids)

    @property
    def tpot_ms(self) -> float | None:
        """vLLM's per-request TPOT; None for a single output token (vLLM counts it as 0 for goodput)."""
        if self.ttft_ms is None or self.output_len < 2:
            return None
        return (self.e2el_ms - self.ttft_ms) / (self.output_len - 1)


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
    """One pool of connections for a benchmark: reused (as vLLM's benchmark client does, so a request's TTFT
    holds no handshake), but never past ``CLIENT_KEEP_ALIVE_S`` idle."""
    aiohttp = _aiohttp()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=endpoint.connect_timeout_s,
                                    sock_read=endpoint.read_timeout_s)
    return aiohttp.ClientSession(timeout=timeout, headers=endpoint.headers(),
                                 connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=CLIENT_KEEP_ALIVE_S))


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
