"""Speculative decoding on a vLLM server: its ``--speculative-config`` for a draft checkpoint, the
acceptance counters it exports, and the figures of a speculative run against the target alone.

A serving client sees only streamed chunks, so the figures come from two places:

* vLLM's Prometheus counters (``/metrics``), read before and after a run: ``spec_decode_num_drafts``
  (verification steps, per request), ``spec_decode_num_draft_tokens`` (proposed) and
  ``spec_decode_num_accepted_tokens`` (accepted). The acceptance rate is accepted / proposed and the
  tokens per verification step are ``1 + accepted / drafts``, vLLM's own "mean acceptance length".
  vLLM updates them only when its stats are on (no ``--disable-log-stats``).
* the stream: with speculation each engine step sends its accepted tokens as one chunk, so the
  inter-chunk gap is one draft-and-verify step. The split into draft and verify time happens inside
  the server and is not observable from a client; those two figures are left out (a threshold on
  them fails as missing rather than passing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.carbon.dna import speculative_prompts
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.measure import Summary
from harness.core.server_work import prometheus_samples
from harness.core.speculation import SpeculativeCase, SpeculativeError, check_speculation_length
from harness.serving.loadgen import Request, Workload

VLLM_METHOD = "draft_model"  # vLLM's method for a separate, smaller draft model
CPU_NEW_TOKENS = 64  # serving_new_tokens
COUNTERS = {"drafts": "vllm:spec_decode_num_drafts_total",
            "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "accepted": "vllm:spec_decode_num_accepted_tokens_total"}


def vllm_speculative_config(draft_checkpoint: Path | str, speculation_length: int) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` for a draft checkpoint proposing k tokens per step (vLLM's
    ``num_speculative_tokens`` is the harness's k: the target verifies k + 1 positions)."""
    return {"method": VLLM_METHOD, "model": str(draft_checkpoint),
            "num_speculative_tokens": check_speculation_length(speculation_length)}


def serving_new_tokens(case: SpeculativeCase, hardware_kind: str) -> int:
    """New tokens per request: the case's reference length, at most ``CPU_NEW_TOKENS`` on a CPU
    (a served unrelated draft costs ~25 ms a token there, so the reference lengths alone would add
    a minute per draft; 64 tokens is still 13 full draft-and-verify steps at k = 4)."""
    return min(case.new_tokens, CPU_NEW_TOKENS) if hardware_kind == "cpu" else case.new_tokens


def speculative_workload(case: SpeculativeCase, tokenizer: CarbonTokenizer, new_tokens: int | None = None) -> Workload:
    """A speculative case as a serving workload: its prompts one at a time (batch 1, as the T4 runs
    and the harness's own loop), each for ``new_tokens`` (default: the case's reference length)."""
    n = case.new_tokens if new_tokens is None else new_tokens
    requests = tuple(Request(tuple(tokenizer.encode(p)), n, f"{case.name}-{i}") for i, p in enumerate(speculative_prompts(case)))
    return Workload(f"speculative-{case.name}", requests, 1,
                    f"{len(requests)} x {case.prompt_bp} bp, {n} new tokens, one at a time")


ENGINE_STEPS = "vllm:iteration_tokens_total_count"  # one observation per engine step that produced output


def engine_steps(text: str, model: str | None = None) -> float:
    """How many engine steps the server has run (vLLM observes its tokens-per-step histogram once per
    step), summed over its engines. Requests decoded in one batch share steps, so fewer steps than the
    same requests took one at a time is the server's own proof that it batched them, whatever the
    clock says. A server without the histogram runs with --disable-log-stats: an error, never zero."""
    values = [value for name, labels, value in prometheus_samples(text)
              if name == ENGINE_STEPS and (model is None or labels.get("model_name") == model)]
    if not values:
        raise SpeculativeError(f"the server exports no {ENGINE_STEPS}" + (f" for model {model!r}" if model else "")
                               + ": it runs with --disable-log-stats (vLLM then counts nothing)")
    return sum(values)


@dataclass(frozen=True)
class SpeculationCounters:
    """vLLM's cumulative speculative-decoding counters, summed over its engines."""

    drafts: float  # verification steps with draft tokens, counted per request (vLLM's observe_draft)
    draft_tokens: float  # draft tokens proposed
    accepted: float  # of those, accepted

    @classmethod
    def from_prometheus(cls, text: str, model: str | None = None) -> "SpeculationCounters":
        """The counters of ``model`` (every model when None). A server without them was not started with
        a speculative config, or runs with ``--disable-log-stats``: that is an error, never zeros."""
        totals = {key: 0.0 for key in COUNTERS}
        seen = set()
        names = {name: key for key, name in COUNTERS.items()}
        for name, labels, value in prometheus_samples(text):
            if name in names and (model is None or labels.get("model_name") == model):
                totals[names[name]] += value
                seen.add(name)
        missing = sorted(set(COUNTERS.values()) - seen)
        if missing:
            raise SpeculativeError(
                f"the server exports no {', '.join(missing)}" + (f" for model {model!r}" if model else "")
                + ": it runs without --speculative-config, or with --disable-log-stats (vLLM then counts nothing)")
        return cls(**totals)

    def __sub__(self, before: "SpeculationCounters") -> "SpeculationCounters":
        delta = SpeculationCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                             self.accepted - before.accepted)
        if min(delta.drafts, delta.draft_tokens, delta.accepted) < 0:
            raise SpeculativeError(f"vLLM's speculative counters went down ({before} -> {self}): the server restarted "
                                   "during the run")
        return delta

    def __add__(self, other: "SpeculationCounters") -> "SpeculationCounters":
        return SpeculationCounters(self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
                            self.accepted + other.accepted)

    @property
    def acceptance_rate(self) -> float:
        if not self.draft_tokens:
            raise SpeculativeError("the server proposed no draft token during the run: nothing was speculated")
        return self.accepted / self.draft_tokens

    @property
    def tokens_per_step(self) -> float:
        """Tokens per verification step, the target's own included (vLLM's mean acceptance length)."""
        if not self.drafts:
            raise SpeculativeError("the server ran no verification step during the run: nothing was speculated")
        return 1.0 + self.accepted / self.drafts


def serving_speculative_figures(speculative: Sequence[Any], alone: Sequence[Any],
                                counters: SpeculationCounters) -> dict[str, float]:
    """The figures of speculative runs (``harness.serving.loadgen.LoadResult``, one per round) against the same
    workload sent to the target alone in the same rounds, with the server's counter deltas summed
    over the speculative runs. Durations are the rounds' medians, so one scheduler hiccup on a shared
    CPU moves a single round, not the figure."""
    if not speculative or len(speculative) != len(alone):
        raise SpeculativeError(f"{len(speculative)} speculative and {len(alone)} target-alone rounds: need the same, at least 1")
    for name, runs in (("speculative", speculative), ("target-alone", alone)):
        for run in runs:
            if not run.duration_s > 0 or not all(r.success for r in run.results):
                raise SpeculativeError(f"a {name} run did not complete: duration {run.duration_s}, "
                                       f"{sum(not r.success for r in run.results)} failed requests")
    tokens = {sum(r.output_len for r in run.results) for run in (*speculative, *alone)}
    if len(tokens) != 1:
        raise SpeculativeError(f"the runs returned different token counts {sorted(tokens)}: speculative and "
                               "target-alone runs must generate the same tokens")
    n = tokens.pop()
    speculative_s = Summary.of([run.duration_s for run in speculative]).p50
    alone_s = Summary.of([run.duration_s for run in alone]).p50
    steps = [gap for run in speculative for r in run.results for gap in r.itl_ms]
    figures = {
        "spec_acceptance_rate": counters.acceptance_rate,
        "spec_tokens_per_step": counters.tokens_per_step,
        "spec_steps": counters.drafts / len(speculative),
        "spec_step_ms_p50": Summary.of(steps).p50 if steps else math.nan,
        "e2e_ms_p50": Summary.of([r.e2el_ms for run in speculative for r in run.results]).p50,
        "target_e2e_ms_p50": Summary.of([r.e2el_ms for run in alone for r in run.results]).p50,
        "tokens_per_s": n / speculative_s,
        "target_tokens_per_s": n / alone_s,
        "spec_speedup": alone_s / speculative_s,
    }
    return {k: v for k, v in figures.items() if not (isinstance(v, float) and math.isnan(v))}
