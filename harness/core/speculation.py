"""Speculative decoding as numbers, with no engine: speculation length and acceptance checks, the
expected tokens per verification step and the predicted speedup, the workloads (cases) the
benchmarks run, and the shape labels they gate under. ``carbon-harness plan --draft`` uses only this."""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.spec import RunShape, get_shape

DEFAULT_SPECULATION_LENGTH = 4
SELF_DRAFT = "self"  # the target is its own draft: acceptance exactly 1.0
EMBEDDED_DRAFTS = ("carbon-tiny-draft", SELF_DRAFT)  # the embedded default's pairings (acceptance ~0 and 1.0)


# All speculative runs are batch-1 generations at this compiled shape (ctx 256, seq 512): a 512 bp prompt
# (87 tokens) + 256 new tokens + the draft tokens, and the DNA suite's 1080 bp (181 tokens) + 180, both fit.
SPECULATIVE_SHAPE = "dna-suite-bs1"


class SpeculativeError(ValueError):
    """An impossible speculative setting (speculation length, acceptance); the message names the value."""


# ---------------------------------------------------------------------------------------------
# The math
# ---------------------------------------------------------------------------------------------

def check_speculation_length(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpeculativeError(f"speculation length {k!r} must be a positive integer (draft tokens per step)")
    return k


def check_acceptance(a: float) -> float:
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
        raise SpeculativeError(f"acceptance rate {a!r} must be a number in [0, 1]")
    return float(a)


def expected_tokens_per_step(acceptance: float, k: int) -> float:
    """Tokens one verification step yields when each draft token is accepted with probability
    ``acceptance`` independently (Leviathan et al. 2023): ``(1 - a**(k+1)) / (1 - a)``; k + 1 at a = 1."""
    a, k = check_acceptance(acceptance), check_speculation_length(k)
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def predicted_speedup(acceptance: float, k: int, draft_ms: float, verify_ms: float, target_ms: float) -> float:
    """Speedup over the target alone: tokens per step over the step's time (k draft steps and one
    verification), in units of one target decode step."""
    for name, value in (("draft_ms", draft_ms), ("verify_ms", verify_ms), ("target_ms", target_ms)):
        if not value > 0:
            raise SpeculativeError(f"{name}={value!r} must be positive")
    step_ms = k * draft_ms + verify_ms
    return expected_tokens_per_step(acceptance, k) * target_ms / step_ms


@dataclass(frozen=True)
class SpeculativeCase:
    """A speculative workload. ``cpu_new_tokens``: the CPU-sized length (an unrelated draft makes
    every token cost k draft steps, so the reference lengths would take minutes on a CPU): 6 is the
    prefill's token and one full step of k = 4, 11 two full steps."""

    name: str
    prompt_bp: int
    new_tokens: int
    cpu_new_tokens: int

    def tokens_for(self, hardware_kind: str) -> int:
        return self.cpu_new_tokens if hardware_kind == "cpu" else self.new_tokens

    @property
    def whole_suite(self) -> bool:
        """The DNA suite's seven cases (else only its balanced case, at ``prompt_bp``):
        ``harness.carbon.dna.speculative_prompts`` builds them."""
        return self.name == DNA_SUITE_NAME


DNA_SUITE_NAME = "dna-suite"
DNA_SUITE_CASE = SpeculativeCase(DNA_SUITE_NAME, 1080, 180, 6)


def gate_shape(draft_label: str) -> str:
    """The shape name speculative figures are gated under: one per draft (``speculative-self``...)."""
    return f"speculative-{draft_label}"


def speculative_shape() -> RunShape:
    return get_shape(SPECULATIVE_SHAPE)
