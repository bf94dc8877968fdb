"""Carbon's vocabulary as numbers: the Qwen3 BPE block, the DNA block after it (specials, the 4,096
6-mers in ``itertools.product("ATCG")`` order, unused fillers), pad id 151643, and the layout a
checkpoint's ``dna_config.json`` must agree with. Everything that names a token id imports it here."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

QWEN3_VOCAB_SIZE = 151669  # BPE ids plus Qwen3's added tokens: the DNA block starts here.
PAD_TOKEN_ID = 151643  # <|endoftext|>: pad and eos of the tokenizer
PAD_TOKEN = "<|endoftext|>"
DNA_BEGIN = "<dna>"
DNA_END = "</dna>"
OOV = "<oov>"
BASES = "ATCG"  # itertools.product order of the published code: A=0, T=1, C=2, G=3
K = 6
NUM_KMERS = 4**K
NUM_UNUSED = 8
DNA_SPECIAL_TOKENS = (DNA_BEGIN, DNA_END, OOV)
DNA_VOCAB_SIZE = len(DNA_SPECIAL_TOKENS) + NUM_KMERS + NUM_UNUSED  # 4107
VOCAB_SIZE = QWEN3_VOCAB_SIZE + DNA_VOCAB_SIZE  # 155776, a multiple of 128
CASE_POLICIES = ("upper", "oov")


class TokenizerError(ValueError):
    """A tokenizer could not be built from the given files; the message names the file and value."""


@dataclass(frozen=True)
class DnaLayout:
    """Where the DNA block sits in the vocabulary (from ``dna_config.json`` or the defaults)."""

    k: int = K
    dna_start_id: int = QWEN3_VOCAB_SIZE
    dna_vocab_size: int = DNA_VOCAB_SIZE
    special_tokens: tuple[str, ...] = DNA_SPECIAL_TOKENS

    @property
    def begin_id(self) -> int:
        return self.dna_start_id

    @property
    def end_id(self) -> int:
        return self.dna_start_id + 1

    @property
    def oov_id(self) -> int:
        return self.dna_start_id + 2

    @property
    def kmer_start_id(self) -> int:
        return self.dna_start_id + len(self.special_tokens)

    @property
    def dna_stop_id(self) -> int:
        """One past the last id of the DNA block."""
        return self.dna_start_id + self.dna_vocab_size

    @classmethod
    def from_dna_config(cls, data: Mapping[str, Any], source: str = "dna_config.json") -> "DnaLayout":
        expected = {"k": K, "dna_start_id": QWEN3_VOCAB_SIZE, "dna_vocab_size": DNA_VOCAB_SIZE}
        for key, want in expected.items():
            if key not in data:
                raise TokenizerError(f"{source}: missing field {key!r} (Carbon uses {want})")
            if data[key] != want:
                raise TokenizerError(
                    f"{source}: {key}={data[key]!r} is not supported; the Carbon tokenizer has {key}={want}"
                )
        special = tuple(data.get("dna_special_tokens", DNA_SPECIAL_TOKENS))
        if special[:3] != DNA_SPECIAL_TOKENS:
            raise TokenizerError(
                f"{source}: dna_special_tokens={list(special)!r}; expected to start with {list(DNA_SPECIAL_TOKENS)!r}"
            )
        return cls(k=data["k"], dna_start_id=data["dna_start_id"], dna_vocab_size=data["dna_vocab_size"],
                   special_tokens=DNA_SPECIAL_TOKENS)


def dna_block_tokens(layout: DnaLayout = DnaLayout()) -> list[str]:
    """The token strings of the DNA block in id order: specials, 4,096 6-mers, unused fillers."""
    kmers = ["".join(p) for p in itertools.product(BASES, repeat=layout.k)]
    unused = [f"<unused_{i}>" for i in range(layout.dna_vocab_size - len(layout.special_tokens) - len(kmers))]
    return list(layout.special_tokens) + kmers + unused
