"""A fast path for the Qwen3 byte-level BPE on ASCII text, id-exact to ``tokenizers``.

Why: ``tokenizers`` spends most of its time on Qwen3 text in its Oniguruma pre-tokenizer
regex (~0.9 s per MB here), so a hybrid tokenizer that only vectorises DNA stays within ~2x of the
published code on mixed prompts. On ASCII text the same pre-tokenizer pattern has one meaning in
every regex engine (``\\p{L}`` is ``[A-Za-z]``, ``\\p{N}`` is ``[0-9]``, ``\\s`` is the six ASCII
White_Space characters; NFC is the identity), so this module splits with the ``regex`` package
(about 10x faster), byte-maps each piece, and looks its ids up in a per-word cache; only words
never seen before go through the BPE model itself, in one batched call. Text with any non-ASCII
character goes through ``tokenizers`` unchanged: Unicode tables of the regex engines differ by
version, and an id-exact harness must not depend on that.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from typing import Any

import regex

# Bound on cached words: 1 MB of English has ~30k distinct words; beyond the bound the cache
# starts over, so memory stays bounded on unbounded input.
CACHE_WORDS = 200_000


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which Qwen3's ByteLevel pre-tokenizer uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


class AsciiBpe:
    """Ids of text under a ``tokenizers.Tokenizer`` whose pipeline is Qwen3's (NFC, one Split
    regex, ByteLevel without its own regex, BPE); ``supported`` says whether the tokenizer is one."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self.supported, self._pattern, added = _qwen3_pipeline(tokenizer)
        self._added_ids = {content: i for content, i in added}
        # Added tokens match leftmost-longest in tokenizers: an alternation with the longest
        # first matches the same way (all of Qwen3's are plain, non-normalised, no strip flags).
        alternation = "|".join(regex.escape(c) for c, _ in sorted(added, key=lambda a: -len(a[0])))
        self._added_re = regex.compile(alternation) if alternation else None
        self._split = regex.compile(self._pattern) if self.supported else None
        self._byte_map = {i: c for i, c in bytes_to_unicode().items() if i < 128}
        self._cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` with no special tokens added; id-exact to ``tokenizer.encode``."""
        if not (self.supported and text.isascii()):
            return self._tok.encode(text, add_special_tokens=False).ids
        if self._added_re is None or "<" not in text:
            return self._words(text)
        out: list[int] = []
        pos = 0
        for m in self._added_re.finditer(text):
            if m.start() > pos:
                out.extend(self._words(text[pos:m.start()]))
            out.append(self._added_ids[m.group()])
            pos = m.end()
        if pos < len(text):
            out.extend(self._words(text[pos:]))
        return out

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def _words(self, text: str) -> list[int]:
        words = self._split.findall(text)
        cache = self._cache
        pieces = list(map(cache.get, words))
        if None in pieces:
            missing = list(dict.fromkeys(w for w, p in zip(words, pieces) if p is None))
            if len(cache) + len(missing) > CACHE_WORDS:
                cache.clear()
            mapped = [w.translate(self._byte_map) for w in missing]
            model = self._tok.model
            for w, m in zip(missing, mapped):
                cache[w] = tuple(t.id for t in model.tokenize(m))
            pieces = [cache[w] for w in words]
        return list(chain.from_iterable(pieces))


def _qwen3_pipeline(tokenizer: Any) -> tuple[bool, str, list[tuple[str, int]]]:
    """Whether the tokenizer's pipeline is the one this fast path reproduces, its split pattern,
    and its added tokens (content, id)."""
    cfg = json.loads(tokenizer.to_str())
    added = [(a["content"], a["id"]) for a in cfg.get("added_tokens") or []]
    plain = all(not (a["single_word"] or a["lstrip"] or a["rstrip"] or a["normalized"])
                for a in cfg.get("added_tokens") or [])
    norm, pre, model = cfg.get("normalizer"), cfg.get("pre_tokenizer"), cfg.get("model") or {}
    steps = (pre or {}).get("pretokenizers") or []
    ok = (plain and norm in (None, {"type": "NFC"}) and (pre or {}).get("type") == "Sequence" and len(steps) == 2
          and steps[0].get("type") == "Split" and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert")
          and "Regex" in (steps[0].get("pattern") or {})
          and steps[1] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
          and model.get("type") == "BPE" and not model.get("dropout") and not model.get("continuing_subword_prefix")
          and not model.get("end_of_word_suffix") and not model.get("byte_fallback"))
    return ok, (steps[0]["pattern"]["Regex"] if ok else ""), added
