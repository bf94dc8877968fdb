"""Teacher-forced rows from one-token requests on each prefix, where a server will not give prompt
log-probabilities: every position the output contract judges on other stacks is judged here too.

Why. The 2.32+ vLLM Neuron plugin refuses ``prompt_logprobs`` under on-device sampling (HTTP 400:
``vllm_neuron/vllm/admission.py`` in the public fork jinhuang12/vllm-neuron at 42ad3f12a81a, "the runner never
fills prompt logprobs"), and the NxDI-based plugin (0.2.0) answers them with null rows. A one-token completion
of ``ids[:p]`` with ``logprobs=k`` returns the top-k of the distribution over the token at ``p``, computed by a
prefill of that prefix: the same row a prompt-logprobs request returns at ``p``, one request per position
(a contract prompt's continuation is tens of positions; the requests run concurrently, ``CONCURRENT`` at once).

The token actually at ``p`` may fall outside that top-k (prompt logprobs always add it). Then the same request
is sent again naming it (``logprob_token_ids``, vLLM >= 0.32); a server that cannot name ids leaves that row
refused, never guessed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from harness.serving.client import Endpoint, ServingError
from harness.serving.generated import generate_with_logprobs

CONCURRENT = 8  # prefix requests in flight at once: a server's own batch, not a flood
PREFIX_REQUESTS = "one-token requests on each prefix"  # how the rows were scored, as the contract records it
PROMPT_LOGPROBS = "prompt logprobs"


def refused_or_null(exc: ServingError | None, rows: Sequence[Any] | None, first: int) -> bool:
    """Whether a prompt-logprobs answer calls for prefix requests: refused (HTTP 4xx) or rows that are null from
    ``first`` on (the NxDI-based plugin's answer). Any other failure is the server's to report."""
    if exc is not None:
        return "HTTP 4" in str(exc) or "returned no prompt_logprobs" in str(exc)
    return rows is None or not any(rows[first:])


async def prefix_row(http: Any, endpoint: Endpoint, ids: Sequence[int], position: int, top_k: int) -> dict[int, float]:
    """The log-probabilities at ``position`` of ``ids`` (its top ``top_k`` and the token there), from a one-token
    greedy completion of ``ids[:position]``."""
    prefix = [int(t) for t in ids[:position]]
    token = int(ids[position])
    out = await generate_with_logprobs(http, endpoint, prefix, 1, top_k)
    if len(out.token_ids) != 1:
        raise ServingError(f"{endpoint.url} answered the one-token request on the prefix of position {position} with "
                           f"{len(out.token_ids)} tokens: it computes neither prompt logprobs nor a token's logprobs, "
                           "which the output contract's teacher-forced rows need")
    row = dict(out.top[0])
    row.setdefault(out.token_ids[0], out.logprobs[0])
    if token not in row:
        try:
            named = await generate_with_logprobs(http, endpoint, prefix, 1, 1, logprob_token_ids=[token])
        except ServingError as exc:
            raise ServingError(f"{endpoint.url}: token {token} at position {position} is outside the top-{top_k} of "
                               f"its prefix request, and the server would not name it (logprob_token_ids, vLLM >= "
                               f"0.32): {exc}") from None
        values = dict(named.top[0])
        if token not in values:
            raise ServingError(f"{endpoint.url}: token {token} at position {position} is outside the top-{top_k} of "
                               "its prefix request, and the server left it out when named (logprob_token_ids)")
        row[token] = values[token]
    return row


async def prefix_rows(http: Any, endpoint: Endpoint, ids: Sequence[int], positions: Sequence[int],
                      top_k: int) -> list[dict[int, float]]:
    """``prefix_row`` at each of ``positions`` (each > 0: position 0 has no prefix), in order."""
    if any(p <= 0 or p >= len(ids) for p in positions):
        raise ValueError(f"positions {list(positions)}: each must be in 1..{len(ids) - 1} (a prefix and a token)")
    gate = asyncio.Semaphore(CONCURRENT)

    async def one(position: int) -> dict[int, float]:
        async with gate:
            return await prefix_row(http, endpoint, ids, position, top_k)

    return list(await asyncio.gather(*(one(p) for p in positions)))
