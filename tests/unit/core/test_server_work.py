"""A served side's work from its server's own counters (``harness.core.server_work``): vLLM's Prometheus text
around one batch, its differences, and what a server without them is told."""

from __future__ import annotations

import pytest

from harness.core.server_work import COUNTERS, ServerWorkError, batch_work, counters, describe_server_change

pytestmark = pytest.mark.unit


def metrics(steps: float, generated: float, prompt: float = 100.0, engines: int = 1, model: str = "carbon-tiny") -> str:
    """vLLM 0.32's exposition of the counters kept (its own HELP / TYPE lines, histogram buckets, created times)."""
    lines = ["# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.",
             "# TYPE vllm:iteration_tokens_total histogram"]
    for e in range(engines):
        labels = f'engine="{e}",model_name="{model}"'
        lines += [f'vllm:iteration_tokens_total_bucket{{engine="{e}",le="+Inf",model_name="{model}"}} {steps}',
                  f"vllm:iteration_tokens_total_count{{{labels}}} {steps}",
                  f"vllm:iteration_tokens_total_sum{{{labels}}} {generated + prompt}",
                  f"vllm:generation_tokens_total{{{labels}}} {generated}",
                  f"vllm:generation_tokens_created{{{labels}}} 1.7e9",
                  f"vllm:prompt_tokens_total{{{labels}}} {prompt}",
                  f'vllm:request_success_total{{engine="{e}",finished_reason="length",model_name="{model}"}} 4.0',
                  f'vllm:request_success_total{{engine="{e}",finished_reason="stop",model_name="{model}"}} 0.0',
                  f"vllm:num_preemptions_total{{{labels}}} 0.0"]
    return "\n".join(lines) + "\n"


def test_the_counters_are_summed_over_engines_and_label_sets_and_filtered_by_model():
    one = counters(metrics(16, 64), "carbon-tiny")
    assert one["engine_steps"] == 16 and one["generation_tokens"] == 64 and one["requests"] == 4.0
    assert counters(metrics(16, 64, engines=2))["engine_steps"] == 32
    assert "prefix_cache_hits" not in one  # not exported by this server: left out, never read as zero
    with pytest.raises(ServerWorkError, match="no vllm:iteration_tokens_total_count, vllm:generation_tokens_total "
                                              "for model 'other'.*--disable-log-stats"):
        counters(metrics(16, 64), "other")


def test_a_batch_is_the_difference_around_it_and_a_change_is_named_per_count():
    before, after = counters(metrics(16, 64)), counters(metrics(32, 128, prompt=200))
    work = batch_work(before, after, 4)
    assert work["counts"]["engine_steps"] == 16 and work["counts"]["prompt_tokens"] == 100
    assert work["requests_sent"] == 4 and "client's" in work["python_calls_note"]
    moved = describe_server_change({"engine_steps": 16.0, "generation_tokens": 64.0},
                                   {"engine_steps": 28.0, "generation_tokens": 64.0})
    assert moved == ["+12 engine_steps/batch (16 -> 28)"]
    assert set(COUNTERS) >= {"engine_steps", "preemptions", "prefix_cache_hits"}
