"""STAND-IN for a vLLM server's readiness endpoint: answers ``GET /v1/models`` with one served model, as
vLLM's OpenAI server does, and nothing else. For unit tests of what starts, stops and reads back servers
(a release check's NeuronCore turns), where a real vLLM start (a minute on this CPU) is not what is tested.
With STANDIN_WORKER_CORES set, it first starts one "worker" in its own process group whose
NEURON_VISIBLE_DEVICES is that value (a vLLM Neuron server's TP worker, for the read-back of every process).
Usage: python server.py PORT MODEL"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"object": "list", "data": [{"id": sys.argv[2], "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    import os
    import subprocess

    if os.environ.get("STANDIN_WORKER_CORES"):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         env={**os.environ, "NEURON_VISIBLE_DEVICES": os.environ["STANDIN_WORKER_CORES"]})
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Models).serve_forever()
