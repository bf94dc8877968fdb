"""What a run without the serving client, or without part of a serving comparison, says: the README's
install provides aiohttp; without it the serving failure tests skip in a plain run and error in a run
that asked for serving; and a skip reason never tells the user to pass an option they already passed."""

from __future__ import annotations

import tomllib
from types import SimpleNamespace

import pytest

from tests.unit.conftest import REPO, run_pytest

pytestmark = pytest.mark.unit


def test_the_test_extra_provides_the_serving_client():
    """README: ``pip install -e ".[plot,test]"``; tests/serving/test_failures.py needs aiohttp and no vLLM."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.replace(" ", "").startswith("aiohttp") for req in extras["test"]), extras["test"]


@pytest.fixture
def without_aiohttp(tmp_path, monkeypatch):
    """A child Python in which ``import aiohttp`` fails as it does where it is not installed (a
    package on PYTHONPATH that raises the ImportError; nothing else in the child changes)."""
    hidden = tmp_path / "hide-aiohttp" / "aiohttp"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'aiohttp'\", name='aiohttp')\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden.parent))
    return hidden.parent


@pytest.mark.parametrize("args, outcome, message", [
    ((), "skipped", "the serving client needs aiohttp: pip install 'carbon-harness[serving]'"),
    (("-m", "serving"), "error", "this run asked for serving (-m 'serving') but aiohttp, the serving client, is not "
                                 "installed"),
])
def test_missing_aiohttp_skips_a_plain_run_and_errors_a_serving_run(tmp_path, without_aiohttp, args, outcome,
                                                                       message):
    r = run_pytest(*args, "-rA", "-p", "no:randomly", "tests/serving/test_failures.py", "-k", "refused_connection",
                   cache_dir=tmp_path)
    assert f"1 {outcome}" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    assert message in r.stdout, r.stdout[-3000:]
    assert r.returncode == (0 if outcome == "skipped" else 1)


def session_with_drafts(*labels: str, requested: bool = True):
    return SimpleNamespace(config=SimpleNamespace(drafts=[SimpleNamespace(label=label) for label in labels],
                                                  drafts_requested=requested))


def test_the_ends_skip_asks_only_for_drafts_not_passed():
    from tests.serving.test_speculative_serving import missing_ends_reason

    passed = missing_ends_reason(session_with_drafts("self", "carbon-tiny-draft"), "dna-suite", ["carbon-tiny-draft"])
    assert "needs --carbon-draft" not in passed
    assert ("--carbon-draft carbon-tiny-draft given, but test_serving_speculative[dna-suite] recorded no figures"
            in passed)
    # no --carbon-draft passed (issue 32, item 9): the reason said "--carbon-draft self and carbon-tiny-draft given"
    defaults = missing_ends_reason(session_with_drafts("self", "carbon-tiny-draft", requested=False), "dna-suite",
                                   ["self", "carbon-tiny-draft"])
    assert defaults.startswith("drafts self and carbon-tiny-draft (this session's defaults: no --carbon-draft was "
                               "passed), but test_serving_speculative[dna-suite] recorded no figures"), defaults
    assert "given" not in defaults
    not_passed = missing_ends_reason(session_with_drafts("self"), "dna-suite", ["carbon-tiny-draft"])
    assert not_passed.startswith("needs --carbon-draft carbon-tiny-draft (this session's drafts: self;")


def test_the_vllm_bench_skip_does_not_ask_for_the_endpoint_it_was_given():
    from tests.serving.test_vllm_server import vllm_bench_missing_reason

    reason = vllm_bench_missing_reason("http://127.0.0.1:8000")
    assert "--carbon-endpoint" not in reason
    assert "against http://127.0.0.1:8000" in reason and "this Python has no vllm" in reason
