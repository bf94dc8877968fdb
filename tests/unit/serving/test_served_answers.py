"""What the harness reads of a vLLM server's answers, on answers a real vLLM CPU 0.32.0 server gave
(``fixtures/serving/vllm-0.32-answers.json``, recorded from the server a release check starts on
carbon-tiny): a completion's decode-path log-probabilities (``harness.serving.generated``) and what the
server says of itself (``harness.serving.introspect``), the latter served again over real HTTP."""

from __future__ import annotations

import copy
import json
from http.server import BaseHTTPRequestHandler

import pytest

from harness.core.paths import FIXTURES_DIR
from harness.serving.client import ServingError
from harness.serving.generated import parse_choice, token_id
from harness.serving.introspect import cache_config_labels, server_facts
from tests.serving.loopback import QuietHandler, http_server

pytestmark = pytest.mark.unit

ANSWERS = json.loads((FIXTURES_DIR / "serving" / "vllm-0.32-answers.json").read_text())


def test_a_completions_decode_path_reads_as_ids_with_their_top_k():
    choice = ANSWERS["completion"]["choices"][0]
    out = parse_choice(choice, 2, "vllm")
    assert list(out.token_ids) == choice["token_ids"] and out.finish_reason == "length"
    for j, (tid, lp, top) in enumerate(zip(out.token_ids, out.logprobs, out.top)):
        assert lp == choice["logprobs"]["token_logprobs"][j] and len(top) >= 2
        assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
        assert dict(top)[tid] == lp and top[0][1] >= lp  # greedy: the sampled token is the top-1 (or tied)


@pytest.mark.parametrize("damage, match", [
    (lambda c: c["logprobs"]["tokens"].__setitem__(0, "#"), "not token_id:N"),
    (lambda c: c["logprobs"]["token_logprobs"].pop(), "token ids but"),
    (lambda c: c["logprobs"]["top_logprobs"].__setitem__(1, None), "without its log-probability"),
    (lambda c: c["token_ids"].__setitem__(0, c["token_ids"][0] + 1), "without its log-probability"),
])
def test_an_answer_that_does_not_hold_together_is_refused_by_position(damage, match):
    choice = copy.deepcopy(ANSWERS["completion"]["choices"][0])
    damage(choice)
    with pytest.raises(ServingError, match=match):
        parse_choice(choice, 2, "vllm")


def test_a_top_k_shorter_than_asked_is_refused():
    with pytest.raises(ServingError, match="asked for 50"):
        parse_choice(ANSWERS["completion"]["choices"][0], 50, "vllm")
    assert token_id("token_id:151643") == 151643


def test_the_cache_configuration_is_read_from_the_metrics_page():
    labels = cache_config_labels(ANSWERS["metrics"])
    assert labels is not None and labels["block_size"].isdigit()
    assert labels["enable_prefix_caching"] in ("True", "False")
    assert cache_config_labels("# HELP vllm:num_requests_running x\nvllm:num_requests_running 0.0\n") is None


def serving(pages: dict[str, tuple[int, str]]) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            status, body = pages.get(self.path, (404, "not found"))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body.encode())

    return Handler


def test_a_server_says_its_version_max_model_len_and_cache_over_http():
    pages = {"/version": (200, json.dumps(ANSWERS["version"])), "/v1/models": (200, json.dumps(ANSWERS["models"])),
             "/metrics": (200, ANSWERS["metrics"])}
    with http_server(serving(pages)) as port:
        facts = server_facts(f"http://127.0.0.1:{port}", "carbon-tiny")
    assert facts["version"] == "0.32.0" and facts["model"] == "carbon-tiny"
    assert facts["max_model_len"] == ANSWERS["models"]["data"][0]["max_model_len"]
    assert facts["cache_config"] == cache_config_labels(ANSWERS["metrics"])


def test_what_a_server_will_not_say_is_recorded_as_unavailable_with_why():
    """An older server without /version, and one with its stats off (no cache gauge on /metrics)."""
    pages = {"/v1/models": (200, json.dumps(ANSWERS["models"])),
             "/metrics": (200, "# HELP python_gc_objects_collected_total x\n")}
    with http_server(serving(pages)) as port:
        facts = server_facts(f"http://127.0.0.1:{port}")
    assert facts["version"].startswith("unavailable (HTTP Error 404")
    assert facts["cache_config"].startswith("unavailable (no vllm:cache_config_info")
    assert isinstance(facts["max_model_len"], int)
