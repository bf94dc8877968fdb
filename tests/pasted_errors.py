"""The issue-50 errors a user pastes into ``carbon-harness explain`` and the site search, each produced as the
user meets it, and the troubleshooting entry each must land on (tests/unit/test_troubleshooting.py,
tests/unit/test_docs_site.py). Cheap paths only: no torch, and the vLLM server that never answers is a shell
given no time."""

from __future__ import annotations

import json

import pytest

from harness.core import troubleshooting as tr

FOUR = ["vllm", "cores", "thresholds", "model"]


def vllm_not_ready(tmp_path) -> str:
    """A vLLM server that never answers: a shell standing in for its Python, given 0 s to be ready."""
    from harness.serving.server import ServerError, VLLMServer

    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'INFO loading model weights'\nexec sleep 600\n")
    python.chmod(0o755)
    server = VLLMServer(tmp_path / "ckpt", tmp_path / "tok", tmp_path / "logs" / "server.log", python=str(python))
    with pytest.raises(ServerError) as exc:
        server.start().wait_ready(timeout_s=0)
    assert server.proc.poll() is not None  # stopped with the error
    return str(exc.value)


def core_plan_error() -> str:
    from harness.core.neuron_cores import CorePlanError, plan_cores

    with pytest.raises(CorePlanError) as exc:
        plan_cores("trn2.3xlarge", 4, {"baseline": 4, "candidate": 8})
    return str(exc.value)


def thresholds_typo(tmp_path) -> str:
    """As pytest prints it: ``ERROR: carbon-harness: <the loader's message>``."""
    from harness.analysis.gates import ThresholdError, load_thresholds

    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": 1, "thresholds": [
        {"hardware": "cpu", "model": "carbon-tiny", "shape": "smoke", "metric": "tkg_ms_p50", "maxx": 3.0}]}))
    with pytest.raises(ThresholdError) as exc:
        load_thresholds([path])
    return f"ERROR: carbon-harness: {exc.value}"


def unknown_model(tmp_path, capsys) -> str:
    """``carbon-harness checkpoint --model carbon-9b --out DIR``: argparse's line, exit status 2."""
    from harness.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["checkpoint", "--model", "carbon-9b", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def entry_of(module: str, words: str) -> tr.Entry:
    found = [e for e in tr.index().entries if any(s.startswith(module + ":") for s in e.sites) and words in e.message]
    assert len(found) == 1, found
    return found[0]


def pasted(name: str, tmp_path, capsys) -> tuple[str, str, tr.Entry]:
    """(the whole error, a fragment of it, the entry both must find)."""
    if name == "vllm":
        whole = vllm_not_ready(tmp_path)
        assert whole.startswith("vLLM server not ready after 0 s; last lines of ")
        return whole, "vLLM server not ready after 3600 s; last lines of", entry_of("harness/serving/server.py",
                                                                                    "not ready after")
    if name == "cores":
        whole = core_plan_error()
        return whole, "needs tp 8 NeuronCores; trn2.3xlarge has 4", entry_of("harness/core/neuron_cores.py",
                                                                               "needs tp")
    if name == "thresholds":
        whole = thresholds_typo(tmp_path)
        assert "unknown field 'maxx' (did you mean 'max'?)" in whole
        return whole, "unknown field 'maxx' (did you mean 'max'?); fields: baseline", entry_of(
            "harness/analysis/gates.py", "unknown field <field>")
    whole = unknown_model(tmp_path, capsys)
    assert whole.startswith("carbon-harness checkpoint: error: argument --model: unknown model 'carbon-9b'"), whole
    return whole, "unknown model 'carbon-9b'; known models: carbon-500m", entry_of("harness/core/spec.py",
                                                                                  "unknown model <name>")
