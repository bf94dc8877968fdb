"""The OpenAI-compatible servers of a session: the one at --carbon-endpoint, or a vLLM server the
session starts on its first model (--carbon-serve vllm), one speculative vLLM server per draft,
one at a time, and one scoring server on a checkpoint's DNA-block view, one at a time. Each is
started once; a server that failed to start is not started again, and every server the session
started is stopped at its end, with where its log is."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import BackendError
from harness.session.config import HarnessConfig, ModelRef, served_dtype


class Servers:
    def __init__(self, config: HarnessConfig, checkpoint: Callable[[ModelRef], Path],
                 progress: Callable[[str], None]) -> None:
        self.config = config
        self.progress = progress
        self._checkpoint = checkpoint
        self._server: Any = None
        self._endpoint: Any = None
        self._endpoint_error: Exception | None = None
        self._speculative = OneAtATime("with draft", progress)  # keyed by draft label
        self._scoring = OneAtATime("on the DNA-block view of", progress)  # keyed by checkpoint

    @property
    def started_endpoint(self) -> Any:
        """The endpoint in use (an ``harness.serving.client.Endpoint``), None before the first use."""
        return self._endpoint

    def endpoint(self) -> Any:
        """The serving endpoint: --carbon-endpoint, or a vLLM server this session starts on the first
        model's checkpoint (once; stopped by ``close``). Raises ServerError / ServingError saying why not."""
        if self._endpoint_error is not None:
            raise self._endpoint_error  # tried once this session: do not start a failing server again
        try:
            return self._start_endpoint()
        except Exception as exc:
            self._endpoint_error = exc
            raise

    def _start_endpoint(self) -> Any:
        if self._endpoint is None:
            from harness.serving.client import Endpoint, resolve_endpoint, run_async

            if self.config.endpoint:
                url = self.config.endpoint
            elif self.config.serve == "vllm":
                from harness.serving.server import start_vllm

                ref = self.config.models[0]
                self._server = start_vllm(self._checkpoint(ref), self.config.cache_dir, self._log("vllm"),
                                          served_model=ref.label, dtype=served_dtype(self.config.dtype),
                                          timeout_s=self.config.serve_timeout_s, progress=self.progress)
                url = self._server.url
            else:
                raise BackendError("no server: pass --carbon-endpoint URL or --carbon-serve vllm")
            self._endpoint = run_async(resolve_endpoint(Endpoint.from_env(url, self.config.served_model)))
        return self._endpoint

    def speculative_endpoint(self, draft: ModelRef) -> Any:
        """A vLLM server on the first model with ``draft`` as its speculative draft (``self``: the
        model drafts for itself), started by this session with --carbon-serve vllm. One runs at a time:
        starting the next draft's stops the previous one (tests/serving/conftest.py orders tests by draft). Raises
        BackendError when the session does not start servers (a running server's draft is unknown)."""
        if self.config.serve != "vllm":
            raise BackendError("speculative serving needs a server the harness starts with its draft: --carbon-serve "
                               "vllm (a server at --carbon-endpoint runs whatever draft it was started with, "
                               "which the harness cannot know)")
        return self._speculative.get(draft.label, lambda: self._start_speculative_server(draft))

    def _start_speculative_server(self, draft: ModelRef) -> tuple[Any, Any]:
        from harness.serving.server import speculative_server_cpu_bind, start_vllm
        from harness.serving.speculative import vllm_speculative_config

        target = self.config.models[0]
        draft_path = self._checkpoint(target if draft.label == "self" else draft)
        server = start_vllm(self._checkpoint(target), self.config.cache_dir, self._log(f"vllm-draft-{draft.label}"),
                            served_model=target.label,
                            timeout_s=self.config.serve_timeout_s, progress=self.progress,
                            speculative_config=vllm_speculative_config(draft_path, self.config.speculation_length),
                            cpu_bind=speculative_server_cpu_bind())
        return server, _resolve(server, target.label)

    def stop_speculative_server(self) -> None:
        """Stop the speculative server, if one runs (the next draft's start, the speculative tests'
        module teardown, the session's end)."""
        self._speculative.stop()

    def scoring_endpoint(self, checkpoint: Path) -> Any:
        """Where the openai backend scores ``checkpoint`` (a ``harness.serving.scoring.ScoringEndpoint``):
        with --carbon-serve vllm, a vLLM server this session starts on the checkpoint's DNA-block view
        (every 6-mer at every position, so the marginals are exact; one at a time, stopped at the end);
        with --carbon-endpoint, that server's full vocabulary, whose top-k is refused wherever it leaves a
        6-mer out."""
        from harness.serving.scoring import ScoringEndpoint

        if self.config.endpoint:
            return ScoringEndpoint(self.endpoint())
        if self.config.serve != "vllm":
            raise BackendError("no server: pass --carbon-endpoint URL or --carbon-serve vllm")
        return ScoringEndpoint.dna_view(self._scoring.get(str(checkpoint),
                                                          lambda: self._start_scoring_server(checkpoint)))

    def _start_scoring_server(self, checkpoint: Path) -> tuple[Any, Any]:
        from harness.carbon.dna_view import cached_dna_view
        from harness.serving.server import start_scoring_vllm

        view = cached_dna_view(checkpoint, self.config.cache_dir, self.progress)
        name = f"{checkpoint.name}-dna-view"
        server = start_scoring_vllm(view, self._log("vllm-dna-view"), name, timeout_s=self.config.serve_timeout_s,
                                    progress=self.progress)
        return server, _resolve(server, name)

    def _log(self, name: str) -> Path:
        return self.config.cache_dir / "serving" / "logs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"

    @property
    def server(self) -> Any:
        """The server this session started (a VLLMServer), or None."""
        return self._server

    def close(self) -> None:
        self._speculative.stop()
        self._scoring.stop()
        if self._server is not None:
            self.progress(f"stopping vLLM (pid {self._server.proc.pid}); its log: {self._server.log_path}")
            self._server.stop()
            self._server = None


class OneAtATime:
    """The servers of one kind, one at a time: the same key reuses the running one, another key stops
    it first, and a key whose server failed to start raises that error again instead of starting it again."""

    def __init__(self, what: str, progress: Callable[[str], None]) -> None:
        self.what = what
        self.progress = progress
        self._current: tuple[str, Any, Any] | None = None  # (key, VLLMServer, Endpoint)
        self._errors: dict[str, Exception] = {}

    def get(self, key: str, start: Callable[[], tuple[Any, Any]]) -> Any:
        """The endpoint of ``key``'s server, started by ``start`` (-> server, endpoint) when not running."""
        if key in self._errors:
            raise self._errors[key]
        if self._current is None or self._current[0] != key:
            self.stop()
            try:
                self._current = (key, *start())
            except Exception as exc:
                self._errors[key] = exc
                raise
        return self._current[2]

    def stop(self) -> None:
        if self._current is not None:
            key, server, _ = self._current
            self.progress(f"stopping vLLM {self.what} {key} (pid {server.proc.pid}); its log: {server.log_path}")
            server.stop()
            self._current = None


def _resolve(server: Any, served_model: str) -> Any:
    """The started ``server``'s endpoint for ``served_model``, or the server stopped and the error raised."""
    from harness.serving.client import Endpoint, resolve_endpoint, run_async

    try:
        return run_async(resolve_endpoint(Endpoint.from_env(server.url, served_model)))
    except Exception:
        server.stop()
        raise
