"""The published HybridDNATokenizer's ``__call__`` semantics, apart from its encode rules: which
options it accepts, how it right-pads a batch, and what it returns. It overrides transformers'
``__call__``, so these differ from a stock PreTrainedTokenizer, and a drop-in must follow them."""

from __future__ import annotations

import warnings
from typing import Any

from harness.core.vocab import TokenizerError

PADDING_VALUES = (True, False, None, "longest", "max_length", "do_not_pad")


def check_call_options(padding: Any, truncation: Any, max_length: Any, return_tensors: Any,
                       add_special_tokens: bool) -> None:
    """Refuse what the published class cannot do (naming the value); warn where it ignores an option."""
    if padding not in PADDING_VALUES:
        raise TokenizerError(f"padding={padding!r}; expected one of True, False, None, "
                             "'longest', 'max_length', 'do_not_pad'")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                   or max_length < 0):
        raise TokenizerError(f"max_length={max_length!r}; expected a non-negative integer or None")
    if return_tensors not in (None, "pt", "np"):
        raise TokenizerError(f"return_tensors={return_tensors!r}; expected None, 'np' or 'pt'")
    if add_special_tokens:
        warnings.warn("HybridDNATokenizer does not support add_special_tokens=True, ignoring.", UserWarning,
                      stacklevel=3)
    if padding == "do_not_pad":
        warnings.warn("padding='do_not_pad' pads to the longest row: the published HybridDNATokenizer "
                      "pads on any truthy padding value; pass padding=False for no padding", UserWarning,
                      stacklevel=3)
    if not padding and (truncation or max_length):
        warnings.warn("max_length/truncation have no effect without padding (as in the published "
                      "HybridDNATokenizer): nothing was truncated", UserWarning, stacklevel=3)


def batch_encoding(rows: list[list[int]], masks: list[list[int]] | None, padding: bool, max_length: int | None,
                   pad_id: int, return_tensors: str | None, single: bool) -> Any:
    """Encoded rows as the published class returns them: with padding, right-padded with ``pad_id``
    to the longest row, capped at ``max_length`` (longer rows are cut, none is padded beyond the
    longest); token masks pad with -2; "pt" gives (1, n) tensors for one string, "np" goes through
    ``BatchEncoding`` (1-D arrays for one string, object arrays for a ragged batch)."""
    with_masks = masks is not None
    masks = masks if masks is not None else []
    if padding:
        if not rows:
            raise TokenizerError("padding an empty batch: pass at least one text")
        width = max(len(r) for r in rows)
        if max_length:
            width = min(width, max_length)
        attention = [[1] * min(len(r), width) + [0] * (width - len(r)) for r in rows]
        rows = [r[:width] + [pad_id] * (width - len(r)) for r in rows]
        masks = [m[:width] + [-2] * (width - len(m)) for m in masks]
    else:
        attention = [[1] * len(r) for r in rows]
    result: dict[str, Any] = {"input_ids": rows, "attention_mask": attention}
    if with_masks:
        result["token_mask"] = masks
    return _tensors(result, return_tensors, single)


def _tensors(result: dict[str, Any], return_tensors: str | None, single: bool) -> Any:
    if return_tensors == "pt":
        if len({len(r) for r in result["input_ids"]}) > 1:
            raise TokenizerError("rows have different lengths: pass padding=True to build a tensor")
        import torch

        result = {key: torch.tensor(value, dtype=torch.long) for key, value in result.items()}
    elif single:
        result = {key: value[0] for key, value in result.items()}
    from transformers import BatchEncoding

    return BatchEncoding(result, tensor_type=return_tensors)
