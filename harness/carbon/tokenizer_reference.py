"""The published HybridDNATokenizer's encode algorithm, step for step: the speed baseline and an
independent oracle.

Why: speedups are claimed against the published code, which cannot be loaded offline (its
``__init__`` downloads Qwen3). This restates its encode path with the same work per step: a
Python scan for the tags, ``str.strip`` and ``str.upper`` of each DNA region, then per 6-mer a
slice, a per-character membership test and a dict lookup, and one call of a transformers fast
tokenizer's ``encode`` per text segment (the published class holds ``AutoTokenizer``'s Qwen3
tokenizer). It shares no code with ``CarbonTokenizer.encode``, so the property tests can use it as
an oracle for ids and token masks.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from harness.carbon.qwen3 import builtin_tokenizer_dir
from harness.core.vocab import PAD_TOKEN_ID, QWEN3_VOCAB_SIZE, TokenizerError


def load_remote_tokenizer(path: str | Path) -> Any:
    """The checkpoint's own published tokenizer, through its remote code.

    Opt-in only: the published ``__init__`` downloads Qwen3 from the Hub, so this works only on a
    machine with network access (or a warm HF cache); the harness never calls it by default.
    """
    from transformers import AutoTokenizer

    root = Path(path)
    if not (root / "tokenizer_config.json").is_file():
        raise TokenizerError(f"{root} has no tokenizer_config.json: pass a real Carbon checkpoint directory")
    tok = AutoTokenizer.from_pretrained(str(root), trust_remote_code=True, padding_side="right")
    tok.pad_token_id = PAD_TOKEN_ID
    return tok


def detect_case_policy(encode: Any) -> str:
    """Which case behaviour an encode function has: ``"upper"`` when lowercase DNA maps to the
    same 6-mers as uppercase, ``"oov"`` when it maps to ``<oov>`` (as the model card says)."""
    lower = list(encode("<dna>acgtac</dna>"))
    upper = list(encode("<dna>ACGTAC</dna>"))
    if lower == upper:
        return "upper"
    if len(lower) == 3 and lower[1] == QWEN3_VOCAB_SIZE + 2:
        return "oov"
    raise TokenizerError(f"unrecognised case behaviour: lowercase gave {lower}, uppercase gave {upper}")


BEGIN, END = "<dna>", "</dna>"


class PublishedReference:
    """``encode`` of the published class, for one Qwen3 tokenizer file and ``k``."""

    def __init__(self, tokenizer_file: str | Path | None = None, k: int = 6) -> None:
        from transformers import PreTrainedTokenizerFast

        if tokenizer_file is None:
            tokenizer_file = builtin_tokenizer_dir() / "tokenizer.json"
        self.base = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
        self.k = k
        start = len(self.base.get_vocab())  # the DNA block starts right after the Qwen3 vocabulary
        tokens = [BEGIN, END, "<oov>"] + ["".join(p) for p in itertools.product("ATCG", repeat=k)]
        self.token_to_id = {t: start + i for i, t in enumerate(tokens)}
        self.begin_id, self.end_id, self.oov_id = start, start + 1, start + 2
        self.bases = set("ATCG")

    def _segments(self, text: str) -> list[tuple[str, bool]]:
        """(segment, is_dna) by the published scan: text before a stray ``</dna>`` is DNA."""
        out, i = [], 0
        while i < len(text):
            s, e = text.find(BEGIN, i), text.find(END, i)
            if s == -1 and e == -1:
                out.append((text[i:], False))
                break
            if s != -1 and (e == -1 or s < e):
                if i < s:
                    out.append((text[i:s], False))
                if e == -1:
                    out.append((text[s:], True))
                    break
                out.append((text[s:e + len(END)], True))
            else:
                out.append((text[i:e + len(END)], True))
            i = e + len(END)
        return out

    def _kmers(self, seq: str) -> tuple[list[str], int]:
        """6-mer strings (``<oov>`` for invalid ones) and the real bases of a padded last block."""
        k, bases, tokens = self.k, self.bases, []

        def valid(kmer: str) -> bool:  # one call per 6-mer, as published
            return len(kmer) == k and all(b in bases for b in kmer)

        whole = len(seq) - len(seq) % k
        for i in range(0, whole, k):
            kmer = seq[i:i + k]
            tokens.append(kmer if valid(kmer) else "<oov>")
        tail = seq[whole:]
        if tail:
            padded = tail + "A" * (k - len(tail))
            tokens.append(padded if valid(padded) else "<oov>")
        return tokens, len(tail)

    def encode(self, text: str, return_token_mask: bool = False, auto_dna_tags: bool = False) -> Any:
        if auto_dna_tags and BEGIN not in text:
            text = BEGIN + text + END
        ids: list[int] = []
        mask: list[int] = []
        for segment, is_dna in self._segments(text):
            if not is_dna:
                bpe = self.base.encode(segment, add_special_tokens=False)
                ids += bpe
                if return_token_mask:
                    mask += [-1] * len(bpe)
                continue
            head = segment.startswith(BEGIN)
            tail = segment.endswith(END) and segment != BEGIN
            if head:
                ids.append(self.begin_id)
                mask.append(0)
            if segment not in (BEGIN, END):
                content = segment[len(BEGIN):] if head else segment
                if tail and content.endswith(END):
                    content = content[:-len(END)]
                kmers, partial = self._kmers(content.strip().upper())
                for n, kmer in enumerate(kmers):
                    ids.append(self.token_to_id.get(kmer, self.oov_id))
                    if return_token_mask:
                        last_partial = n == len(kmers) - 1 and partial
                        mask.append(0 if kmer == "<oov>" else (partial if last_partial else self.k))
            if tail:
                ids.append(self.end_id)
                mask.append(0)
        return (ids, mask) if return_token_mask else ids
