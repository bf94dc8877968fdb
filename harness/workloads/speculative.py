"""Speculative decoding: a draft model proposes k greedy tokens, the target verifies them in one
forward pass over its KV cache, and the longest agreeing prefix plus the target's own next token
is kept, so the output is exactly the target's greedy output whatever the draft proposes.

Here: the math (pure: accepted prefixes, the expected tokens per verification step
``(1 - a**(k+1)) / (1 - a)`` and the speedup it buys for a draft/target step-time ratio); the
transformers side (the harness's own draft-then-verify loop on two ``HFEngine`` s,
``speculative_generate``, batched, and transformers' ``assistant_model`` assisted decoding,
``assisted_generate``, batch 1 only, as transformers allows); the benchmark cases and figures.
Elsewhere: planning (``harness.analysis.speculation_plan``), NxDI's kwargs
(``harness.backends.neuron.config``) and vLLM's ``--speculative-config``
(``harness.serving.speculative``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.backends.base import Batch, Engine, GeneratedTokens
from harness.core.errors import BackendError
from harness.core.measure import Summary, Timer, throughput
from harness.core.speculation import DEFAULT_SPECULATION_LENGTH, SpeculativeCase, check_speculation_length


def accepted_prefix(drafts: torch.Tensor, predictions: torch.Tensor) -> torch.Tensor:
    """Per row, how many leading draft tokens [B, k] the target's greedy predictions [B, >= k] agree with."""
    k = drafts.shape[1]
    if k == 0:
        return torch.zeros(drafts.shape[0], dtype=torch.long)
    agree = (drafts == predictions[:, :k].to(drafts.device)).long()
    return agree.cumprod(dim=1).sum(dim=1)


# ---------------------------------------------------------------------------------------------
# The harness's own draft-then-verify loop (transformers engines)
# ---------------------------------------------------------------------------------------------

@dataclass
class SpeculativeResult(GeneratedTokens):
    """Tokens and timings of one speculative generation of a batch."""

    tokens: torch.Tensor  # [B, new]
    speculation_length: int
    cte_ms: float  # target and draft prefill
    e2e_ms: float
    draft_ms: list[float] = field(default_factory=list)  # per verification step
    verify_ms: list[float] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)  # draft tokens proposed per step, all rows
    accepted: list[int] = field(default_factory=list)  # of those, accepted by the target (each row's own prefix)
    advanced: list[int] = field(default_factory=list)  # tokens every row advanced by per step (shortest prefix + 1)

    @property
    def steps(self) -> int:
        return len(self.verify_ms)

    @property
    def acceptance_rate(self) -> float:
        """Accepted over proposed draft tokens (the ``a`` of the speedup formula)."""
        proposed = sum(self.proposed)
        return sum(self.accepted) / proposed if proposed else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Tokens per row per verification step, the target's own token included (1 to k + 1)."""
        return sum(self.advanced) / self.steps if self.steps else 0.0


def combine_results(results: Sequence[SpeculativeResult]) -> SpeculativeResult:
    """One result for several generations run one after another (the DNA suite's cases at batch 1):
    tokens stacked by row, times added, per-step records pooled."""
    if not results:
        raise ValueError("no speculative generation to combine")
    if len({r.new_tokens for r in results}) != 1:
        raise ValueError(f"generations of different lengths {sorted({r.new_tokens for r in results})} cannot be combined")
    combined = SpeculativeResult(torch.cat([r.tokens for r in results]), results[0].speculation_length,
                                 sum(r.cte_ms for r in results), sum(r.e2e_ms for r in results))
    for r in results:
        combined.draft_ms += r.draft_ms
        combined.verify_ms += r.verify_ms
        combined.proposed += r.proposed
        combined.accepted += r.accepted
        combined.advanced += r.advanced
    return combined


def check_pair(target: Engine, draft: Engine) -> None:
    """Both engines must expose multi-token verification and share the vocabulary and device."""
    for role, engine in (("target", target), ("draft", draft)):
        if not (hasattr(engine, "extend_logits") and hasattr(engine, "rewind")):
            raise BackendError(f"the {role} engine ({engine.info.backend}) cannot verify draft tokens in one pass; "
                               "the harness's speculative loop runs on the hf backend")
    if target is draft:
        raise BackendError("the draft must be its own engine (its own KV cache), even when it is the target's model")
    tv, dv = target.model.config.vocab_size, draft.model.config.vocab_size
    if tv != dv:
        raise BackendError(f"draft {draft.info.model} has vocab_size {dv}, target {target.info.model} {tv}: "
                           "a draft must share the target's tokenizer")
    if str(target.device) != str(draft.device):
        raise BackendError(f"draft on {draft.device}, target on {target.device}: both must be on one device")


def speculative_generate(target: Engine, draft: Engine, batch: Batch, max_new_tokens: int,
                         speculation_length: int = DEFAULT_SPECULATION_LENGTH) -> SpeculativeResult:
    """Exactly ``max_new_tokens`` greedy tokens per row, token-identical to ``target.generate``.

    Each step the draft proposes k tokens (fewer at the end), the target scores ``last + drafts``
    in one forward pass, and every row advances by the batch's shortest agreeing prefix + the
    target's token there: that token follows a prefix every row verified, so rows stay aligned
    (right padding and position ids as in ``HFEngine``) and nothing unverified is ever emitted.
    Rejected positions are dropped from both KV caches.
    """
    k = check_speculation_length(speculation_length)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
    check_pair(target, draft)
    target.check_batch(batch, max_new_tokens)
    draft.check_batch(batch, max_new_tokens)
    sync = target.synchronize  # one device: the draft's work is on the target's stream
    result = SpeculativeResult(torch.empty(0), k, 0.0, 0.0)
    out: list[torch.Tensor] = []
    with Timer(sync) as total:
        with Timer(sync) as cte:
            last = target.prefill_logits(batch).argmax(dim=-1)
            draft.prefill_logits(batch)
        out.append(last.unsqueeze(1))
        generated = 1
        pending = last.new_empty(batch.size, 0)  # tokens the draft's cache still lacks, before ``last``
        while generated < max_new_tokens:
            k_step = min(k, max_new_tokens - generated - 1)
            with Timer(sync) as drafting:
                proposals: list[torch.Tensor] = []
                if k_step:
                    feed = torch.cat([pending, last.unsqueeze(1)], dim=1)
                    proposals.append(draft.extend_logits(feed)[:, -1].argmax(dim=-1))
                    for _ in range(k_step - 1):
                        proposals.append(draft.decode_logits(proposals[-1]).argmax(dim=-1))
                    pending = last.new_empty(batch.size, 0)
                else:
                    pending = torch.cat([pending, last.unsqueeze(1)], dim=1)
                drafts = torch.stack(proposals, dim=1) if proposals else last.new_empty(batch.size, 0)
            with Timer(sync) as verifying:
                predictions = target.extend_logits(torch.cat([last.unsqueeze(1), drafts], dim=1)).argmax(dim=-1)
                agreed = accepted_prefix(drafts, predictions)
                m = int(agreed.min())
                target.rewind(k_step - m)
                if k_step:
                    if m < k_step:
                        draft.rewind(k_step - 1 - m)  # the draft fed drafts[:, :k_step - 1]; keep drafts[:, :m]
                    else:
                        pending = drafts[:, -1:]  # all accepted: the draft never fed its last proposal
            last = predictions[:, m]
            out.append(torch.cat([drafts[:, :m], last.unsqueeze(1)], dim=1))
            generated += m + 1
            result.draft_ms.append(drafting.ms)
            result.verify_ms.append(verifying.ms)
            result.proposed.append(k_step * batch.size)
            result.accepted.append(int(agreed.sum()))
            result.advanced.append(m + 1)
    result.tokens = torch.cat(out, dim=1)[:, :max_new_tokens].cpu()
    result.cte_ms, result.e2e_ms = cte.ms, total.ms
    return result


# ---------------------------------------------------------------------------------------------
# transformers' assisted decoding (``generate(assistant_model=...)``)
# ---------------------------------------------------------------------------------------------

def assisted_generation_config(max_new_tokens: int, speculation_length: int, pad_token_id: int) -> Any:
    """Greedy, EOS off (the published eos id 2 is a BPE token), a constant ``num_assistant_tokens``
    and no confidence cut-off, so transformers drafts exactly k tokens per step like the harness."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                            eos_token_id=None, pad_token_id=pad_token_id, bos_token_id=None,
                            num_assistant_tokens=check_speculation_length(speculation_length),
                            num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)


@dataclass
class AssistedResult:
    tokens: torch.Tensor  # [1, new]
    e2e_ms: float


def assisted_generate(target: Engine, draft: Engine | None, batch: Batch, max_new_tokens: int,
                      speculation_length: int = DEFAULT_SPECULATION_LENGTH) -> AssistedResult:
    """``target.model.generate(..., assistant_model=draft.model)`` (or without a draft: the same
    generate loop alone, the fair baseline). transformers runs assisted decoding at batch 1 only."""
    from harness.core.vocab import PAD_TOKEN_ID

    if batch.size != 1:
        raise BackendError(f"transformers' assisted decoding runs batch 1 only, got a batch of {batch.size}")
    target.check_batch(batch, max_new_tokens)
    config = assisted_generation_config(max_new_tokens, speculation_length, PAD_TOKEN_ID)
    kwargs: dict[str, Any] = {}
    if draft is not None:
        check_pair(target, draft)
        kwargs["assistant_model"] = draft.model
        # transformers reads the draft length from the assistant's own generation config
        for key in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
            setattr(draft.model.generation_config, key, getattr(config, key))
    ids = batch.input_ids.to(target.device)
    mask = batch.attention_mask.to(target.device)
    with torch.inference_mode(), Timer(target.synchronize) as total:
        out = target.model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **kwargs)
    return AssistedResult(out[:, ids.shape[1]:].cpu(), total.ms)


# The T4 devlog's configurations (Carbon-3B with the 500M draft: 0.87-0.90x with assistant_model).
T4_CASES = (
    SpeculativeCase("128bp-64new", 128, 64, 6),
    SpeculativeCase("128bp-256new", 128, 256, 11),
    SpeculativeCase("512bp-64new", 512, 64, 6),
    SpeculativeCase("512bp-256new", 512, 256, 11),
)


def speculative_figures(results: Sequence[SpeculativeResult], target_e2e_ms: Sequence[float]) -> dict[str, float]:
    """The figures of repeated speculative generations of one batch, against the target alone on the
    same prompts (its e2e times, measured in the same session)."""
    if not results or not target_e2e_ms:
        raise ValueError("no speculative generation or no target-alone baseline was measured")
    first = results[0]
    e2e = Summary.of([r.e2e_ms for r in results]).p50
    target = Summary.of(list(target_e2e_ms)).p50
    draft = [ms for r in results for ms in r.draft_ms if ms > 0]
    return {
        "spec_acceptance_rate": first.acceptance_rate,
        "spec_tokens_per_step": first.tokens_per_step,
        "spec_steps": first.steps,
        "spec_draft_ms_per_step": Summary.of(draft).p50 if draft else 0.0,
        "spec_verify_ms_per_step": Summary.of([ms for r in results for ms in r.verify_ms]).p50,
        "e2e_ms_p50": e2e,
        "target_e2e_ms_p50": target,
        "tokens_per_s": throughput(first.batch_size * first.new_tokens, e2e),
        "target_tokens_per_s": throughput(first.batch_size * first.new_tokens, target),
        "spec_speedup": target / e2e,
    }


@dataclass(frozen=True)
class EndsComparison:
    """The target alone and with two drafts, timed in the same interleaved rounds (fastest round
    each): the speedups of a high-acceptance and a low-acceptance draft, and their ratio.

    Why not the ratio of two per-draft benchmarks: those are medians taken minutes apart, and on a
    shared 2-core box one of them caught a busy neighbour and the ratio of a 2x gap came out 0.75.
    Here the three contenders take turns, round by round, and interference only ever adds time."""

    clock: str  # "process_cpu" on a CPU device (time spent descheduled does not count), else "wall"
    rounds: int
    alone_s: float
    high_s: float
    low_s: float
    high: SpeculativeResult
    low: SpeculativeResult
    alone_tokens: torch.Tensor

    @property
    def lossless(self) -> bool:
        """Both drafts' outputs are the target alone's, token for token."""
        return self.high.tokens.equal(self.alone_tokens) and self.low.tokens.equal(self.alone_tokens)

    def figures(self, high_label: str, low_label: str) -> dict[str, float]:
        return {"spec_speedup_gain": self.low_s / self.high_s,
                f"spec_speedup_{high_label}": self.alone_s / self.high_s,
                f"spec_speedup_{low_label}": self.alone_s / self.low_s,
                f"spec_acceptance_rate_{high_label}": self.high.acceptance_rate,
                f"spec_acceptance_rate_{low_label}": self.low.acceptance_rate}


def compare_ends(target: Engine, high: Engine, low: Engine, batch: Batch, max_new_tokens: int,
                 speculation_length: int = DEFAULT_SPECULATION_LENGTH, rounds: int = 5) -> EndsComparison:
    """``EndsComparison`` of ``high`` and ``low`` as drafts of ``target`` (check ``lossless``: the
    speedups mean something only if both outputs are the target's)."""
    import time

    from harness.core.measure import fastest_interleaved

    on_cpu = getattr(target, "device", None) == torch.device("cpu")
    clock, clock_name = (time.process_time, "process_cpu") if on_cpu else (time.perf_counter, "wall")
    k = check_speculation_length(speculation_length)
    best = fastest_interleaved({
        "alone": waited(target, lambda: target.generate(batch, max_new_tokens)),
        "high": waited(target, lambda: speculative_generate(target, high, batch, max_new_tokens, k)),
        "low": waited(target, lambda: speculative_generate(target, low, batch, max_new_tokens, k)),
    }, rounds=rounds, clock=clock)
    return EndsComparison(clock_name, rounds, best["alone"].seconds, best["high"].seconds, best["low"].seconds,
                          best["high"].result, best["low"].result, best["alone"].result.tokens)


def waited(engine: Engine, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with the engine's device waited on before and after it, so a clock around it reads
    its work and none of the call before it."""
    def run() -> Any:
        engine.synchronize()
        out = call()
        engine.synchronize()
        return out

    return run


def loop_unavailable_reason(backend: str, neuron_cpu: bool = False, hf_compile: bool = False) -> str | None:
    """Why the harness's own speculative loop cannot run on ``backend`` (None on eager hf), and where
    that backend's speculation is covered instead: the reason a test skips with."""
    if backend == "hf":
        return ("--carbon-hf-compile: the compiled engine decodes one token a step on a static cache; draft "
                "verification and rewinds run on the eager engine (run without --carbon-hf-compile)") if hf_compile else None
    if backend == "openai":
        return ("on a server, vLLM speculates itself: tests/serving/test_speculative_serving.py measures it and checks "
                "it is lossless (--carbon-serve vllm starts a server per --carbon-draft)")
    if backend == "neuron":
        from harness.backends.neuron.host import neuron_speculation_unavailable_reason

        cpu = neuron_speculation_unavailable_reason("cpu") if neuron_cpu else None
        return ("the harness does not run NxDI speculation yet: harness.backends.neuron.config builds its kwargs, "
                "checked against NxDI's own NeuronConfig in tests/unit/workloads/test_speculative.py" + (f"; {cpu}" if cpu else ""))
    return f"the speculative loop runs on the hf backend, not {backend}"
