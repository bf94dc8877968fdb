"""Real HTTP servers on a loopback port for the serving tests that need no vLLM: a request handler
(``http.server``) served from a thread for as long as the ``with`` block runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on 127.0.0.1 (one thread per request); yields the port."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)


class QuietHandler(BaseHTTPRequestHandler):
    """No access log on stderr."""

    def log_message(self, *args: object) -> None:
        pass


class AppServer:
    """An aiohttp application on a loopback port, in its own thread and event loop, for as long as the ``with``
    block runs: for handlers that stream (aiohttp's ``StreamResponse``) or wait on the loop. A subclass adds its
    routes in ``routes`` and may release what its handlers wait on in ``before_cleanup``."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def routes(self, app) -> None:
        raise NotImplementedError

    def before_cleanup(self) -> None:
        """Runs on the test's thread before the server stops."""

    def _run(self) -> None:
        import asyncio

        from aiohttp import web

        asyncio.set_event_loop(self.loop)
        app = web.Application()
        self.routes(app)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(timeout=30), "the test server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        import asyncio

        self.before_cleanup()
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
