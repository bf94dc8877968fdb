"""Teacher-forced rows where a server will not give prompt log-probabilities (``harness.serving.scoring_prefix``,
reached through ``OpenAIEngine.scored``): refused with HTTP 400 (the 2.32+ vLLM Neuron plugin under on-device
sampling) or answered with null rows (the NxDI-based plugin), every position is scored from a one-token request
on its prefix, and the rows are the ones prompt logprobs give where a server does give them.

The server is a STAND-IN for a vLLM Neuron server's completions endpoint, which cannot run here (no device, no
plugin), over real HTTP on loopback. Its "model" is a fixed next-token distribution over a 40-token vocabulary
drawn from the prefix; it answers as vLLM's completions API does (``token_ids``, ``logprobs`` with
``token_id:N`` names, ``prompt_logprobs`` rows of ``{id: {"logprob": ...}}``) and enforces the plugin's
admission rule (``vllm_neuron/vllm/admission.py`` in the fork jinhuang12/vllm-neuron at 42ad3f12a81a,
``SamplingAdmission.refusals``: ``prompt_logprobs`` refused with its message, HTTP 400)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.backends.openai import OpenAIEngine
from harness.core.spec import get_shape
from harness.serving.client import Endpoint, ServingError
from harness.serving.scoring_prefix import PREFIX_REQUESTS, refused_or_null
from tests.serving.loopback import QuietHandler, http_server

pytestmark = pytest.mark.unit

VOCAB = 40
REFUSAL = ("This server samples on device (on_device_sampling_config is set) and its sampler returns token ids only, "
           "so it cannot return prompt_logprobs={k}. Leave logprobs and prompt_logprobs unset, or restart the server "
           "with on_device_sampling_config: null to sample on the host.")


def next_logprobs(prefix: list[int]) -> np.ndarray:
    """The stand-in model: log-softmax of logits drawn from the prefix (the same prefix, the same row)."""
    logits = np.random.default_rng(abs(hash(tuple(prefix))) % (2**32)).normal(0.0, 3.0, VOCAB)
    return logits - np.log(np.exp(logits).sum())


def server(prompt_logprobs: str, asked: list[dict]) -> type[QuietHandler]:
    """``prompt_logprobs``: "answer" (a vLLM that computes them), "refuse" (HTTP 400, the plugin's admission) or
    "null" (null rows, the NxDI-based plugin). Every completion body is kept in ``asked``."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, {"object": "list", "data": [{"id": "carbon-tiny", "object": "model"}]})

        def reply(self, status: int, body: dict | str) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            ids = [int(t) for t in body["prompt"]]
            if body.get("prompt_logprobs") is not None:
                if prompt_logprobs == "refuse":
                    self.reply(400, {"object": "error", "message": REFUSAL.format(k=body["prompt_logprobs"]),
                                     "type": "BadRequestError", "code": 400})
                    return
                rows = [None]
                for p in range(1, len(ids)):
                    lp = next_logprobs(ids[:p])
                    keep = set(np.argsort(-lp)[: body["prompt_logprobs"]].tolist()) | {ids[p]}
                    rows.append({str(i): {"logprob": float(lp[i])} for i in sorted(keep)})
                rows = [None] * len(ids) if prompt_logprobs == "null" else rows
                self.reply(200, {"choices": [{"token_ids": [0], "prompt_logprobs": rows}]})
                return
            lp = next_logprobs(ids)
            token = int(np.argmax(lp))
            named = body.get("logprob_token_ids")
            shown = named if named is not None else np.argsort(-lp)[: body["logprobs"]].tolist()
            top = {f"token_id:{i}": float(lp[i]) for i in shown}
            self.reply(200, {"choices": [{"token_ids": [token], "finish_reason": "length", "logprobs": {
                "tokens": [f"token_id:{token}"], "token_logprobs": [float(lp[token])], "top_logprobs": [top]}}]})

    return Handler


def scored(mode: str, prompt: list[int], continuation: list[int], top_k: int) -> tuple[list, list[dict], dict]:
    asked: list[dict] = []
    with http_server(server(mode, asked)) as port:
        engine = OpenAIEngine(Endpoint(f"http://127.0.0.1:{port}"), get_shape("smoke"), "carbon-tiny")
        rows = engine.scored(prompt, continuation, top_k)
    return rows, asked, engine.info.extra


PROMPT, CONTINUATION = [3, 17, 5, 29], [11, 2, 38, 7, 19, 0]


@pytest.mark.parametrize("mode", ["refuse", "null"])
def test_every_position_is_judged_from_its_prefix_as_prompt_logprobs_judge_it(mode):
    want, _, told = scored("answer", PROMPT, CONTINUATION, 5)
    assert told.get("teacher_forced_rows") is None  # prompt logprobs given: read as before
    got, asked, told = scored(mode, PROMPT, CONTINUATION, 5)
    assert told["teacher_forced_rows"] == PREFIX_REQUESTS
    assert [r.token for r in got] == CONTINUATION and len(got) == len(want)
    for a, b in zip(got, want):
        assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-12)
        assert [i for i, _ in a.top] == [i for i, _ in b.top]  # the same top-k, in the same order
    prefixes = sorted(len(b["prompt"]) for b in asked if b.get("prompt_logprobs") is None
                      and b.get("logprob_token_ids") is None)
    assert prefixes == list(range(len(PROMPT), len(PROMPT) + len(CONTINUATION)))  # one request per position
    assert all(b["max_tokens"] == 1 and b["temperature"] == 0.0 for b in asked if b.get("logprobs"))


def test_a_token_outside_the_top_k_is_named_in_a_second_request():
    """With top-1, most continuation tokens fall outside it: each such one is asked for by id, never guessed."""
    got, asked, _ = scored("refuse", PROMPT, CONTINUATION, 1)
    want, _, _ = scored("answer", PROMPT, CONTINUATION, 1)
    assert [r.logprob for r in got] == pytest.approx([r.logprob for r in want], abs=1e-12)
    named = [b["logprob_token_ids"] for b in asked if b.get("logprob_token_ids") is not None]
    outside = [t for t, r in zip(CONTINUATION, want) if r.top[0][0] != t]
    assert sorted(named) == sorted([t] for t in outside) and outside  # concurrent: in any order


def test_only_a_refusal_or_null_rows_call_for_prefix_requests():
    assert refused_or_null(ServingError("prompt_logprobs=5 refused by u (HTTP 400): x"), None, 0)
    assert not refused_or_null(ServingError("cannot connect to u"), None, 0)
    assert refused_or_null(None, [None, None, None], 1) and not refused_or_null(None, [None, {1: -0.1}], 1)


def test_the_verdict_says_both_servers_and_the_per_request_prefill(tmp_path):
    """The contract's and the timed server's settings (side table, drift table), and for a batched served shape
    that its prefill is per request (the plugin's scheduler: one prefill per step)."""
    import sys

    from harness.release.devices import served_notes
    from harness.release.plan import CheckPlan, Side
    from harness.release.served import ScriptServer, server_settings, timed_server

    server = ScriptServer(tmp_path / "m", None, tmp_path / "s.log", "carbon-tiny", sys.executable, shape="smoke",
                          env={"VLLM_DEVICE": "neuron"})
    contract = server_settings(server)
    assert contract["on_device_sampling_config"] is None and contract["async_scheduling"] is False
    assert contract["server"].startswith("contract server: on-device sampling off")
    timed_server(server)
    timed = server_settings(server)
    assert timed["on_device_sampling_config"] == {"all_greedy": True} and timed["async_scheduling"] is None
    assert timed["max_logprobs"] == 0 and timed["server"].startswith("timed server: on-device sampling on")
    plan = CheckPlan(Side("baseline", sys.executable), Side("candidate", sys.executable, backend="openai"), tmp_path,
                     shapes=("a100-style-bs16",))
    assert ["max_prefills_per_batch = 1" in n for n in served_notes(plan)] == [True]
    assert served_notes(CheckPlan(Side("baseline", sys.executable), Side("candidate", sys.executable), tmp_path,
                                  shapes=("a100-style-bs16",))) == []  # no served side
