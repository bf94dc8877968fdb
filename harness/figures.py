"""The figures a perf benchmark reports, computed from timings and generated tokens.

The names are the harness's public vocabulary (thresholds, reports and comparisons use them):
``cte_ms_p50``, ``cte_ms_p99``, ``tkg_ms_p50``, ``tkg_ms_p99``, ``e2e_ms_p50``, ``tokens_per_s``,
``bp_per_s``, ``kbp_per_s``, ``valid_dna_fraction``, ``tkg_roofline_fraction``; scoring workloads add
``variants_per_s``, ``scored_kbp_per_s``, ``usd_per_million_variants``, ``scoring_ms_p50``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.dna import sequence_metrics
from harness.measure import Summary, throughput
from harness.plan import tkg_roofline_fraction, tkg_step_bytes
from harness.spec import MODELS, ModelSpec
from harness.tokenizer import CarbonTokenizer

if TYPE_CHECKING:  # torch stays out of the import path of gates / report / compare
    from harness.backends.base import GenerationResult

FIGURES = ("cte_ms_p50", "cte_ms_p99", "tkg_ms_p50", "tkg_ms_p99", "e2e_ms_p50", "tokens_per_s", "bp_per_s",
           "kbp_per_s", "valid_dna_fraction", "tkg_roofline_fraction",
           # scoring workloads: computed by harness.scoring.scoring_figures
           "variants_per_s", "scored_kbp_per_s", "usd_per_million_variants", "scoring_ms_p50")
# Every figure some benchmark reports to the gate, with its direction: "max" where lower is better
# (times), "min" where higher is better. Thresholds may name only these (a threshold on a figure no
# benchmark produces would gate nothing).
GATED_FIGURES: dict[str, str] = {
    "cte_ms_p50": "max", "cte_ms_p99": "max", "tkg_ms_p50": "max", "tkg_ms_p99": "max", "e2e_ms_p50": "max",
    "tokens_per_s": "min", "bp_per_s": "min", "kbp_per_s": "min", "valid_dna_fraction": "min",
    "tkg_roofline_fraction": "min",
    "compile_s": "max", "load_s": "max",  # tests/perf/test_compile.py (neuron)
    "dna_encode_speedup": "min", "mixed_encode_speedup": "min",  # tests/perf/test_tokenizer_speed.py
    # serving, under vLLM's names (harness.serving; static-batch backends report them too)
    **{f"{stat}_{name}_ms": "max" for stat in ("mean", "median", "p90", "p99") for name in ("ttft", "tpot", "itl", "e2el")},
    "request_throughput": "min", "output_throughput": "min", "total_token_throughput": "min",
    "request_goodput": "min", "goodput_fraction": "min",
    # speculative decoding (harness.speculative, tests/perf/test_speculative.py)
    "spec_acceptance_rate": "min", "spec_tokens_per_step": "min", "spec_draft_ms_per_step": "max",
    "spec_verify_ms_per_step": "max", "spec_speedup": "min", "spec_speedup_gain": "min",
    "spec_step_ms_p50": "max",  # a served draft-and-verify step (harness.speculative_serving)
    # scoring workloads (harness.scoring, tests/perf/test_scoring.py)
    "variants_per_s": "min", "scored_kbp_per_s": "min", "usd_per_million_variants": "max", "scoring_ms_p50": "max",
}
# Shape labels benchmarks gate under besides the compiled shapes of harness.spec.SHAPES.
EXTRA_SHAPE_LABELS = (
    "tokenizer",
    "vep-bs8-sweep",  # tests/perf/test_scoring.py
    # tests/serving/test_serving_perf.py: "serving-<workload>" (harness.loadgen.WORKLOADS)
    *(f"serving-{w}" for w in ("dna-suite", "batch-suite", "a10-500m", "a10-3b", "a10-smoke")),
    "speculative-ends",  # tests/perf/test_speculative.py: "speculative-<draft>", "assisted-<draft>"
    *(f"{kind}-{draft}" for kind in ("speculative", "assisted") for draft in (*MODELS, "self")),
    # tests/serving/test_speculative_serving.py: "serving-speculative-<draft>"
    "serving-speculative-ends", *(f"serving-speculative-{draft}" for draft in (*MODELS, "self")),
)
DECODINGS = ("fns",)  # test_suites gates "<shape>-<decoding>" for non-direct decoding


def latency_figures(prefix: str, ms: Sequence[float]) -> dict[str, float]:
    s = Summary.of(ms)
    return {f"{prefix}_ms_p50": s.p50, f"{prefix}_ms_p99": s.p99}


def dna_figures(tokenizer: CarbonTokenizer, tokens: Any, e2e_ms: float) -> dict[str, float]:
    """Base pairs the batch generated (A/C/G/T decoded from the new tokens) per second, and the
    mean fraction of generated characters that are DNA."""
    texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
    metrics = [sequence_metrics(t) for t in texts]
    bp = sum(m.bp for m in metrics)
    bp_per_s = throughput(bp, e2e_ms)
    return {"generated_bp": bp, "bp_per_s": bp_per_s, "kbp_per_s": bp_per_s / 1000.0,
            "valid_dna_fraction": sum(m.valid_dna_fraction for m in metrics) / len(metrics)}


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
    # Every round's raw times, so compare can tell a real change from noise (harness.stats) and an
    # NxDI benchmark_report.json can be written with its percentiles (harness.nxdi_report).
    figures["samples"] = {"e2e_ms": [r.e2e_ms for r in results], "cte_ms": [r.cte_ms for r in results],
                          "tkg_ms": tkg}
    figures.update(static_batch_serving_figures(results, prompt_tokens))
    return figures


def static_batch_serving_figures(results: Sequence[GenerationResult], prompt_tokens: int) -> dict[str, float]:
    """A static batch's generations under vLLM's serving names, where a definition carries over, so
    hf / neuron figures sit next to a server's (``harness.serving``):

    - each row of each timed generation is one request, all sent at once: ``completed`` = rows x rounds;
    - TTFT = CTE incl. the first token (every row gets it when the prefill ends);
    - ITL = the TKG steps, pooled (a step gives every row its next token, so each row's gaps are the steps);
    - E2EL = the generation's end-to-end time; TPOT = (E2EL - TTFT) / (new tokens - 1) per generation;
    - throughputs divide a generation's rows, output tokens and prompt + output tokens (prompts counted at
      ``prompt_tokens`` each, the batch's longest) by its median E2EL.
    """
    from harness.serving import latency_stats

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
