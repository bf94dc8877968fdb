"""The engine protocol every backend implements, and the records it returns.

One engine serves one (checkpoint, shape) for a whole session: ``prefill`` and ``decode_step``
are the CTE and TKG sub-steps the perf suites time separately, ``generate`` is the end-to-end
greedy loop with EOS disabled (the published eos id 2 is a BPE token), ``logits`` feeds accuracy
and FNS work.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from harness.backends.device import DeviceClock
from harness.core.scored import ScoredToken  # noqa: F401 (re-exported: the backends return it)
from harness.carbon.fns import kmer_block
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.errors import BackendCannot
from harness.core.measure import throughput
from harness.core.spec import RunShape
from harness.core.vocab import PAD_TOKEN_ID

Selector = Callable[[torch.Tensor], torch.Tensor]  # logits [B, V] -> next token ids [B]


@dataclass(frozen=True)
class Batch:
    """Right-padded prompts (pad 151643), as the published tokenizer always produces them."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    prompts: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def prompt_lengths(self) -> torch.Tensor:
        return self.attention_mask.sum(dim=1)

    @property
    def max_prompt_tokens(self) -> int:
        return int(self.prompt_lengths.max())

    @classmethod
    def from_prompts(cls, tokenizer: CarbonTokenizer, prompts: Sequence[str]) -> "Batch":
        if not prompts:
            raise ValueError("a batch needs at least one prompt")
        enc = tokenizer(list(prompts), padding=True, return_tensors="pt")
        lengths = enc["attention_mask"].sum(dim=1)
        if int(lengths.min()) == 0:
            raise ValueError("an empty prompt cannot be prefilled: every prompt needs at least one token")
        return cls(enc["input_ids"], enc["attention_mask"], tuple(prompts))

    @classmethod
    def from_ids(cls, rows: Sequence[Sequence[int]]) -> "Batch":
        width = max(len(r) for r in rows)
        ids = torch.tensor([list(r) + [PAD_TOKEN_ID] * (width - len(r)) for r in rows], dtype=torch.long)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
        return cls(ids, mask)


class GeneratedTokens:
    """What every generation result derives from its generated ids (``tokens``, [B, new])."""

    tokens: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def new_tokens(self) -> int:
        return int(self.tokens.shape[1])


@dataclass
class GenerationResult(GeneratedTokens):
    """Tokens and timings of one greedy generation of a batch."""

    tokens: torch.Tensor  # [B, new] generated ids (the prompt not included)
    cte_ms: float
    tkg_ms: list[float] = field(default_factory=list)
    e2e_ms: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return throughput(self.batch_size * self.new_tokens, self.e2e_ms)


def rounded(value: float) -> float:
    """A log-probability as the contract stores it: to 1e-7 nats (fp32 stacks differ by ~1e-6)."""
    return round(float(value), 7)


def scored_from_logits(logits: torch.Tensor, tokens: Sequence[int], top_k: int, probe_ids: Sequence[int] = (),
                       extra_ids: Sequence[Sequence[int]] = ()) -> list[ScoredToken]:
    """``ScoredToken`` rows from logits ``[N, V]`` predicting ``tokens`` (log-softmax in float64, so
    the reference's rounding is not the side's); ``probe_ids``: the contract's probe ids, read at every
    row; ``extra_ids``: per row, further ids whose log-probabilities the row carries."""
    lp = torch.log_softmax(logits.detach().double(), dim=-1)
    values, ids = lp.topk(top_k, dim=-1)
    probes = lp[:, list(probe_ids)].tolist() if probe_ids else [[] for _ in tokens]
    out = []
    for i, t in enumerate(tokens):
        top = tuple(zip(ids[i].tolist(), map(rounded, values[i].tolist())))
        held = set(ids[i].tolist()) | {int(t)}
        wanted = sorted({int(j) for j in (extra_ids[i] if i < len(extra_ids) else ())} - held)
        found = lp[i, wanted].tolist() if wanted else []
        extra = tuple(zip(wanted, map(rounded, found)))
        out.append(ScoredToken(int(t), rounded(lp[i, int(t)]), top, extra, tuple(map(rounded, probes[i]))))
    return out


def padded_scores(engine: "Engine", prompt: Sequence[int], continuation: Sequence[int], pad: int, pad_id: int,
                  top_k: int, probe_ids: Sequence[int] = ()) -> list[ScoredToken]:
    """``Engine.score_padded`` for an engine whose ``continuation_logits`` prefills and decodes a padded
    batch as it is (transformers, NxDI)."""
    batch = Batch(torch.tensor([[*prompt, *[pad_id] * pad]]), torch.tensor([[1] * len(prompt) + [0] * pad]))
    logits = engine.continuation_logits(batch, torch.tensor([list(continuation)]))
    return scored_from_logits(logits, continuation, top_k, probe_ids)


def batched_scores(engine: "Engine", prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]],
                   pad_id: int, top_k: int, probe_ids: Sequence[int] = ()) -> list[list[ScoredToken]]:
    """``Engine.score_batched`` for the same engines: prompts of mixed lengths in one batch, each right-padded
    to the longest (attention mask 0 there), as the stack's static batch pads them, then decode steps fed
    each row's continuation (all of one length)."""
    width = max(len(p) for p in prompts)
    n = len(continuations[0])
    if any(len(c) != n for c in continuations) or len(prompts) != len(continuations):
        raise ValueError(f"{len(prompts)} prompts and continuations of lengths {[len(c) for c in continuations]}: "
                         "one continuation per prompt, all of one length (decode steps run the batch together)")
    batch = Batch(torch.tensor([[*p, *[pad_id] * (width - len(p))] for p in prompts]),
                  torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts]))
    logits = engine.continuation_logits(batch, torch.tensor([list(c) for c in continuations])).reshape(len(prompts), n, -1)
    return [scored_from_logits(logits[i], c, top_k, probe_ids) for i, c in enumerate(continuations)]


def fns_log_marginals(logits: torch.Tensor) -> list[list[float]]:
    """Per row of logits ``[N, V]``, the 24 FNS log-marginals log P(base b at 6-mer position j) (j-major,
    bases A C G T), from a softmax over the 6-mer block (``harness.carbon.fns``)."""
    from harness.carbon.fns import kmer_marginals

    marginals = kmer_marginals(kmer_block(logits.detach()).double().numpy())  # the numpy path: float64 throughout
    return [[rounded(v) for v in row] for row in torch.log(torch.from_numpy(marginals)).reshape(len(logits), -1).tolist()]


@dataclass(frozen=True)
class EngineInfo:
    """What an engine runs on: carried into every benchmark's extra_info."""

    backend: str
    model: str
    checkpoint: str
    shape: str
    device: str
    dtype: str
    load_s: float
    compile_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Engine(abc.ABC):
    """A loaded model for one (checkpoint, shape): prefill / decode / generate / logits."""

    shape: RunShape
    info: EngineInfo

    @abc.abstractmethod
    def prefill(self, batch: Batch) -> torch.Tensor:
        """Context encoding: run the prompts, keep the KV cache, return the first greedy token [B]."""

    @abc.abstractmethod
    def decode_step(self) -> torch.Tensor:
        """Token generation: one greedy step on the cache, returning the next token [B]."""

    @abc.abstractmethod
    def generate(self, batch: Batch, max_new_tokens: int, select: Selector | None = None) -> GenerationResult:
        """Exactly ``max_new_tokens`` tokens per row, EOS disabled, with CTE/TKG/E2E timings: greedy,
        or chosen by ``select`` from each step's logits where the backend exposes them."""

    @abc.abstractmethod
    def logits(self, batch: Batch) -> torch.Tensor:
        """Full-vocabulary logits [B, T, V] of the prompts (float32, on the CPU)."""

    def kmer_logits(self, batch: Batch) -> torch.Tensor:
        """The 4,096 6-mer logits ``[B, T, 4096]`` at every position of the prompts (float32, on the
        CPU), up to one constant per position (a server returns log-probabilities): all that scoring
        reads (FNS marginals, a softmax over them). This default slices ``logits``; a backend that can
        return only the 6-mer head (the neuron scoring build, a server's DNA-block view) overrides it."""
        return kmer_block(self.logits(batch))

    def continuation_logits(self, batch: Batch, continuation: torch.Tensor) -> torch.Tensor:
        """Logits ``[B * N, V]`` predicting each of the N ``continuation`` tokens of every row, with
        the row's prompt and the continuation so far as input (teacher forcing, for accuracy checks).
        This default runs one full forward pass over prompt + continuation."""
        lengths = batch.prompt_lengths.tolist()
        rows = [batch.input_ids[i, :n].tolist() + continuation[i].tolist() for i, n in enumerate(lengths)]
        logits = self.logits(Batch.from_ids(rows))
        n = continuation.shape[1]
        return torch.cat([logits[i, lengths[i] - 1: lengths[i] - 1 + n] for i in range(len(rows))])

    def scored(self, prompt: Sequence[int], continuation: Sequence[int], top_k: int = 2) -> list[ScoredToken]:
        """Teacher-forced: for each token of ``continuation``, its log-probability and the top ``top_k``
        given ``prompt`` and the continuation before it. This default reads ``continuation_logits``; a
        server answers from its prompt logprobs."""
        logits = self.continuation_logits(Batch.from_ids([list(prompt)]), torch.tensor([list(continuation)]))
        return scored_from_logits(logits, continuation, top_k)

    def score(self, prompt: Sequence[int], continuation: Sequence[int], top_k: int, probe_ids: Sequence[int] = (),
              fns: bool = False) -> tuple[list[ScoredToken], list[list[float]] | None]:
        """``scored`` with the contract's probe ids read at every row, and (``fns``) each row's 24 FNS
        log-marginals: what ``harness.workloads.contract`` asks of a side. This default reads
        ``continuation_logits``; a server that returns only its top-N overrides it (no probes)."""
        logits = self.continuation_logits(Batch.from_ids([list(prompt)]), torch.tensor([list(continuation)]))
        return scored_from_logits(logits, continuation, top_k, probe_ids), fns_log_marginals(logits) if fns else None

    # True for an engine whose ``continuation_logits`` runs a padded batch through its own prefill and decode
    # (transformers, NxDI): ``score_padded`` and ``score_batched`` then score through it. The default full pass
    # drops the padding, which would compare the unpadded row with itself.
    scores_padded_batches = False

    def score_padded(self, prompt: Sequence[int], continuation: Sequence[int], pad: int, pad_id: int, top_k: int,
                     probe_ids: Sequence[int] = ()) -> list[ScoredToken]:
        """``score`` of ``prompt`` as a padded row (right-padded with ``pad`` ids ``pad_id``, attention
        mask 0 there, as ``generate_padded``): the contract compares it position by position with the
        unpadded rows, so a stack whose decode ignores the padding mask shows even where the greedy
        tokens survive it (``padded_scores``)."""
        if not self.scores_padded_batches:
            raise BackendCannot(f"{type(self).__name__} does not score a padded row (a server never pads: its "
                                "batched rows are concurrent requests)")
        return padded_scores(self, prompt, continuation, pad, pad_id, top_k, probe_ids)

    def score_batched(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], pad_id: int,
                      top_k: int, probe_ids: Sequence[int] = ()) -> list[list[ScoredToken]]:
        """``score`` of several prompts of mixed lengths in one batch, each row's rows (``batched_scores``): the
        contract holds each to the same prompt's unpadded single run, position by position, so a stack whose
        batched decode mixes rows' KV slots or positions shows there."""
        if not self.scores_padded_batches:
            raise BackendCannot(f"{type(self).__name__} does not score a batch of mixed lengths (a server never "
                                "pads: its batched rows are concurrent requests)")
        self.shape.validate_request(max(len(p) for p in prompts), len(continuations[0]), len(prompts))
        return batched_scores(self, prompts, continuations, pad_id, top_k, probe_ids)

    def generate_until_eos(self, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int) -> list[int]:
        """Greedy tokens of one prompt through the stack's own stopping rule with ``eos_token_id`` as
        its EOS: the tokens up to and including the first EOS (all ``max_new_tokens`` without one). The
        output contract checks that a stack honours EOS when it is not ignored."""
        raise BackendCannot(f"{type(self).__name__} has no EOS-honouring generation")

    def decode_path(self, prompt: Sequence[int], max_new_tokens: int, top_k: int,
                    fns: bool = False) -> tuple[list[int], list[ScoredToken], list[list[float]] | None] | None:
        """The greedy continuation of ``prompt`` with what the stack's decode steps computed for each token
        it generated (and, ``fns``, each row's 24 FNS log-marginals), where the stack reports that apart from
        a teacher-forced pass: a server's completion logprobs. None (this default): the stack's teacher-forced
        rows already run through its decode step (NxDI, transformers: ``continuation_logits``)."""
        return None

    def generate_padded(self, prompt: Sequence[int], max_new_tokens: int, pad: int, pad_id: int) -> list[int]:
        """Greedy tokens of ``prompt`` as a padded row: right-padded with ``pad`` ids ``pad_id`` (attention
        mask 0 there), as a static batch pads its shorter rows. A server overrides it (it never pads)."""
        self.reset()
        batch = Batch(torch.tensor([[*prompt, *[pad_id] * pad]]), torch.tensor([[1] * len(prompt) + [0] * pad]))
        out = self.generate(batch, max_new_tokens).tokens[0].tolist()
        self.reset()
        return out

    @property
    def steps_left(self) -> int:
        """Decode steps the compiled shape still has room for (0 before any prefill)."""
        return 0

    def synchronize(self) -> None:
        """Wait until the work this engine queued on its device is done. A call on an asynchronous
        device (CUDA) returns once its work is queued: every timed call waits here at its start and
        end (``harness.plugin.timing``), else a timer reads the launch and the next call pays for it.
        Engines whose calls finish before returning (CPU, NxDI, a server's responses) need nothing."""

    def device_clock(self) -> DeviceClock | None:
        """The device's own clock (``harness.backends.device``): CUDA events and kernel time beside the
        wall time; None where there is none (a CPU: its wall time is its device time)."""
        return None

    def reset(self) -> None:
        """Forget the KV cache (between runs)."""

    def close(self) -> None:
        """Release the model."""

    def check_batch(self, batch: Batch, max_new_tokens: int = 0) -> None:
        self.shape.validate_request(batch.max_prompt_tokens, max_new_tokens, batch.size)
