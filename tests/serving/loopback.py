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
