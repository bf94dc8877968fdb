"""A fast path for the Qwen3 byte-level BPE, id-exact to ``tokenizers``.

Why: ``tokenizers`` spends most of its time on Qwen3 text in its Oniguruma pre-tokenizer regex
(~0.9 s per MB here), so a hybrid tokenizer that only vectorises DNA stays within ~2x of the
published code on mixed prompts. On characters whose Unicode classes every engine agrees on
(ASCII, Latin-1, General Punctuation: see ``SAFE_CHARS``) the pre-tokenizer pattern can be spelled
with explicit classes for Python's ``re`` (about 10x faster) and NFC is the identity; this module
splits with it, byte-maps each piece, and looks its ids up in a per-word cache, so only words never
seen before go through the BPE model. Lines with any other character go through ``tokenizers``
whole: Unicode tables of regex engines differ by version, and an id-exact harness must not depend
on that. ``FastQwen3Bpe.supported`` is false for a tokenizer whose pipeline is not exactly
Qwen3's; then every call goes through ``tokenizers``.
"""

from __future__ import annotations

import json
import re
from itertools import chain, groupby
from typing import Any

# Qwen3's pre-tokenizer pattern (tokenizer.json).
QWEN3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
# The characters the fast path takes: ASCII, Latin-1 (U+0080-U+00FF) and the punctuation of
# General Punctuation (U+2010-U+2027, U+2030-U+205E: dashes, curly quotes, ellipsis, primes).
# Their classes have not changed since Unicode 1.1, none has a canonical singleton decomposition
# or a combining class, so NFC leaves any string of them unchanged and every engine agrees on
# \p{L}, \p{N} and \s for them. Spelled out for Python's ``re``:
_L = "A-Za-z\xaa\xb5\xba\xc0-\xd6\xd8-\xf6\xf8-\xff"
_N = "0-9\xb2\xb3\xb9\xbc-\xbe"
_S = "\t\n\x0b\x0c\r \x85\xa0"
SAFE_CHARS = "\x00-\xff\u2010-\u2027\u2030-\u205e"
QWEN3_SPLIT_SAFE = (rf"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n{_L}{_N}]?[{_L}]+|[{_N}]| ?[^{_S}{_L}{_N}]+[\r\n]*|"
                    rf"[{_S}]*[\r\n]+|[{_S}]+(?![^{_S}])|[{_S}]+")
_UNSAFE = re.compile(f"[^{SAFE_CHARS}]")
# Points after a line break that precede a printable ASCII character (a non-space in every engine).
_LINE_CUT = re.compile(r"(?<=\n)(?=[!-~])")


def _safe(text: str) -> bool:
    return text.isascii() or _UNSAFE.search(text) is None


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


class FastQwen3Bpe:
    """Ids of text under a ``tokenizers.Tokenizer`` whose pipeline is Qwen3's (NFC, its Split
    regex, ByteLevel without its own regex, BPE); ``supported`` says whether the tokenizer is one."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self.supported, self._pattern, added = _qwen3_pipeline(tokenizer)
        self._added_ids = {content: i for content, i in added}
        # Added tokens match leftmost-longest in tokenizers: an alternation with the longest
        # first matches the same way (all of Qwen3's are plain, non-normalised, no strip flags).
        alternation = "|".join(re.escape(c) for c, _ in sorted(added, key=lambda a: -len(a[0])))
        self._added_re = re.compile(alternation) if alternation else None
        self._added_first = {c[0] for c, _ in added if c}  # Qwen3's all start with "<"
        self._split = re.compile(QWEN3_SPLIT_SAFE, re.ASCII) if self.supported else None
        self._byte_map = {i: c for i, c in bytes_to_unicode().items()}
        self._cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` with no special tokens added; id-exact to ``tokenizer.encode``.

        Text with non-ASCII characters is cut into lines where a line break is followed by a
        printable ASCII character: no pre-token, added token or NFC composition spans such a
        point (no alternative of the pattern matches a line break followed by a non-space, and
        a line break composes with nothing), so each run of ASCII lines takes the fast path and
        each run of other lines goes through ``tokenizers`` whole.
        """
        if not self.supported:
            return self._tok.encode(text, add_special_tokens=False).ids
        if not _safe(text):
            out: list[int] = []
            for safe_run, lines in groupby(_LINE_CUT.split(text), key=_safe):
                piece = "".join(lines)
                ids = self._encode_safe(piece) if safe_run else self._tok.encode(piece, add_special_tokens=False).ids
                out.extend(ids)
            return out
        return self._encode_safe(text)

    def _encode_safe(self, text: str) -> list[int]:
        if self._added_re is None or not any(c in text for c in self._added_first):
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

    def _words(self, text: str) -> list[int]:
        words = self._split.findall(text)
        cache = self._cache
        pieces = list(map(cache.get, words))
        if None in pieces:
            missing = list(dict.fromkeys(w for w, p in zip(words, pieces) if p is None))
            if len(cache) + len(missing) > CACHE_WORDS:
                cache.clear()
            mapped = [w.encode("utf-8").decode("latin-1").translate(self._byte_map) for w in missing]
            model = self._tok.model
            for w, m in zip(missing, mapped):
                cache[w] = tuple(t.id for t in model.tokenize(m))
            pieces = [cache[w] for w in words]
        return list(chain.from_iterable(pieces))


def _state(component: Any) -> Any:
    """A tokenizers component's own JSON (its pickle state), without serialising the vocabulary."""
    return None if component is None else json.loads(component.__getstate__())


def _qwen3_pipeline(tokenizer: Any) -> tuple[bool, str, list[tuple[str, int]]]:
    """Whether the tokenizer's pipeline is exactly Qwen3's (the one this fast path reproduces), its
    split pattern, and its added tokens (content, id)."""
    tokens = tokenizer.get_added_tokens_decoder()
    added = [(t.content, i) for i, t in sorted(tokens.items())]
    # Plain added tokens without line breaks: then none spans a line cut (see ``encode``).
    plain = all(not (t.single_word or t.lstrip or t.rstrip or t.normalized) and "\n" not in t.content
                for t in tokens.values())
    norm, pre, model = _state(tokenizer.normalizer), _state(tokenizer.pre_tokenizer) or {}, tokenizer.model
    steps = pre.get("pretokenizers") or []
    ok = (plain and norm in (None, {"type": "NFC"}) and tokenizer.truncation is None and tokenizer.padding is None
          and pre.get("type") == "Sequence" and len(steps) == 2
          and steps[0].get("type") == "Split" and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert")
          and (steps[0].get("pattern") or {}).get("Regex") == QWEN3_SPLIT
          and steps[1] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
          and type(model).__name__ == "BPE" and not model.dropout and not model.continuing_subword_prefix
          and not model.end_of_word_suffix and not model.byte_fallback)
    return ok, (steps[0]["pattern"]["Regex"] if ok else ""), added
