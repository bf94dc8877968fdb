"""The engine adapter over an OpenAI-compatible server: a static batch sent as concurrent streamed
requests through the torch-free client (``harness.serving.client``), read back as a
``GenerationResult`` with the server's own timings per request; and, on a scoring shape, the 6-mer
log-probabilities at every position through the server's prompt logprobs (``harness.serving.scoring``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np
import torch

from harness.backends.base import Batch, Engine, EngineInfo, GenerationResult, ScoredToken, Selector
from harness.core.errors import BackendCannot
from harness.core.spec import SCORING_SHAPES, RunShape
from harness.core.vocab import NUM_KMERS
from harness.serving.client import (
    Endpoint,
    RequestResult,
    ServingError,
    _aiohttp,
    client_session,
    fetch_prompt_logprobs,
    resolve_endpoint,
    run_async,
    stream_completion,
)
from harness.serving.generated import Generated, IdsNotHonoured, generate_with_logprobs, kmer_decode_logprobs
from harness.serving.metrics import failure_summary
from harness.serving.scoring import ScoringEndpoint, kmer_logprobs


class OpenAIEngine(Engine):
    """A served model measured through its API: ``generate`` sends a batch's rows as concurrent
    streamed requests. A server exposes no separate CTE / TKG step and no full-vocabulary logits,
    so ``prefill`` and ``decode_step`` / ``logits`` are not available; the serving benchmarks
    (tests/serving) measure TTFT / ITL instead.

    On a scoring shape (``SCORING_SHAPES``) the engine scores on ``scoring`` (the session's server of the
    checkpoint's DNA-block view, or the given endpoint's full vocabulary) and generates nothing, like the
    neuron scoring build."""

    def __init__(self, endpoint: Endpoint | ScoringEndpoint, shape: RunShape, model_name: str,
                 checkpoint: str = "", dtype: str = "server") -> None:
        """``dtype``: the server's, where the run states it (--carbon-dtype); "server" where unknown."""
        _aiohttp()
        start = time.perf_counter()
        self.scoring_only = shape.name in SCORING_SHAPES
        scoring = endpoint if isinstance(endpoint, ScoringEndpoint) else ScoringEndpoint(endpoint)
        self.scoring = ScoringEndpoint(run_async(resolve_endpoint(scoring.endpoint)), scoring.id_offset,
                                       scoring.top_k, scoring.view)
        self.endpoint = self.scoring.endpoint
        self.shape = shape
        extra = {"served_model": self.endpoint.model}
        if self.scoring_only:
            extra.update(build="scoring", scoring=self.scoring.describe())
        self.info = EngineInfo("openai", model_name, checkpoint, shape.name, device=self.endpoint.url,
                               dtype=dtype, load_s=time.perf_counter() - start, extra=extra)

    def _refuse_generation(self) -> None:
        if self.scoring_only:
            raise BackendCannot(f"{self.shape.name!r} is a scoring shape: its server scores (kmer_logits) and "
                                "generates nothing here")

    def requests(self, batch: Batch, max_new_tokens: int) -> list[RequestResult]:
        rows = [batch.input_ids[i, :n].tolist() for i, n in enumerate(batch.prompt_lengths.tolist())]

        async def go() -> list[RequestResult]:
            async with client_session(self.endpoint) as http:
                t0 = time.perf_counter()
                return list(await asyncio.gather(*(stream_completion(http, self.endpoint, r, max_new_tokens, t0)
                                                   for r in rows)))

        return run_async(go())

    def generate(self, batch: Batch, max_new_tokens: int, select: Selector | None = None) -> GenerationResult:
        self._refuse_generation()
        if select is not None:
            raise BackendCannot("a server samples on its side: custom token selection (FNS) needs logits")
        self.check_batch(batch, max_new_tokens)
        start = time.perf_counter()
        results = self.requests(batch, max_new_tokens)
        e2e_ms = (time.perf_counter() - start) * 1000.0
        if not all(r.success for r in results):
            raise ServingError(f"{sum(not r.success for r in results)} of {len(results)} requests failed: "
                               f"{failure_summary(results)}")
        tokens = torch.tensor([r.output_ids for r in results], dtype=torch.long)
        ttft = max(r.ttft_ms or 0.0 for r in results)
        return GenerationResult(tokens, cte_ms=ttft, tkg_ms=[g for r in results for g in r.itl_ms], e2e_ms=e2e_ms)

    def prefill(self, batch: Batch) -> torch.Tensor:
        raise BackendCannot("a server exposes no separate prefill step: TTFT in tests/serving measures it")

    def decode_step(self) -> torch.Tensor:
        raise BackendCannot("a server exposes no separate decode step: ITL in tests/serving measures it")

    def logits(self, batch: Batch) -> torch.Tensor:
        raise BackendCannot("a server returns top-k logprobs, not full-vocabulary logits: scoring reads "
                            "kmer_logits (the 6-mer log-probabilities at every position)")

    def scored(self, prompt: Sequence[int], continuation: Sequence[int], top_k: int = 2) -> list[ScoredToken]:
        """The server's prompt logprobs of prompt + continuation, at the continuation's positions (vLLM
        returns each position's own token beside its top ``top_k``)."""
        self._refuse_generation()
        ids = [*map(int, prompt), *map(int, continuation)]

        async def go() -> list:
            from harness.serving.scoring_prefix import PREFIX_REQUESTS, prefix_rows, refused_or_null

            async with client_session(self.endpoint) as http:
                try:
                    rows, refusal = await fetch_prompt_logprobs(http, self.endpoint, ids, top_k), None
                except ServingError as exc:
                    rows, refusal = None, exc
                if refusal is not None and not refused_or_null(refusal, None, 0):
                    raise refusal  # not a refusal of prompt logprobs: the server's failure to report
                if refusal is None and not refused_or_null(None, rows, len(prompt)):
                    return rows
                self.info.extra["teacher_forced_rows"] = PREFIX_REQUESTS  # every position judged, from its prefix
                return [None] * len(prompt) + await prefix_rows(http, self.endpoint, ids, range(len(prompt), len(ids)),
                                                                top_k)

        rows = run_async(go())
        if len(rows) < len(ids) or not any(rows[len(prompt):]):
            raise ServingError(f"{self.endpoint.url} returned prompt logprobs for {sum(r is not None for r in rows)} of "
                               f"{len(ids)} positions ({len(rows)} rows): the server computes no prompt logprobs, "
                               "which the output contract's teacher-forced rows need (a vLLM with prompt_logprobs)")
        out = []
        for position in range(len(prompt), len(ids)):
            row = rows[position] or {}
            token = ids[position]
            if token not in row or len(row) < top_k:
                raise ServingError(f"{self.endpoint.url} returned {len(row)} prompt logprobs at position {position}, "
                                   f"without the token there or fewer than the top {top_k}")
            top = tuple(sorted(row.items(), key=lambda kv: -kv[1])[:top_k])
            out.append(ScoredToken(token, row[token], top))
        return out

    def score(self, prompt: Sequence[int], continuation: Sequence[int], top_k: int, probe_ids: Sequence[int] = (),
              fns: bool = False) -> tuple[list[ScoredToken], list[list[float]] | None]:
        """Teacher-forced rows from the server's prompt logprobs (its top ``top_k``): no probe ids (a server
        reports only its top-N), and no FNS marginals (the top-N of a prefill may leave 6-mers out: this
        side's marginals come from its decode path, ``decode_path``)."""
        return self.scored(prompt, continuation, top_k), None

    def decode_path(self, prompt: Sequence[int], max_new_tokens: int, top_k: int,
                    fns: bool = False) -> tuple[list[int], list[ScoredToken], list[list[float]] | None]:
        """The decode path (``decoded``) and, ``fns``, its FNS marginals where the server can name ids
        (``decoded_fns``: vLLM >= 0.32), else none."""
        greedy, rows = self.decoded(prompt, max_new_tokens, top_k)
        marginals = None
        if fns:
            try:
                marginals = self.decoded_fns(prompt, greedy)
            except IdsNotHonoured:
                marginals = None  # an older server names no ids: the FNS rule reads none on this side
        return greedy, rows, marginals

    def generate_padded(self, prompt: Sequence[int], max_new_tokens: int, pad: int, pad_id: int) -> list[int]:
        """A server never pads (``beside_longer``): the row is decoded beside one ``pad`` tokens longer,
        as a static batch would have padded it to."""
        longer = [*prompt, *prompt[-pad:]] if pad else list(prompt)
        return self.beside_longer(prompt, max_new_tokens, longer, 1)[0]

    def decoded(self, prompt: Sequence[int], max_new_tokens: int, top_k: int = 2) -> tuple[list[int], list[ScoredToken]]:
        """The decode path: one greedy completion and, for each token it generated, the log-probability and
        top ``top_k`` the server computed at that decode step (completion ``logprobs``), never a prefill of
        the same tokens (``scored``), which would leave a decode-only defect unseen."""
        self._refuse_generation()
        self.shape.validate_request(len(prompt), max_new_tokens, 1)
        out = self._complete([int(t) for t in prompt], max_new_tokens, top_k)
        if len(out.token_ids) != max_new_tokens:
            raise ServingError(f"{self.endpoint.url} generated {len(out.token_ids)} tokens with ignore_eos, asked for "
                               f"{max_new_tokens} (finish_reason {out.finish_reason!r})")
        return list(out.token_ids), rows_of(out, top_k)

    def decoded_fns(self, prompt: Sequence[int], greedy: Sequence[int]) -> list[list[float]]:
        """The 24 FNS log-marginals (j-major, A C G T) at the generated positions of ``prompt``'s decode path
        (``greedy``: its tokens, from ``decoded``), from every 6-mer's exact log-probability there
        (``harness.serving.generated.kmer_decode_logprobs``: as many positions as its requests all decoded
        ``greedy``); a softmax over the 6-mers never sees the constant by which log-probabilities differ
        from logits."""
        from harness.carbon.fns import kmer_marginals
        from harness.core.vocab import DnaLayout

        async def go() -> np.ndarray:
            async with client_session(self.endpoint) as http:
                return await kmer_decode_logprobs(http, self.endpoint, [int(t) for t in prompt], len(greedy),
                                                  DnaLayout().kmer_start_id, NUM_KMERS, greedy)

        table = run_async(go())
        return np.log(kmer_marginals(table)).reshape(len(table), -1).round(7).tolist()

    def _complete(self, prompt: list[int], max_new_tokens: int, top_k: int, **extra) -> Generated:
        async def go() -> Generated:
            async with client_session(self.endpoint) as http:
                return await generate_with_logprobs(http, self.endpoint, prompt, max_new_tokens, top_k, **extra)

        return run_async(go())

    def generate_until_eos(self, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int) -> list[int]:
        """Greedy tokens through the server's own stopping rule, EOS not ignored: a client names its EOS
        for one request as ``stop_token_ids`` (the server's tokenizer EOS is fixed at its start), and the
        server must stop at it, the EOS included."""
        self._refuse_generation()
        out = self._complete([int(t) for t in prompt], max_new_tokens, 1, ignore_eos=False,
                             stop_token_ids=[int(eos_token_id)])
        return list(out.token_ids)

    def beside_longer(self, prompt: Sequence[int], max_new_tokens: int, longer: Sequence[int],
                      top_k: int = 2) -> tuple[list[int], list[ScoredToken]]:
        """What padding is on a server: none is ever sent (a pad id would be a real token of the context);
        the rows of a batch go as concurrent requests, and the scheduler runs a shorter row in the same
        steps as a longer one (its own positions and KV slots beside the other's), where a static batch
        would right-pad it. So ``prompt``'s decode path sent at once with ``longer`` (whose own output is
        dropped): it must be what ``prompt`` gives alone."""
        self._refuse_generation()

        async def go() -> list[Generated]:
            async with client_session(self.endpoint) as http:
                return list(await asyncio.gather(*(generate_with_logprobs(http, self.endpoint, [int(t) for t in ids],
                                                                          max_new_tokens, top_k)
                                                   for ids in (prompt, longer))))

        batched = run_async(go())[0]
        return list(batched.token_ids), rows_of(batched, top_k)

    def kmer_logits(self, batch: Batch) -> torch.Tensor:
        """The 6-mer log-probabilities ``[B, T, 4096]`` at every position of the prompts: the 6-mer logits
        less one constant per position, which the FNS marginals never see, so every score equals the one
        from the logits (``harness.serving.scoring``). The rows go as concurrent requests (one per row:
        the batch is the concurrency); positions past a row's length are NaN, since nothing scored them."""
        self.check_batch(batch)
        lengths = batch.prompt_lengths.tolist()
        rows = [batch.input_ids[i, :n].tolist() for i, n in enumerate(lengths)]

        async def go() -> list:
            async with client_session(self.endpoint) as http:
                return list(await asyncio.gather(*(kmer_logprobs(http, self.scoring, r) for r in rows)))

        out = torch.full((batch.size, batch.input_ids.shape[1], NUM_KMERS), float("nan"))
        for i, block in enumerate(run_async(go())):
            out[i, : lengths[i]] = torch.from_numpy(block).float()
        return out


def rows_of(out: Generated, top_k: int) -> list[ScoredToken]:
    """A completion's decode-path rows, as every stack's contract rows: each token, its log-probability and
    the top ``top_k``."""
    return [ScoredToken(t, lp, top[:top_k]) for t, lp, top in zip(out.token_ids, out.logprobs, out.top)]

