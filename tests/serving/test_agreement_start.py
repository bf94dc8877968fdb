"""The side-by-side start of the agreement run (``harness.serving.agreement``): the harness's client
starts its timed run when ``vllm bench serve`` starts its own, and never runs alone. Against a real HTTP
server on 127.0.0.1 that answers completions as vLLM streams them (no vLLM server needed); the start
signal's test runs vLLM's own benchmark code, so it needs a Python with vllm; the harness's client needs
aiohttp."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from harness.serving.agreement import _harness_side, run_vllm_bench_once, vllm_bench_args
from harness.serving.loadgen import Request, Workload
from tests.serving.loopback import QuietHandler, http_server

pytestmark = [pytest.mark.serving, pytest.mark.usefixtures("carbon_serving_client")]

MODEL = "carbon-tiny"


@contextmanager
def completions_server(started: threading.Event) -> Iterator[tuple[str, list[bool]]]:
    """Streams ``max_tokens`` chunks (text and token ids, as vLLM with ``return_token_ids``) and a usage
    chunk for every completion; yields its URL and the list it records, for each completion as it
    arrives, whether ``started`` was set."""
    arrivals: list[bool] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            arrivals.append(started.is_set())
            n = int(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["max_tokens"])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")  # the stream ends where the connection does
            self.end_headers()
            for _ in range(n):
                event = {"object": "text_completion", "choices": [{"index": 0, "text": "x", "token_ids": [151672]}]}
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            usage = {"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")

    with http_server(Handler) as port:
        yield f"http://127.0.0.1:{port}", arrivals


class NeverStarts(threading.Event):
    """``vllm bench serve``'s start signal when its timed run never comes: the wait times out, at once
    here instead of after the 600 s the agreement run allows."""

    def wait(self, timeout: float | None = None) -> bool:
        return False


def test_the_harness_client_never_runs_alone():
    """The harness's client warms up, says it is ready, and when ``vllm bench serve`` never starts its timed
    run it fails: a run alone would be compared as if it had run side by side."""
    ready, started, figures = threading.Event(), NeverStarts(), queue.Queue()
    workload = Workload("w", tuple(Request((1, 2, 3), 4, f"r{i}") for i in range(4)), 2)
    with completions_server(started) as (url, arrivals):
        with pytest.raises(RuntimeError, match="vllm bench serve did not start its timed run within 600 s"):
            _harness_side(url, MODEL, workload, 2, ready, started, figures)
    assert ready.is_set()
    assert arrivals == [False, False], "only the warm-up (one request per slot) may have been sent"
    assert figures.empty(), "no figures from a run alone"


@pytest.mark.parametrize("ready_check", ["none", "on the warm-ups' input", "on a copy"])
def test_vllm_bench_starts_the_harness_as_its_timed_run_begins(ready_check, carbon_session, tmp_path, monkeypatch):
    """``started`` is set after vLLM's warm-ups (and its ready check's test request, when it makes one),
    before the first request of its timed run, however vLLM builds those inputs. vLLM 0.32 skips the
    ready check by default and sends one input object for every warm-up (and for the ready check, when
    asked for one); a ready check that sends a copy must not move the signal."""
    serve = pytest.importorskip("vllm.benchmarks.serve", reason="runs vLLM's own benchmark client: run in a "
                                "Python with vllm (nox -s serving)")
    from harness.serving.server import serving_tokenizer_dir

    if ready_check == "on a copy":
        original = serve.wait_for_endpoint

        async def ready_check_on_a_copy(request_func, test_input, session, **kw):
            return await original(request_func, replace(test_input), session, **kw)

        monkeypatch.setattr(serve, "wait_for_endpoint", ready_check_on_a_copy)
    prompts, concurrency = 4, 2
    ready, started = threading.Event(), threading.Event()
    ready.set()  # the harness's client warmed up
    tokenizer = serving_tokenizer_dir(carbon_session.config.cache_dir)
    with completions_server(started) as (url, arrivals):
        args = vllm_bench_args(url, MODEL, str(tokenizer), prompts, 16, 4, concurrency, str(tmp_path), seed=0)
        if ready_check != "none":
            args += ["--ready-check-timeout-sec", "120"]
        result = run_vllm_bench_once(args, str(tmp_path), started, ready)
    assert result["completed"] == prompts
    untimed = concurrency + (ready_check != "none")  # the warm-ups, one per slot, and the ready check's request
    assert arrivals == [False] * untimed + [True] * prompts, (
        "the ready check and the warm-ups must come before the start signal, every timed request after it")
