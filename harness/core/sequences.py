"""Where two token sequences part: the one "first difference" the harness and its tests report when
generated ids differ from expected ones (golden files, a server against transformers, a
speculative server against the target alone), so every such message counts the same way."""

from __future__ import annotations

from collections.abc import Sequence


def first_difference(got: Sequence[int], expected: Sequence[int]) -> int | None:
    """Index of the first position where ``got`` and ``expected`` differ; the shorter length when one
    is a prefix of the other (the first position only one of them has); None when they are equal."""
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return i
    return None if len(got) == len(expected) else min(len(got), len(expected))


def describe_difference(got: Sequence[int], expected: Sequence[int]) -> str:
    """One line for an assertion message: where they part and what each has there."""
    i = first_difference(got, expected)
    if i is None:
        return f"all {len(expected)} tokens equal"

    def at(seq: Sequence[int]) -> str:
        return str(seq[i]) if i < len(seq) else f"nothing (it ends after {len(seq)} tokens)"

    return f"first differs at token {i} of {len(expected)}: got {at(got)}, expected {at(expected)}"
