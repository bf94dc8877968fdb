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


# the parser's and the record's edges (survivors of the generated mutants, nox -s mutation), each pinned
def test_each_sample_is_read_with_its_labels_and_comments_and_unreadable_values_are_skipped():
    from harness.core.server_work import prometheus_samples

    text = ('# HELP x y\n\nvllm:a{model_name="m",path="a\\"b"} 3\nvllm:b 2.5e1\nvllm:c{x="1"} NaNx\n'
            "  not a sample\nvllm:d{} +Inf\n")
    samples = prometheus_samples(text)
    assert samples[:2] == [("vllm:a", {"model_name": "m", "path": 'a\\"b'}, 3.0), ("vllm:b", {}, 25.0)]
    assert len(samples) == 3 and samples[2][0] == "vllm:d" and samples[2][2] == float("inf")


def test_a_sample_without_a_model_label_counts_for_any_model_and_each_counter_keeps_its_own_name():
    text = ("vllm:iteration_tokens_total_count 5\nvllm:generation_tokens_total 7\nvllm:num_preemptions_total 2\n"
            "vllm:prefix_cache_queries_total 9\nvllm:prefix_cache_hits_total 4\nvllm:iteration_tokens_total_sum 11\n"
            "vllm:prompt_tokens_total 3\nvllm:request_success_total 1\n")
    assert counters(text, "carbon-tiny") == {"engine_steps": 5.0, "generation_tokens": 7.0, "preemptions": 2.0,
                                             "prefix_cache_queries": 9.0, "prefix_cache_hits": 4.0,
                                             "step_tokens": 11.0, "prompt_tokens": 3.0, "requests": 1.0}
    with pytest.raises(ServerWorkError, match=r"^the server's /metrics carry no vllm:generation_tokens_total: it runs "
                                              r"with --disable-log-stats, or is not vLLM \(a served side's work is "
                                              r"then not counted\)$"):
        counters("vllm:iteration_tokens_total_count 5\n")


def test_a_batch_record_names_its_source_and_a_count_absent_before_starts_from_zero():
    from harness.core.server_work import SOURCE

    work = batch_work({"engine_steps": 10.0}, {"engine_steps": 14.0, "preemptions": 2.0}, 2)
    assert work == {"source": SOURCE, "requests_sent": 2, "counts": {"engine_steps": 4.0, "preemptions": 2.0},
                    "python_calls_note": "Python calls are not counted on a served side: they would be the client's"}
    assert describe_server_change({}, {"preemptions": 4.0, "engine_steps": 3.0}) == [
        "+3 engine_steps/batch (0 -> 3)", "+4 preemptions/batch (0 -> 4)"]  # in COUNTERS' order
    assert describe_server_change({"requests": 2.0}, {}) == ["-2 requests/batch (2 -> 0)"]
