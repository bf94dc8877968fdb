"""The output contract one side of a release check writes, whatever its stack (the format:
``harness.analysis.contract``): for each DNA prompt of the suite, its own tokenization and greedy
tokens, and the log-probabilities (top ``TOP_K``, the probe ids, FNS marginals) of three sequences:

- ``scored``: given a reference (the fp32 transformers run of the same checkpoint), the reference's
  prompt ids and greedy tokens, which every side scores alike from the prompt's third token
  (``SCORED_FROM``): the prompt's own teacher-forced log-probabilities are part of the contract;
- ``own``: this side's prompt and its own greedy tokens (where two stacks diverge, both were conditioned on
  the same prefix, so the reference's margin there on this sequence says how close to a tie it was);
- ``cut``: the prompt less its last ``PAD_CUT`` tokens and the greedy tokens from it, beside the same cut
  prompt right-padded with ``PAD_CUT`` pad ids (a padded row must generate what it does unpadded, and
  score those tokens as the unpadded row does, position by position).

On a shape of batch size 2 or more, ``batched``: the ``cut`` prompt and the whole prompt in one batch (mixed
lengths, the shorter right-padded as the stack's static batch pads it), each row scoring its own unpadded
greedy tokens: each is held to that prompt's single run (the ``cut`` and ``own`` rows) position by position.
On a shape with ``long_prompt``, one more prompt, ``LONG_PROMPT``: text then DNA, filling the context, decoded
to the last position of the sequence (its ``own`` sequence alone: the far positions where a KV cache bucket, a
rotary table or a decode position runs out).

Then EOS: the prompt once more through the stack's own stopping rule, with the first greedy token that
does not repeat an earlier one (from ``EOS_FROM`` on, else the last such from 1 on: carbon-tiny-trained's
greedy tokens cycle with period 3, a tandem repeat) as EOS: a stack that honours EOS stops there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.backends.base import Batch, Engine
from harness.carbon.dna import prompt_suite
from harness.carbon.tokenizer import CarbonTokenizer
from harness.core.contract_format import CONTRACT_SCHEMA, SCORED_FROM, probe_ids
from harness.core.errors import BackendCannot
from harness.core.spec import RunShape

PROMPTS = 3  # the suite's first cases (balanced, AT-rich, GC-rich): three compositions, seconds per side
NEW_TOKENS = 16
TOP_K = 1000  # the largest finite tier (NxDI's logit validation: top-5 / 50 / 1000 / all)
PAD_CUT = 4
EOS_FROM = 4
LONG_PROMPT = "long_mixed"
LONG_TEXT = "Human promoter region upstream of a housekeeping gene, annotated for a regulatory variant scan: "


def contract_prompts(shape: RunShape) -> list[tuple[str, str]]:
    """(case name, prompt) of the contract, each ``shape.prompt_bp`` long so it fits the shape."""
    bp = shape.prompt_bp or shape.max_context_length * 6 - 6
    return [(case.name, case.prompt) for case in prompt_suite(bp)[:PROMPTS]]


def long_prompt_ids(tokenizer: CarbonTokenizer, shape: RunShape) -> list[int]:
    """``LONG_TEXT`` then ``<dna>`` and as many whole 6-mers of the suite's balanced sequence as fill the
    shape's context: the longest prompt the shape takes, text and DNA mixed."""
    from harness.carbon.dna import DNA_BEGIN

    dna = prompt_suite(6 * shape.max_context_length)[0].sequence
    fits = [k for k in range(len(dna) // 6, 0, -1)
            if len(tokenizer(LONG_TEXT + DNA_BEGIN + dna[:6 * k])["input_ids"]) <= shape.max_context_length]
    if not fits:
        raise ValueError(f"shape {shape.name!r}: max_context_length={shape.max_context_length} holds no 6-mer after "
                         f"the long prompt's {len(tokenizer(LONG_TEXT + DNA_BEGIN)['input_ids'])} text tokens")
    return list(tokenizer(LONG_TEXT + DNA_BEGIN + dna[:6 * fits[0]])["input_ids"])


def long_entry(engine: Engine, tokenizer: CarbonTokenizer, shape: RunShape, probes: Sequence[int]) -> dict[str, Any]:
    """The long prompt's entry: its greedy tokens to the end of the sequence and its ``own`` rows."""
    ids = long_prompt_ids(tokenizer, shape)
    greedy, own = own_sequence(engine, ids, min(shape.max_new_tokens, shape.seq_len - len(ids)), probes)
    return {"name": LONG_PROMPT, "prompt_ids": ids, "greedy": greedy, "sequences": {"own": own}}


def batched_entry(engine: Engine, prompts: Sequence[Sequence[int]], greedy: Sequence[Sequence[int]], pad_id: int,
                  probes: Sequence[int], own_path: str | None = None) -> dict[str, Any]:
    """The ``cut`` and the whole prompt in one batch (``Engine.score_batched``), each row's rows; where the
    engine cannot batch mixed lengths, why not (``rows_not_measured``). A server (its own rows are its decode
    steps, ``own_path == "decode"``) never pads: its batch is concurrent requests, so the whole prompt is
    decoded beside one ``PAD_CUT`` tokens longer (``beside_longer``) and its decode-step rows are held to its
    own, as far as its greedy tokens agree with them (``diverged_at``: the first that does not)."""
    out: dict[str, Any] = {"rows_of": ["cut", "own"]}
    try:
        engine.reset()
        if own_path == "decode" and hasattr(engine, "beside_longer"):
            ids, own = prompts[-1], greedy[-1]
            tokens, rows = engine.beside_longer(ids, len(own), [*ids, *ids[-PAD_CUT:]], TOP_K)
            k = next((j for j, (a, b) in enumerate(zip(tokens, own)) if a != b), len(own))
            out = {"rows_of": ["own"], "concurrent": True, "rows": [[r.to_list() for r in rows[:k]]]}
            if k < len(own):
                out["diverged_at"] = k
            return out
        rows = engine.score_batched(prompts, greedy, pad_id, TOP_K, probes)
        out["rows"] = [[r.to_list() for r in row] for row in rows]
    except BackendCannot as exc:
        out["rows_not_measured"] = str(exc)
    finally:
        engine.reset()
    return out


def contract_file(model: str, shape: str) -> str:
    """The file one (model, shape)'s contract is written to, in --carbon-contract-out DIR."""
    return f"contract-{model}-{shape}.json"


def new_tokens(shape: RunShape) -> int:
    return min(NEW_TOKENS, shape.max_new_tokens)


def greedy_of(engine: Engine, ids: Sequence[int], n: int, pad: int = 0, pad_id: int = 0) -> list[int]:
    """``n`` greedy tokens of one prompt, EOS ignored (``pad``: as a padded row, ``Engine.generate_padded``)."""
    if pad:
        return engine.generate_padded(ids, n, pad, pad_id)
    engine.reset()
    out = engine.generate(Batch.from_ids([list(ids)]), n).tokens[0].tolist()
    engine.reset()
    return out


def own_sequence(engine: Engine, ids: Sequence[int], n: int, probes: Sequence[int]) -> tuple[list[int], dict[str, Any]]:
    """This side's greedy tokens and its own sequence's rows: what its decode steps computed where the
    stack reports that (a server: ``Engine.decode_path``, marked ``"path": "decode"``), else teacher-forced."""
    decoded = engine.decode_path(ids, n, TOP_K, fns=True)
    if decoded is None:
        greedy = greedy_of(engine, ids, n)
        return greedy, sequence(engine, [*ids, *greedy], len(ids), probes)
    greedy, rows, marginals = decoded
    own: dict[str, Any] = {"tokens": [*ids, *greedy], "from": len(ids), "rows": [r.to_list() for r in rows],
                           "path": "decode"}
    if marginals is not None:
        own["fns"] = marginals
    return greedy, own


def sequence(engine: Engine, tokens: Sequence[int], start: int, probes: Sequence[int], fns: bool = False
             ) -> dict[str, Any]:
    """One sequence's rows: ``tokens[start:]`` scored teacher-forced after ``tokens[:start]``."""
    engine.reset()
    rows, marginals = engine.score(tokens[:start], tokens[start:], TOP_K, probes, fns=fns)
    engine.reset()
    out: dict[str, Any] = {"tokens": list(tokens), "from": start, "rows": [r.to_list() for r in rows]}
    if marginals is not None:
        out["fns"] = marginals
    return out


def padded_entry(engine: Engine, cut: Sequence[int], cut_greedy: Sequence[int], n: int, pad_id: int,
                 probes: Sequence[int]) -> dict[str, Any]:
    """The ``cut`` prompt as a padded row: its greedy tokens, and its rows scoring the unpadded greedy
    tokens, which the judge holds to the unpadded ``cut`` rows position by position; where the engine
    cannot pad (a server), why not (``rows_not_measured``)."""
    out: dict[str, Any] = {"pad": PAD_CUT, "greedy": greedy_of(engine, cut, n, PAD_CUT, pad_id)}
    try:
        engine.reset()
        rows = engine.score_padded(cut, cut_greedy, PAD_CUT, pad_id, TOP_K, probes)
        out["rows"] = [r.to_list() for r in rows]
    except BackendCannot as exc:
        out["rows_not_measured"] = str(exc)
    finally:
        engine.reset()
    return out


def eos_stop(greedy: Sequence[int]) -> int | None:
    """Where EOS is planted: the first greedy token at ``EOS_FROM`` or later that does not repeat an
    earlier one; where every one from there repeats (a trained model caught in a tandem repeat), the last
    first occurrence from 1 on; None where every token is the first one."""
    firsts = [j for j in range(1, len(greedy)) if greedy[j] not in greedy[:j]]
    return next((j for j in firsts if j >= EOS_FROM), firsts[-1] if firsts else None)


def eos_run(engine: Engine, ids: Sequence[int], greedy: Sequence[int]) -> dict[str, Any]:
    """The prompt through the stack's own stopping rule with ``greedy[stop]`` as EOS (its first
    occurrence: ``eos_stop``), or why it could not run."""
    stop = eos_stop(greedy)
    if stop is None:
        return {"skipped": "every greedy token repeats the first: no EOS id to stop at"}
    engine.reset()
    try:
        tokens = engine.generate_until_eos(ids, len(greedy), greedy[stop])
    except BackendCannot as exc:
        return {"skipped": str(exc)}
    finally:
        engine.reset()
    return {"eos_token_id": greedy[stop], "stop": stop, "tokens": list(tokens)}


def collect(engine: Engine, tokenizer: CarbonTokenizer, shape: RunShape, fingerprint: str,
            reference: Mapping[str, Any] | None = None, checkpoint: str | Path = "") -> dict[str, Any]:
    """The side's contract. ``reference``: the reference's own contract, whose ``scored`` sequences this
    side scores too; a side whose tokenizer gives other ids still writes its contract (the judge names
    the first id that differs)."""
    n = new_tokens(shape)
    probes = probe_ids()
    ref_prompts = {p["name"]: p for p in (reference or {}).get("prompts", [])}
    prompts = []
    for name, text in contract_prompts(shape):
        ids = list(tokenizer(text)["input_ids"])
        if reference is not None and name not in ref_prompts:
            raise ValueError(f"the reference contract has no prompt {name!r}: the two ran different prompt suites")
        greedy, own = own_sequence(engine, ids, n, probes)
        scored = ref_prompts[name]["sequences"]["scored"]["tokens"] if reference is not None else [*ids, *greedy]
        cut = ids[:-PAD_CUT]
        cut_greedy = greedy_of(engine, cut, n)
        prompts.append({
            "name": name, "prompt_ids": ids, "greedy": greedy,
            "sequences": {"scored": sequence(engine, scored, SCORED_FROM, probes, fns=True),
                          "own": own,
                          "cut": sequence(engine, [*cut, *cut_greedy], len(cut), probes)},
            "padded": padded_entry(engine, cut, cut_greedy, n, tokenizer.pad_token_id, probes),
            "eos": eos_run(engine, ids, greedy)})
        if shape.batch_size >= 2:
            prompts[-1]["batched"] = batched_entry(engine, [cut, ids], [cut_greedy, greedy], tokenizer.pad_token_id,
                                                   probes, own.get("path"))
    if shape.long_prompt:
        prompts.append(long_entry(engine, tokenizer, shape, probes))
    info = engine.info
    stack = None
    if info.backend == "hf":  # the judge tells a side that runs the very code of its yardstick
        import transformers

        stack = f"transformers {transformers.__version__}"
    return {"schema": CONTRACT_SCHEMA, "backend": info.backend, "dtype": info.dtype, "model": info.model,
            "stack": stack, "teacher_forced_rows": info.extra.get("teacher_forced_rows"),  # None: the engine's own
            "shape": shape.name, "checkpoint_fingerprint": fingerprint, "checkpoint": str(checkpoint),
            "new_tokens": n, "top_k": TOP_K, "probe_ids": probes, "reference": reference is None,
            "pad_token_id": tokenizer.pad_token_id, "prompts": prompts}
