"""The DNA side of Carbon's tokenizer as whole-array operations: the published region scan over
``<dna>`` / ``</dna>``, and DNA content to 6-mer ids (strip, case policy, ``<oov>`` for non-ACGT
blocks, A-padding of a trailing partial block) without a Python step per 6-mer."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from harness.core.vocab import BASES, CASE_POLICIES, DNA_BEGIN, DNA_END, DnaLayout, K, TokenizerError

_KMER_INDEX = {"".join(p): i for i, p in enumerate(itertools.product(BASES, repeat=K))}
# Below this many characters of DNA content a dict lookup per 6-mer beats numpy's per-call overhead.
SHORT_DNA_CHARS = 48


def split_regions(text: str) -> list[tuple[str, str]]:
    """Split text into ("text", s) and ("dna", s) regions with the published scan rules.

    Text before a stray ``</dna>`` belongs to the DNA region it closes: that is what the
    published code does, and an id-for-id harness must reproduce it.
    """
    regions: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        s = text.find(DNA_BEGIN, i)
        e = text.find(DNA_END, i)
        if s < 0 and e < 0:
            regions.append(("text", text[i:]))
            break
        if s < 0 or (e >= 0 and e < s):
            regions.append(("dna", text[i:e + len(DNA_END)]))
            i = e + len(DNA_END)
            continue
        if s > i:
            regions.append(("text", text[i:s]))
        if e < 0:
            regions.append(("dna", text[s:]))
            break
        regions.append(("dna", text[s:e + len(DNA_END)]))
        i = e + len(DNA_END)
    return regions


def _pair_table(case_policy: str) -> np.ndarray:
    """Two ASCII bytes (read as one little-endian uint16) -> their two base codes ``c0*4 + c1``, or
    16 when either byte is outside ACGT (lowercase acgt count as bases under "upper")."""
    table = np.full(1 << 16, 16, dtype=np.uint16)
    letters = [(b, i) for i, b in enumerate(BASES)]
    if case_policy == "upper":
        letters += [(b.lower(), i) for i, b in enumerate(BASES)]
    for x, cx in letters:
        for y, cy in letters:
            table[ord(x) | (ord(y) << 8)] = cx * 4 + cy
    return table


_PAIR = {policy: _pair_table(policy) for policy in CASE_POLICIES}
# A 6-mer is three pairs p0, p1, p2 in 0..16; its key p0*289 + p1*17 + p2 (0..4912) names it, and
# any 16 makes it <oov>. KEY_INDEX maps a key to the 6-mer's index in product order, or -1.
_KEY_SPACE = 17**3
KEY_INDEX = np.full(_KEY_SPACE, -1, dtype=np.int16)
for _p in itertools.product(range(16), repeat=3):
    KEY_INDEX[_p[0] * 289 + _p[1] * 17 + _p[2]] = _p[0] * 256 + _p[1] * 16 + _p[2]


def _dna_bytes(content: str, case_policy: str) -> bytes:
    """Stripped content as one byte per character: ASCII as is; a non-ASCII string goes through
    ``str.upper`` first under "upper" (``ß`` -> ``SS`` shifts the frame, as published) and every
    character still outside ASCII becomes 0xFF, which is no base."""
    content = content.strip()
    if content.isascii():
        return content.encode("ascii")
    if case_policy == "upper":
        content = content.upper()
    cp = np.frombuffer(content.encode("utf-32-le"), dtype="<u4")
    return np.where(cp < 128, cp, 255).astype(np.uint8).tobytes()


def dna_keys(content: str, case_policy: str = "upper") -> tuple[np.ndarray, int]:
    """The key (see ``KEY_INDEX``) of every 6-mer of stripped, case-normalised content, and how
    many real bases the last block holds (6 when the length is a multiple of 6).

    Whole-array work only: the bytes, right-padded with ``A`` to a multiple of 6, are read as
    little-endian uint16 pairs, one table lookup gives each pair's two base codes, and three pairs
    make a key. No Python step per 6-mer.
    """
    raw = _dna_bytes(content, case_policy)
    pad = (-len(raw)) % K
    if pad:
        raw += b"A" * pad
    pairs = _PAIR[case_policy].take(np.frombuffer(raw, dtype="<u2")).reshape(-1, 3)
    keys = pairs[:, 0] * 289 + pairs[:, 1] * 17 + pairs[:, 2]
    return keys, K - pad


@dataclass(frozen=True)
class DnaBlocks:
    """The 6-mers of one DNA region's content: index in product order (-1 for ``<oov>``) and how many
    real bases the last block holds (``k`` when the content length is a multiple of ``k``)."""

    index: np.ndarray
    last_valid_length: int


def dna_blocks(content: str, k: int = K, case_policy: str = "upper") -> DnaBlocks:
    """Non-overlapping 6-mers of stripped, case-normalised content, ``A``-padded, vectorised."""
    if k != K:
        raise TokenizerError(f"k={k} is not supported; the Carbon tokenizer has k={K}")
    keys, last = dna_keys(content, case_policy)
    return DnaBlocks(KEY_INDEX.take(keys).astype(np.int64), last)


def normalise_dna(content: str, case_policy: str = "upper") -> str:
    """Strip surrounding whitespace and apply the case policy (``str.upper`` has Unicode
    semantics: ``ß`` becomes ``SS``, which shifts the 6-mer frame exactly as the published code)."""
    content = content.strip()
    return content.upper() if case_policy == "upper" else content


def dna_ids_loop(content: str, layout: DnaLayout = DnaLayout(), case_policy: str = "upper") -> list[int]:
    """6-mer ids of a DNA region's content by the straightforward per-6-mer loop: an independent
    oracle for the property tests against the tokenizer's vectorised ``dna_blocks`` (the speed
    baseline is ``harness.carbon.tokenizer_reference``)."""
    table = {tok: layout.kmer_start_id + i for i, tok in
             enumerate("".join(p) for p in itertools.product(BASES, repeat=layout.k))}
    content = normalise_dna(content, case_policy)
    out = []
    for j in range(0, len(content), layout.k):
        block = content[j:j + layout.k]
        block = block + "A" * (layout.k - len(block))
        out.append(table.get(block, layout.oov_id))
    return out
