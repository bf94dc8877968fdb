"""Serving metrics under vLLM's names and definitions (``vllm bench serve``), computed in one place.

Definitions (vLLM ``benchmarks/serve.py``, ``calculate_metrics``), per successful request:
TTFT = request start to the first streamed token; E2EL = request start to the last one; TPOT =
(E2EL - TTFT) / (output tokens - 1), for requests with more than one output token; ITL = every gap
between two consecutive streamed chunks, pooled over all requests. Throughputs divide by the
benchmark's wall duration: ``request_throughput`` (completed requests/s), ``output_throughput``
(output tokens/s), ``total_token_throughput`` (prompt + output tokens/s). Goodput counts the
requests that meet every SLO (``ttft:200 tpot:50``, milliseconds, as vLLM's ``--goodput``).

Percentiles come from ``harness.core.measure.percentile`` (linear interpolation, as numpy and vLLM).
A latency family with no sample (nothing completed) is left out rather than reported as 0, so a
threshold on it cannot pass silently; ``completed`` / ``failed`` always say what happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.core.measure import latency_stats
from harness.serving.client import RequestResult


def meets_slos(result: RequestResult, slos: Mapping[str, float]) -> bool:
    """vLLM's rule: every named SLO must hold; a request with one output token has TPOT 0."""
    if not result.success or result.ttft_ms is None:
        return False
    values = {"ttft": result.ttft_ms, "tpot": result.tpot_ms or 0.0, "e2el": result.e2el_ms}
    return all(values[name] <= bound for name, bound in slos.items())


def serving_metrics(results: Sequence[RequestResult], duration_s: float,
                    slos: Mapping[str, float] | None = None) -> dict[str, float]:
    """All serving figures of one benchmark run, named as ``vllm bench serve`` names them."""
    if duration_s <= 0:
        raise ValueError(f"duration {duration_s} s must be positive")
    done = [r for r in results if r.success]
    total_input = sum(r.prompt_len for r in done)
    total_output = sum(r.output_len for r in done)
    figures: dict[str, float] = {
        "duration": duration_s, "completed": len(done), "failed": len(results) - len(done),
        "total_input_tokens": total_input, "total_output_tokens": total_output,
        "request_throughput": len(done) / duration_s, "output_throughput": total_output / duration_s,
        "total_token_throughput": (total_input + total_output) / duration_s,
    }
    figures.update(latency_stats("ttft", [r.ttft_ms for r in done if r.ttft_ms is not None]))
    figures.update(latency_stats("tpot", [r.tpot_ms for r in done if r.tpot_ms is not None]))
    figures.update(latency_stats("itl", [gap for r in done for gap in r.itl_ms]))
    figures.update(latency_stats("e2el", [r.e2el_ms for r in done]))
    if slos:
        good = sum(meets_slos(r, slos) for r in done)
        figures["request_goodput"] = good / duration_s
        figures["goodput_fraction"] = good / len(results) if results else 0.0
    return figures


def failure_summary(results: Sequence[RequestResult], limit: int = 3) -> str:
    """The distinct errors of the failed requests, for a test failure or a log line."""
    errors: dict[str, int] = {}
    for r in results:
        if r.error is not None:
            errors[r.error] = errors.get(r.error, 0) + 1
    shown = [f"{n} x {e}" for e, n in list(errors.items())[:limit]]
    more = len(errors) - len(shown)
    return "; ".join(shown) + (f"; and {more} other errors" if more > 0 else "")


def serving_dna_figures(tokenizer, results: Sequence[RequestResult], duration_s: float,
                        price_per_hour: float | None = None) -> dict[str, float]:
    """The harness's own figures of a serving run: base pairs per second decoded from the returned
    ids (never from the server's text), the mean valid-DNA fraction, and the cost lens when the
    hardware profile has a price."""
    from harness.carbon.dna import dna_figures
    from harness.core.cost import cost

    done = [r.output_ids for r in results if r.success and r.output_ids]
    if not done:
        return {}
    figures = dna_figures(tokenizer, done, duration_s * 1000.0)
    if price_per_hour and figures["bp_per_s"] > 0:
        figures.update({f"cost_{k}": v for k, v in cost(figures["bp_per_s"], price_per_hour).to_dict().items()
                        if k not in ("bp_per_s",)})
    return figures
