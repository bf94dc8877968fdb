"""vLLM speculative serving, the pure parts: its --speculative-config, its Prometheus counters (the
text below is vLLM 0.32.0's /metrics after one speculative request, its counts edited to a partial
acceptance), and the figures."""

from __future__ import annotations

import math

import pytest

from harness.core.speculation import DNA_SUITE_CASE, SpeculativeError
from harness.serving.client import RequestResult
from harness.serving.loadgen import LoadResult, LoadSpec
from harness.serving.server import VLLMServer, speculative_cpu_bind
from harness.serving.speculative import (
    SpeculationCounters,
    engine_steps,
    prometheus_samples,
    serving_new_tokens,
    serving_speculative_figures,
    speculative_workload,
    vllm_speculative_config,
)
from harness.workloads.speculative import T4_CASES

pytestmark = pytest.mark.unit

VLLM_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="carbon-tiny"} 4.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="carbon-tiny"} 1.795420105747224e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="carbon-tiny"} 16.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="carbon-tiny"} 1.7954201057472754e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="carbon-tiny"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="carbon-tiny",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="carbon-tiny",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="carbon-tiny",position="2"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="carbon-tiny",position="3"} 1.0
vllm:num_requests_running{engine="0",model_name="carbon-tiny"} 0.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{engine="0",model_name="carbon-tiny"} 40.0
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="carbon-tiny"} 0.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="carbon-tiny"} 5.0
vllm:iteration_tokens_total_count{engine="0",model_name="carbon-tiny"} 5.0
"""


def test_config_names_the_draft_and_k(tmp_path):
    assert vllm_speculative_config(tmp_path / "draft", 4) == {
        "method": "draft_model", "model": str(tmp_path / "draft"), "num_speculative_tokens": 4}
    with pytest.raises(SpeculativeError, match="speculation length 0 must be a positive integer"):
        vllm_speculative_config(tmp_path, 0)


def test_a_speculative_server_keeps_its_stats_on(tmp_path):
    """vLLM counts nothing with --disable-log-stats, so only the plain server passes it."""
    plain = VLLMServer(tmp_path / "ckpt", tmp_path / "tok", tmp_path / "log").command()
    argv = VLLMServer(tmp_path / "ckpt", tmp_path / "tok", tmp_path / "log",
                      speculative_config=vllm_speculative_config(tmp_path / "draft", 3)).command()
    assert "--disable-log-stats" in plain and "--speculative-config" not in plain
    assert "--disable-log-stats" not in argv
    value = argv[argv.index("--speculative-config") + 1]
    assert value == ('{"method": "draft_model", "model": "' + str(tmp_path / "draft") + '", "num_speculative_tokens": 3}')


def test_counters_from_vllm_metrics():
    c = SpeculationCounters.from_prometheus(VLLM_METRICS, "carbon-tiny")
    assert (c.drafts, c.draft_tokens, c.accepted) == (4.0, 16.0, 12.0)
    assert c.acceptance_rate == 0.75
    assert c.tokens_per_step == 4.0  # 1 + 12 / 4: vLLM's mean acceptance length


def test_counters_sum_engines_and_filter_the_model():
    two_engines = VLLM_METRICS + VLLM_METRICS.replace('engine="0"', 'engine="1"')
    assert SpeculationCounters.from_prometheus(two_engines).drafts == 8.0
    with pytest.raises(SpeculativeError, match="for model 'other'"):
        SpeculationCounters.from_prometheus(VLLM_METRICS, "other")


def test_a_server_without_counters_is_an_error_not_zero():
    plain = "\n".join(line for line in VLLM_METRICS.splitlines() if "spec_decode" not in line)
    with pytest.raises(SpeculativeError, match=r"no vllm:spec_decode_num_accepted_tokens_total.*--disable-log-stats"):
        SpeculationCounters.from_prometheus(plain)


def test_counter_deltas():
    before = SpeculationCounters(4.0, 16.0, 12.0)
    after = SpeculationCounters(10.0, 40.0, 12.0)
    delta = after - before
    assert (delta.drafts, delta.draft_tokens, delta.accepted) == (6.0, 24.0, 0.0)
    assert delta.acceptance_rate == 0.0 and delta.tokens_per_step == 1.0
    with pytest.raises(SpeculativeError, match="went down"):
        before - after
    with pytest.raises(SpeculativeError, match="proposed no draft token"):
        (before - before).acceptance_rate


def test_prometheus_samples_skip_comments_and_read_labels():
    samples = prometheus_samples(VLLM_METRICS)
    assert all(not name.startswith("#") for name, _, _ in samples)
    per_pos = [(labels["position"], v) for name, labels, v in samples if name.endswith("per_pos_total")]
    assert per_pos == [("0", 4.0), ("1", 4.0), ("2", 3.0), ("3", 1.0)]


def run(e2e_ms: list[float], duration_s: float, tokens: int = 4) -> LoadResult:
    results = [RequestResult(10, list(range(tokens)), 5.0, [10.0] * (tokens - 1), ms) for ms in e2e_ms]
    return LoadResult(None, LoadSpec(max_concurrency=1), results, duration_s)


def test_figures_against_the_target_alone():
    figures = serving_speculative_figures([run([40.0, 60.0], 0.1)], [run([80.0, 120.0], 0.2)],
                                          SpeculationCounters(2.0, 8.0, 6.0))
    assert figures["spec_speedup"] == pytest.approx(2.0)
    assert figures["tokens_per_s"] == pytest.approx(80.0) and figures["target_tokens_per_s"] == pytest.approx(40.0)
    assert figures["spec_acceptance_rate"] == 0.75 and figures["spec_tokens_per_step"] == 4.0
    assert figures["spec_step_ms_p50"] == 10.0 and figures["e2e_ms_p50"] == 50.0
    assert "spec_draft_ms_per_step" not in figures  # inside the server: not observable, so not reported


def test_rounds_take_the_median_so_one_hiccup_moves_nothing():
    """Three rounds; the second target-alone round hit a 1 s stall."""
    speculative = [run([50.0], d) for d in (0.10, 0.11, 0.09)]
    alone = [run([100.0], d) for d in (0.20, 1.20, 0.21)]
    counters = SpeculationCounters(1, 4, 4) + SpeculationCounters(1, 4, 4) + SpeculationCounters(1, 4, 4)
    figures = serving_speculative_figures(speculative, alone, counters)
    assert figures["spec_speedup"] == pytest.approx(0.21 / 0.10)
    assert figures["spec_steps"] == 1.0 and figures["spec_acceptance_rate"] == 1.0


def test_figures_refuse_runs_that_differ_or_failed():
    with pytest.raises(SpeculativeError, match=r"different token counts \[6, 8\]"):
        serving_speculative_figures([run([1.0, 1.0], 0.1, tokens=3)], [run([1.0, 1.0], 0.1)], SpeculationCounters(1, 1, 1))
    with pytest.raises(SpeculativeError, match="1 speculative and 2 target-alone rounds"):
        serving_speculative_figures([run([1.0], 0.1)], [run([1.0], 0.1)] * 2, SpeculationCounters(1, 1, 1))
    failed = run([1.0], 0.1)
    failed.results[0].error = "HTTP 500"
    with pytest.raises(SpeculativeError, match="a speculative run did not complete.*1 failed"):
        serving_speculative_figures([failed], [run([1.0], 0.1)], SpeculationCounters(1, 1, 1))


@pytest.mark.parametrize("case", [*T4_CASES, DNA_SUITE_CASE], ids=lambda c: c.name)
def test_workloads_are_the_cases_at_batch_1(case, carbon_tokenizer):
    workload = speculative_workload(case, carbon_tokenizer)
    assert workload.max_concurrency == 1
    assert len(workload.requests) == (7 if case is DNA_SUITE_CASE else 1)
    assert all(r.max_tokens == case.new_tokens for r in workload.requests)
    assert {len(r.prompt_ids) for r in workload.requests} == {1 + math.ceil(case.prompt_bp / 6)}  # <dna> + 6-mers, a short last one
    assert serving_new_tokens(case, "neuron") == case.new_tokens
    cpu = serving_new_tokens(case, "cpu")
    assert cpu == min(case.new_tokens, 64)
    assert all(r.max_tokens == cpu for r in speculative_workload(case, carbon_tokenizer, cpu).requests)


@pytest.mark.parametrize("cpus, bind", [
    ([0, 1], "1"),
    ([3, 0, 2, 1], "3"),  # the CPU vLLM's "auto" reserves, not the ones its worker takes
    ([0], None),  # one CPU: vLLM's own binding
])
def test_the_speculative_server_gets_the_cpu_auto_leaves_free(cpus, bind):
    assert speculative_cpu_bind(cpus) == bind


def test_a_bound_server_passes_its_cpus_to_vllm(tmp_path):
    """A real subprocess in the server's place prints the binding vLLM would read."""
    script = tmp_path / "python"
    script.write_text('#!/bin/sh\necho "bind=$VLLM_CPU_OMP_THREADS_BIND"\n')
    script.chmod(0o755)
    s = VLLMServer(tmp_path / "ckpt", tmp_path / "tok", tmp_path / "logs" / "server.log", python=str(script),
                   cpu_bind="1").start()
    s.proc.wait(timeout=30)
    assert "bind=1" in s.log_path.read_text()


def test_engine_steps_from_vllm_metrics():
    """The steps the server ran (its tokens-per-step histogram's count): summed over engines, filtered by model."""
    assert engine_steps(VLLM_METRICS, "carbon-tiny") == 5.0
    assert engine_steps(VLLM_METRICS + VLLM_METRICS.replace('engine="0"', 'engine="1"')) == 10.0
    plain = "\n".join(line for line in VLLM_METRICS.splitlines() if "iteration_tokens" not in line)
    with pytest.raises(SpeculativeError, match="no vllm:iteration_tokens_total_count.*--disable-log-stats"):
        engine_steps(plain)
