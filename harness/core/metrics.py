"""Every figure name the harness reports, in one place: what benchmarks put in ``extra_info``,
which of them a threshold may gate and in which direction, and the shape labels they gate under.
A threshold or a compare tolerance that names anything else is refused at start."""

from __future__ import annotations

from harness.core.spec import MODELS

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "std", "p90", "p99")
SLO_METRICS = ("ttft", "tpot", "e2el")  # what vLLM's --goodput accepts
SERVING_FIGURES = tuple(f"{s}_{m}_ms" for m in LATENCIES for s in STATS) + (
    "request_throughput", "output_throughput", "total_token_throughput", "completed", "failed")
# The figures every speculative benchmark reports.
SPECULATIVE_FIGURES = ("spec_acceptance_rate", "spec_tokens_per_step", "spec_draft_ms_per_step",
                       "spec_verify_ms_per_step", "spec_speedup", "tokens_per_s", "bp_per_s")


FIGURES = ("cte_ms_p50", "cte_ms_p99", "tkg_ms_p50", "tkg_ms_p99", "e2e_ms_p50", "tokens_per_s", "bp_per_s",
           "kbp_per_s", "valid_dna_fraction", "tkg_roofline_fraction",
           # on a device with its own clock (CUDA): harness.plugin.timing
           "cte_device_ms_p50", "tkg_device_ms_p50", "e2e_device_ms_p50", "cte_host_bound_fraction",
           "tkg_host_bound_fraction",
           # scoring workloads: computed by harness.workloads.scoring.scoring_figures
           "variants_per_s", "scored_kbp_per_s", "usd_per_million_variants", "scoring_ms_p50")
# Every figure some benchmark reports to the gate, with its direction: "max" where lower is better
# (times), "min" where higher is better. Thresholds may name only these (a threshold on a figure no
# benchmark produces would gate nothing).
METRICS: dict[str, str] = {
    "cte_ms_p50": "max", "cte_ms_p99": "max", "tkg_ms_p50": "max", "tkg_ms_p99": "max", "e2e_ms_p50": "max",
    "tokens_per_s": "min", "bp_per_s": "min", "kbp_per_s": "min", "valid_dna_fraction": "min",
    "tkg_roofline_fraction": "min",
    # the device's own clock beside the wall time, on a device that has one (harness.plugin.timing: CUDA
    # events; the busy time from the profiler): absent on a CPU
    "cte_device_ms_p50": "max", "tkg_device_ms_p50": "max", "e2e_device_ms_p50": "max",
    "cte_host_bound_fraction": "max", "tkg_host_bound_fraction": "max",
    "compile_s": "max", "load_s": "max",  # tests/perf/test_compile.py (neuron)
    "dna_encode_speedup": "min", "mixed_encode_speedup": "min",  # tests/perf/test_tokenizer_speed.py
    # serving, under vLLM's names (harness.serving.metrics; static-batch backends report them too)
    **{f"{stat}_{name}_ms": "max" for stat in STATS if stat != "std" for name in LATENCIES},
    "request_throughput": "min", "output_throughput": "min", "total_token_throughput": "min",
    "request_goodput": "min", "goodput_fraction": "min",
    # speculative decoding (harness.workloads.speculative, tests/perf/test_speculative.py)
    "spec_acceptance_rate": "min", "spec_tokens_per_step": "min", "spec_draft_ms_per_step": "max",
    "spec_verify_ms_per_step": "max", "spec_speedup": "min", "spec_speedup_gain": "min",
    "spec_step_ms_p50": "max",  # a served draft-and-verify step (harness.serving.speculative)
    # scoring workloads (harness.workloads.scoring, tests/perf/test_scoring.py)
    "variants_per_s": "min", "scored_kbp_per_s": "min", "usd_per_million_variants": "max", "scoring_ms_p50": "max",
}
# Shape labels benchmarks gate under besides the compiled shapes of harness.core.spec.SHAPES.
EXTRA_SHAPE_LABELS = (
    "tokenizer",
    "vep-bs8-sweep",  # tests/perf/test_scoring.py
    # tests/serving/test_serving_perf.py: "serving-<workload>" (harness.serving.loadgen.WORKLOADS)
    *(f"serving-{w}" for w in ("dna-suite", "batch-suite", "a10-500m", "a10-3b", "a10-smoke")),
    "speculative-ends",  # tests/perf/test_speculative.py: "speculative-<draft>", "assisted-<draft>"
    *(f"{kind}-{draft}" for kind in ("speculative", "assisted") for draft in (*MODELS, "self")),
    # tests/serving/test_speculative_serving.py: "serving-speculative-<draft>"
    "serving-speculative-ends", *(f"serving-speculative-{draft}" for draft in (*MODELS, "self")),
)
DECODINGS = ("fns",)  # test_suites gates "<shape>-<decoding>" for non-direct decoding
# An engine compiled by --carbon-hf-compile gates under "<label>-compiled": its figures are another
# engine's than the eager one's, and one bound for both would be wrong for one of them.
COMPILED = "compiled"


def compiled_label(shape: str) -> str:
    return f"{shape}-{COMPILED}"
