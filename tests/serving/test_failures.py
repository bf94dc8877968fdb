"""A server that refuses, stalls, cuts or short-changes a stream gives each request a clear error
and a ``failed`` count, never a hang: tested against real HTTP servers on 127.0.0.1 that misbehave
on purpose (no vLLM needed, only aiohttp)."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

try:
    from aiohttp import web
except ImportError:  # carbon_serving_client errors (the run asked for serving) or skips, saying which
    web = None

from harness.backends.base import Batch
from harness.backends.openai import OpenAIEngine
from harness.core.spec import get_shape
from harness.serving.client import Endpoint, ServingError
from harness.serving.loadgen import LoadSpec, Request, Workload, run_load
from tests.serving.loopback import AppServer

pytestmark = [pytest.mark.serving, pytest.mark.usefixtures("carbon_serving_client")]

MAX_TOKENS = 4


def chunk(ids: list[int]) -> bytes:
    event = {"object": "text_completion", "choices": [{"index": 0, "text": "x", "token_ids": ids}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class MisbehavingServer(AppServer):
    """An OpenAI-style completions server on a loopback port, misbehaving as ``mode`` says:
    refuse (HTTP 503), stall (one token, then silence), drop (one token, then the connection is cut),
    short (fewer tokens than asked, then [DONE]), text (text without token ids), alternate (every
    second request refused, the others answered in full)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.calls = 0
        self.release = asyncio.Event()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "carbon-tiny"}]})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        body = await request.json()
        n = int(body["max_tokens"])
        if self.mode == "refuse" or (self.mode == "alternate" and self.calls % 2 == 0):
            return web.Response(status=503, text="server overloaded")
        if self.mode == "no-prompt-logprobs":  # vllm-project/vllm-neuron 0.2.0's answer: one null, whatever the prompt
            return web.json_response({"choices": [{"index": 0, "text": "", "prompt_logprobs": [None]}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.mode == "text":
            await resp.write(b'data: {"choices": [{"index": 0, "text": "ACGT"}]}\n\n')
            await resp.write(b"data: [DONE]\n\n")
            return resp
        await resp.write(chunk([151672]))
        if self.mode == "stall":
            await self.release.wait()  # set at teardown: the client's read timeout must fire first
            return resp
        if self.mode == "drop":
            request.transport.close()
            return resp
        sent = 1
        target = n - 1 if self.mode == "short" else n
        while sent < target:
            await resp.write(chunk([151673]))
            sent += 1
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.complete)

    def before_cleanup(self) -> None:
        self.loop.call_soon_threadsafe(self.release.set)  # the stalled handler's wait ends

    def endpoint(self) -> Endpoint:
        """Timeouts no healthy answer comes near on a loaded machine (the client's defaults): only the
        stall test waits for one, and there its firing is the outcome tested (``stalled_endpoint``)."""
        return Endpoint(f"http://127.0.0.1:{self.port}", "carbon-tiny")

    def stalled_endpoint(self) -> Endpoint:
        """A short read timeout, for the server that goes silent after its first token: on any machine the
        timeout fires while it stays silent (it stays so until teardown), so a slow box changes nothing."""
        return Endpoint(f"http://127.0.0.1:{self.port}", "carbon-tiny", read_timeout_s=0.5)


def workload(n: int = 4) -> Workload:
    return Workload("failures", tuple(Request((151669, 151672, 151673), MAX_TOKENS, str(i)) for i in range(n)), 2)


@pytest.mark.parametrize("mode, error", [
    ("refuse", "HTTP 503 .*server overloaded"),
    ("stall", "timed out"),
    ("drop", "(cut|closed the connection|ended without \\[DONE\\])"),
    ("short", f"returned {MAX_TOKENS - 1} tokens, asked for exactly {MAX_TOKENS}"),
    ("text", "without token ids"),
])
def test_misbehaving_server_counts_failures(mode, error):
    with MisbehavingServer(mode) as server:
        endpoint = server.stalled_endpoint() if mode == "stall" else server.endpoint()
        run = run_load(endpoint, workload(), LoadSpec(max_concurrency=2, warmup=0))
    metrics = run.metrics()
    assert (metrics["completed"], metrics["failed"]) == (0, 4)
    assert all(r.error for r in run.results)
    assert all(__import__("re").search(error, r.error) for r in run.results), run.results[0].error
    assert not any(k.endswith("_ms") for k in metrics)  # nothing measured, nothing reported


def test_refused_connection_is_a_failure_not_a_hang():
    with socket.socket() as s:  # a loopback port that nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = Endpoint(f"http://127.0.0.1:{port}", "carbon-tiny")  # refused at once: no timeout is involved
    run = run_load(endpoint, workload(2), LoadSpec(max_concurrency=1, warmup=0))
    assert run.metrics()["failed"] == 2
    assert all(r.error.startswith(f"cannot connect to http://127.0.0.1:{port}") for r in run.results)


def test_failures_do_not_lose_the_other_requests():
    with MisbehavingServer("alternate") as server:
        run = run_load(server.endpoint(), workload(6), LoadSpec(max_concurrency=1, warmup=0))
    metrics = run.metrics()
    assert (metrics["completed"], metrics["failed"]) == (3, 3)
    assert metrics["total_output_tokens"] == 3 * MAX_TOKENS
    assert metrics["mean_ttft_ms"] > 0 and metrics["mean_itl_ms"] > 0


def test_engine_generate_names_the_failures():
    with MisbehavingServer("refuse") as server:
        engine = OpenAIEngine(server.endpoint(), get_shape("a100-style-bs16"), "carbon-tiny")
        batch = Batch.from_ids([[151669, 151672], [151669, 151673]])
        with pytest.raises(ServingError, match="2 of 2 requests failed: 2 x HTTP 503"):
            engine.generate(batch, MAX_TOKENS)


def test_unknown_served_model_is_named():
    with MisbehavingServer("refuse") as server:
        endpoint = Endpoint(server.endpoint().url, "carbon-3b")
        with pytest.raises(ServingError, match="'carbon-3b' is not served .*carbon-tiny"):
            OpenAIEngine(endpoint, get_shape("smoke"), "carbon-3b")


def test_a_server_without_prompt_logprobs_is_named_not_an_index_error():
    """The NxDI-based vLLM Neuron plugin (0.2.0) answers prompt_logprobs with ``[null]``: the output contract's
    scored rows then come from one-token requests on each prefix (``harness.serving.scoring_prefix``); a server
    that answers those with nothing either is named (an IndexError before)."""
    with MisbehavingServer("no-prompt-logprobs") as server:
        engine = OpenAIEngine(server.endpoint(), get_shape("smoke"), "carbon-tiny")
        with pytest.raises(ServingError, match="one-token request on the prefix of position [0-9]+ with 0 tokens: it "
                                               "computes neither prompt logprobs"):
            engine.scored([151669, 151672, 151673], [151674, 151675], top_k=2)
