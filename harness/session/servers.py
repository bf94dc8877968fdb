"""The OpenAI-compatible servers of a session: the one at --carbon-endpoint, or a vLLM server the
session starts on its first model (--carbon-serve vllm), and one speculative vLLM server per draft,
one at a time. Each is started once; a server that failed to start is not started again, and
every server the session started is stopped at its end, with where its log is."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import BackendError
from harness.session.config import HarnessConfig, ModelRef


class Servers:
    def __init__(self, config: HarnessConfig, checkpoint: Callable[[ModelRef], Path],
                 progress: Callable[[str], None]) -> None:
        self.config = config
        self.progress = progress
        self._checkpoint = checkpoint
        self._server: Any = None
        self._endpoint: Any = None
        self._endpoint_error: Exception | None = None
        self._speculative_server: tuple[str, Any, Any] | None = None  # (draft label, VLLMServer, Endpoint)
        self._speculative_errors: dict[str, Exception] = {}  # drafts whose server failed: not started again

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
                log = self.config.cache_dir / "serving" / "logs" / f"vllm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
                self._server = start_vllm(self._checkpoint(ref), self.config.cache_dir, log, served_model=ref.label,
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
        if draft.label in self._speculative_errors:
            raise self._speculative_errors[draft.label]
        if self._speculative_server is not None and self._speculative_server[0] == draft.label:
            return self._speculative_server[2]
        self.stop_speculative_server()
        try:
            self._speculative_server = self._start_speculative_server(draft)
        except Exception as exc:
            self._speculative_errors[draft.label] = exc
            raise
        return self._speculative_server[2]

    def _start_speculative_server(self, draft: ModelRef) -> tuple[str, Any, Any]:
        from harness.serving.client import Endpoint, resolve_endpoint, run_async
        from harness.serving.server import speculative_server_cpu_bind, start_vllm
        from harness.serving.speculative import vllm_speculative_config

        target = self.config.models[0]
        draft_path = self._checkpoint(target if draft.label == "self" else draft)
        log = (self.config.cache_dir / "serving" / "logs"
               / f"vllm-draft-{draft.label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
        server = start_vllm(self._checkpoint(target), self.config.cache_dir, log, served_model=target.label,
                            timeout_s=self.config.serve_timeout_s, progress=self.progress,
                            speculative_config=vllm_speculative_config(draft_path, self.config.speculation_length),
                            cpu_bind=speculative_server_cpu_bind())
        try:
            endpoint = run_async(resolve_endpoint(Endpoint.from_env(server.url, target.label)))
        except Exception:
            server.stop()
            raise
        return draft.label, server, endpoint

    def stop_speculative_server(self) -> None:
        """Stop the speculative server, if one runs (the next draft's start, the speculative tests'
        module teardown, the session's end)."""
        if self._speculative_server is not None:
            label, server, _ = self._speculative_server
            self.progress(f"stopping vLLM with draft {label} (pid {server.proc.pid}); its log: {server.log_path}")
            server.stop()
            self._speculative_server = None

    @property
    def server(self) -> Any:
        """The server this session started (a VLLMServer), or None."""
        return self._server

    def close(self) -> None:
        self.stop_speculative_server()
        if self._server is not None:
            self.progress(f"stopping vLLM (pid {self._server.proc.pid}); its log: {self._server.log_path}")
            self._server.stop()
            self._server = None
