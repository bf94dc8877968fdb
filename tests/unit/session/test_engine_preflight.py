"""An engine or server the command line asked for that cannot start here stops the session at
start with one line, instead of a run of skips that exits 0 (``--carbon-backend neuron`` already did)."""

from __future__ import annotations

import re
import socket
import sys

import pytest

from harness.core.errors import BackendError
from harness.session.config import make_config
from harness.session.preflight import check_backend_available
from tests.helpers import REPO, run_pytest
from tests.helpers import plugin_options as options

pytestmark = pytest.mark.unit


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_vllm_without_vllm_stops_the_run_with_one_line(tmp_path, monkeypatch):
    """The issue's command: in a Python without vLLM it gave passes and skips, exit 0."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this Python has vllm: --carbon-serve vllm can start here")
    monkeypatch.delenv("CARBON_VLLM_PYTHON", raising=False)
    r = run_pytest("-m", "perf or serving", "--co", "-q", "--carbon-backend", "openai", "--carbon-serve", "vllm",
                   cache_dir=tmp_path)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert errors == [f"ERROR: carbon-harness: --carbon-serve vllm cannot start here: this Python ({sys.executable}) "
                      "has no vllm and CARBON_VLLM_PYTHON is not set; needs a Python with vllm: "
                      + errors[0].split("needs a Python with vllm: ", 1)[-1]], r.stderr
    assert "Traceback" not in r.stderr


def test_a_vllm_python_that_does_not_exist_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("CARBON_VLLM_PYTHON", str(tmp_path / "no-python"))
    cfg = make_config(options(backend="openai", serve="vllm"), REPO)
    with pytest.raises(BackendError, match=re.escape(f"--carbon-serve vllm cannot start here: CARBON_VLLM_PYTHON="
                                                     f"{tmp_path / 'no-python'} is not an executable file")):
        check_backend_available(cfg)


def test_an_endpoint_that_does_not_answer_stops_the_run(monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    cfg = make_config(options(backend="openai", endpoint=url), REPO)
    with pytest.raises(BackendError, match=re.escape(f"--carbon-endpoint {url} cannot be used: cannot connect to {url}/v1/models")):
        check_backend_available(cfg)
    check_backend_available(cfg, connect=False)  # --collect-only: no server is asked


@pytest.mark.parametrize("overrides, message", [
    ({"backend": "openai", "endpoint": "http://127.0.0.1:9", "drafts": ["carbon-tiny-draft"]},
     "--carbon-draft carbon-tiny-draft cannot run with --carbon-endpoint: speculative serving needs a server the "
     "harness starts with its draft: --carbon-serve vllm"),
    ({"backend": "neuron", "neuron_cpu": True, "drafts": ["self"]},
     "--carbon-draft self cannot run on --carbon-backend neuron: the harness does not run NxDI speculation yet"),
])
def test_a_requested_draft_that_cannot_run_is_an_error(overrides, message):
    cfg = make_config(options(**overrides), REPO)
    with pytest.raises(BackendError, match=re.escape(message)):
        check_backend_available(cfg, connect=False)


def test_the_default_drafts_are_not_a_request():
    """Without --carbon-draft the speculative tests skip on a backend that cannot run them, saying why."""
    cfg = make_config(options(backend="openai", endpoint="http://127.0.0.1:9"), REPO)
    assert not cfg.drafts_requested
    check_backend_available(cfg, connect=False)
