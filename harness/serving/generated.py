"""A served model's decode path as the output contract reads it: one greedy completion with the
log-probability and top-k of every token it generated (the completions API's ``logprobs``), so that what
the server computed while decoding, step by step on its KV cache, is scored, not a prefill of the same
tokens (``prompt_logprobs``, ``harness.serving.client.fetch_prompt_logprobs``) that never ran a decode step.

Ids come back as ids: ``return_tokens_as_token_ids`` makes vLLM name each token (and each top-k entry)
``token_id:N`` instead of its text (the DNA-block tokens' texts are not unique in the server's
tokenizer, ``harness.serving.server``), and ``return_token_ids`` gives the generated ids themselves.

EOS: a benchmark request ignores it (``harness.serving.client.completion_body``); here the caller says
whether it does, and ``logit_bias`` / ``min_tokens`` let a check put the EOS where it must stop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.serving.client import Endpoint, ServingError, completion_body

TOKEN_ID_PREFIX = "token_id:"


@dataclass(frozen=True)
class Generated:
    """One completion: its token ids, each one's log-probability and every (id, log-probability) the
    server returned there (its top-k, or the ids asked for, descending), and why it stopped
    (``"length"``: max_tokens; ``"stop"``: an EOS or stop token)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]
    finish_reason: str | None


def token_id(name: str) -> int:
    """The id of a ``token_id:N`` name (``return_tokens_as_token_ids``)."""
    if not name.startswith(TOKEN_ID_PREFIX):
        raise ServingError(f"the server named a token {name!r}, not {TOKEN_ID_PREFIX}N: it ignores "
                           "return_tokens_as_token_ids (vLLM >= 0.6)")
    return int(name[len(TOKEN_ID_PREFIX):])


def parse_choice(choice: Mapping[str, Any], top_k: int, where: str) -> Generated:
    """A completions choice with ``logprobs`` as ``Generated``; refused (named) when the ids and the
    log-probabilities disagree or a position lacks its top ``top_k``."""
    ids = [int(t) for t in choice.get("token_ids") or []]
    lp = choice.get("logprobs") or {}
    names, values, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    if not (len(ids) == len(names) == len(values) == len(tops)):
        raise ServingError(f"{where}: {len(ids)} token ids but {len(names)} logprob tokens, {len(values)} logprobs and "
                           f"{len(tops)} top-logprob rows: the server must return token_ids and logprobs together")
    top_rows = []
    for i, (tid, name, value, row) in enumerate(zip(ids, names, values, tops)):
        if token_id(name) != tid or value is None or not isinstance(row, Mapping) or not row:
            raise ServingError(f"{where}: generated position {i} (token {tid}) came back without its log-probability "
                               f"or top-{top_k} ({name!r}, {value!r}, {row!r})")
        ranked = sorted(((token_id(k), float(v)) for k, v in row.items()), key=lambda kv: -kv[1])
        if len(ranked) < top_k:
            raise ServingError(f"{where}: generated position {i} has {len(ranked)} top logprobs, asked for {top_k}")
        top_rows.append(tuple(ranked))
    return Generated(tuple(ids), tuple(float(v) for v in values), tuple(top_rows), choice.get("finish_reason"))


async def generate_with_logprobs(http: Any, endpoint: Endpoint, prompt_ids: Sequence[int], max_tokens: int,
                                 top_k: int, ignore_eos: bool = True, **extra: Any) -> Generated:
    """One greedy completion of ``prompt_ids``, with its decode path's log-probabilities. ``ignore_eos``:
    run all ``max_tokens`` (a fixed length, as the benchmarks); False: stop at the EOS as a deployment
    does (``extra``: ``logit_bias``, ``min_tokens``...). The server needs ``--max-logprobs`` >= top_k."""
    url = f"{endpoint.url}/v1/completions"
    body = completion_body(endpoint.model or "", prompt_ids, max_tokens, stream=False, logprobs=top_k,
                           return_tokens_as_token_ids=True)
    if not ignore_eos:
        body.update(ignore_eos=False, min_tokens=0)
    body.update(extra)
    async with http.post(url, json=body) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise ServingError(f"a completion with logprobs={top_k} was refused by {url} (HTTP {resp.status}): "
                               f"{text[:300]}")
    try:
        choice = json.loads(text)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ServingError(f"{url} answered a completion with no choice ({exc}): {text[:200]}") from None
    return parse_choice(choice, top_k, url)


LOGPROB_TOKEN_IDS_MAX = 128  # vLLM's MAX_LOGPROB_TOKEN_IDS: the ids one request may name (vLLM >= 0.32)


class IdsNotHonoured(ServingError):
    """The server refused or ignored ``logprob_token_ids`` (vLLM before 0.32): it cannot name ids."""


async def kmer_decode_logprobs(http: Any, endpoint: Endpoint, prompt_ids: Sequence[int], max_tokens: int,
                               kmer_start: int, kmers: int, greedy: Sequence[int]) -> np.ndarray:
    """The log-probabilities ``[n, kmers]`` of every 6-mer at the first ``n`` generated positions of the
    decode path, exact: the same greedy completion asked ``kmers / 128`` times at once, each naming 128 of
    the 6-mer ids (``logprob_token_ids``, vLLM >= 0.32; a top-k would leave 6-mers out wherever another
    token outranks one). ``n``: up to the first position where a request decoded other than ``greedy``
    (a batch of 32 may break a near-tie another way than one request alone: past it, a row would be of
    another sequence). ``IdsNotHonoured`` where the server will not name ids."""
    chunks = [list(range(kmer_start + i, kmer_start + min(i + LOGPROB_TOKEN_IDS_MAX, kmers)))
              for i in range(0, kmers, LOGPROB_TOKEN_IDS_MAX)]
    try:
        outs = await asyncio.gather(*(generate_with_logprobs(http, endpoint, prompt_ids, max_tokens, 1,
                                                             logprob_token_ids=ids) for ids in chunks))
    except ServingError as exc:
        if "HTTP 4" in str(exc):
            raise IdsNotHonoured(f"{endpoint.url} refused logprob_token_ids: {exc}") from None
        raise
    n = min(next((j for j, (a, b) in enumerate(zip(out.token_ids, greedy)) if a != b), len(greedy)) for out in outs)
    table = np.full((n, kmers), np.nan)
    for ids, out in zip(chunks, outs):
        for j, row in enumerate(out.top[:n]):
            values = dict(row)
            missing = [i for i in ids if i not in values]
            if missing:
                raise IdsNotHonoured(f"{endpoint.url} left the asked-for id {missing[0]} out of generated position "
                                     f"{j}: the server must honour logprob_token_ids (vLLM >= 0.32)")
            table[j, ids[0] - kmer_start: ids[-1] - kmer_start + 1] = [values[i] for i in ids]
    return table
