"""The rows a side scored beyond its sequences, each paired with its own single run position by position: its
padded rows (the ``cut`` prompt right-padded) and its batched rows (the ``cut`` and the whole prompt in one
batch of mixed lengths, or a server's concurrent row), with the reference's and the yardstick's rows there. The
judge (``harness.analysis.contract``) holds them to the side's unpadded rows (``threeway.padded_spread``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.analysis.threeway import Aligned
from harness.core.contract_format import ContractError
from harness.core.scored import ScoredToken


def paired(prompt: str, start: int, rows: Sequence[Any], single: Mapping[tuple[str, int], tuple]) -> list[tuple]:
    """(prompt, position, row, side's single-run row, reference, yardstick) of ``rows`` scoring from ``start``."""
    return [(prompt, start + j, ScoredToken.from_list(row), *single[(prompt, start + j)]) for j, row in enumerate(rows)]


def padded_rows(target: Mapping[str, Any], cut: Aligned | None) -> tuple[list[tuple], str]:
    """(prompt, position, padded, unpadded, reference, yardstick) of every padded row the side scored, and
    why it scored none (``rows_not_measured``)."""
    if cut is None:
        return [], ""
    by = {(n, pos): (t, r, y) for n, pos, t, r, y in cut.rows}
    out, why = [], ""
    for p in target["prompts"]:
        padded, seq = p.get("padded") or {}, p.get("sequences", {}).get("cut")
        why = why or padded.get("rows_not_measured", "")
        if not padded.get("rows") or seq is None:
            continue
        if len(padded["rows"]) != len(seq["rows"]):
            raise ContractError(f"prompt {p['name']!r}: {len(padded['rows'])} padded rows for {len(seq['rows'])} "
                                "unpadded cut rows; the padded row scores the same tokens")
        out += paired(p["name"], seq["from"], padded["rows"], by)
    return out, why


def batched_rows(target: Mapping[str, Any], aligned: Sequence[Aligned]) -> tuple[dict[str, list[tuple]], str]:
    """Row kind -> (prompt, position, batched, unpadded, reference, yardstick) of every batched row the side
    scored, and why it scored none where it supplied the entry without rows."""
    by = {a.kind: {(n, pos): (t, r, y) for n, pos, t, r, y in a.rows} for a in aligned}
    out: dict[str, list[tuple]] = {}
    why = ""
    for p in target["prompts"]:
        batched = p.get("batched") or {}
        why = why or batched.get("rows_not_measured", "")
        for kind, rows in zip(batched.get("rows_of", []), batched.get("rows") or []):
            seq = p.get("sequences", {}).get(kind)
            if seq is None or kind not in by:
                raise ContractError(f"prompt {p['name']!r}: batched rows of {kind!r}, a sequence this side did not "
                                    f"score; known: {', '.join(sorted(p.get('sequences', {})))}")
            want = batched.get("diverged_at", len(seq["rows"]))  # a server's concurrent row: as far as it agrees
            if len(rows) != want or want > len(seq["rows"]):
                raise ContractError(f"prompt {p['name']!r}: {len(rows)} batched rows for {len(seq['rows'])} unpadded "
                                    f"{kind} rows; a batched row scores the same tokens")
            out.setdefault(kind, []).extend(paired(p["name"], seq["from"], rows, by[kind]))
    return out, ("" if out else why)
