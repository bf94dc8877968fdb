"""The figures a perf benchmark reports, computed from timings and generated tokens.

The names are the harness's public vocabulary (thresholds, reports and comparisons use them):
``cte_ms_p50``, ``cte_ms_p99``, ``tkg_ms_p50``, ``tkg_ms_p99``, ``e2e_ms_p50``, ``tokens_per_s``,
``bp_per_s``, ``kbp_per_s``, ``valid_dna_fraction``, ``tkg_roofline_fraction``; scoring workloads add
``variants_per_s``, ``scored_kbp_per_s``, ``usd_per_million_variants``, ``scoring_ms_p50``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.carbon.dna import dna_figures
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.measure import Summary, throughput
from harness.core.plan import tkg_roofline_fraction, tkg_step_bytes
from harness.core.spec import ModelSpec

if TYPE_CHECKING:  # torch stays out of the import path of what reads figures
    from harness.backends.base import GenerationResult


def latency_figures(prefix: str, ms: Sequence[float]) -> dict[str, float]:
    s = Summary.of(ms)
    return {f"{prefix}_ms_p50": s.p50, f"{prefix}_ms_p99": s.p99}


def roofline(spec: ModelSpec | None, batch_size: int, context_tokens: float, dtype: str,
             bandwidth_gbps: float | None, tkg_ms_p50: float, kv_heads: int | None = None) -> dict[str, float]:
    if spec is None or not bandwidth_gbps:
        return {}
    step = tkg_step_bytes(spec, batch_size, context_tokens, dtype, kv_heads)
    fraction = tkg_roofline_fraction(step, bandwidth_gbps, tkg_ms_p50)
    return {"tkg_step_bytes": step, "tkg_roofline_fraction": fraction} if fraction is not None else {}


def generation_figures(results: Sequence[GenerationResult], tokenizer: CarbonTokenizer, spec: ModelSpec | None,
                       dtype: str, bandwidth_gbps: float | None, prompt_tokens: int,
                       kv_heads: int | None = None) -> dict[str, Any]:
    """All figures of repeated generations of one batch (greedy: every round gives the same tokens),
    plus ``samples``: the per-round e2e / cte times and every decode step's time, in ms."""
    if not results:
        raise ValueError("no generation was measured")
    first = results[0]
    e2e = Summary.of([r.e2e_ms for r in results]).p50
    figures: dict[str, float] = {"e2e_ms_p50": e2e}
    figures.update(latency_figures("cte", [r.cte_ms for r in results]))
    tkg = [ms for r in results for ms in r.tkg_ms]
    if tkg:
        figures.update(latency_figures("tkg", tkg))
        context = prompt_tokens + first.new_tokens / 2
        figures.update(roofline(spec, first.batch_size, context, dtype, bandwidth_gbps, figures["tkg_ms_p50"],
                                kv_heads))
    figures["tokens_per_s"] = throughput(first.batch_size * first.new_tokens, e2e)
    figures.update(dna_figures(tokenizer, first.tokens, e2e))
    # Every round's raw times, so compare can tell a real change from noise (harness.core.stats) and an
    # NxDI benchmark_report.json can be written with its percentiles (harness.analysis.results).
    figures["samples"] = {"e2e_ms": [r.e2e_ms for r in results], "cte_ms": [r.cte_ms for r in results],
                          "tkg_ms": tkg}
    figures.update(static_batch_serving_figures(results, prompt_tokens))
    return figures


def static_batch_serving_figures(results: Sequence[GenerationResult], prompt_tokens: int) -> dict[str, float]:
    """A static batch's generations under vLLM's serving names, where a definition carries over, so
    hf / neuron figures sit next to a server's (``harness.serving.metrics``):

    - each row of each timed generation is one request, all sent at once: ``completed`` = rows x rounds;
    - TTFT = CTE incl. the first token (every row gets it when the prefill ends);
    - ITL = the TKG steps, pooled (a step gives every row its next token, so each row's gaps are the steps);
    - E2EL = the generation's end-to-end time; TPOT = (E2EL - TTFT) / (new tokens - 1) per generation;
    - throughputs divide a generation's rows, output tokens and prompt + output tokens (prompts counted at
      ``prompt_tokens`` each, the batch's longest) by its median E2EL.
    """
    from harness.core.measure import latency_stats

    if not results:
        return {}
    e2e = Summary.of([r.e2e_ms for r in results]).p50
    rows, new = results[0].batch_size, results[0].new_tokens
    figures: dict[str, float] = {"completed": rows * len(results), "failed": 0,
                                 "request_throughput": throughput(rows, e2e),
                                 "output_throughput": throughput(rows * new, e2e),
                                 "total_token_throughput": throughput(rows * (prompt_tokens + new), e2e)}
    figures.update(latency_stats("ttft", [r.cte_ms for r in results]))
    if new > 1:
        figures.update(latency_stats("tpot", [(r.e2e_ms - r.cte_ms) / (new - 1) for r in results]))
    figures.update(latency_stats("itl", [ms for r in results for ms in r.tkg_ms]))
    figures.update(latency_stats("e2el", [r.e2e_ms for r in results]))
    return figures
