"""What the output contract's verdict says of its own reach (``harness.analysis.contract`` adds these to its
notes): which leg ran, and so which defects it cannot exclude."""

from __future__ import annotations

from collections.abc import Mapping


def leg_caveat(leg: str) -> str | None:
    """What a contract judged in ``leg`` (the candidate's dtype) cannot exclude; None for the fp32 leg. A server
    of unstated dtype is judged as bf16 (its criterion's ``same_as``), so its leg is bf16's."""
    if leg == "fp32":
        return None
    rounding = "bf16" if leg == "server" else leg
    return f"{leg} leg only: defects below {rounding} rounding not excluded"


def legs_note(dtypes: Mapping[str, str]) -> list[str]:
    """Which leg the contract ran, and what a leg that did not run would add. The leg is the candidate's dtype
    (the side the check judges): an fp32 baseline beside a bf16 candidate is no fp32 leg, for the candidate is
    held to bf16 rounding, and a defect smaller than that (a 1% attention scale late in decode) shows only in an
    fp32 leg. Without a candidate, the fp32 leg is every side in fp32. A device stack without fp32 has no such
    leg, and the verdict says that is why."""
    ran = ", ".join(f"{who} {dtype}" for who, dtype in dtypes.items())
    leg = dtypes.get("candidate") or ("fp32" if set(dtypes.values()) == {"fp32"} else
                                      next((d for d in dtypes.values() if d != "fp32"), "?"))
    if leg == "fp32":
        return [f"contract legs: {ran}; the fp32 leg holds each side to fp32's spread between correct stacks"]
    return [f"contract legs: {ran}; {leg_caveat(leg)} (no fp32 leg ran: "
            "a defect below bf16 rounding cannot show here; release-check runs the fp32 leg by default where both sides "
            "can compute in fp32: drop --legs bf16 (or check with --dtype fp32), or read the verdict's legs table for "
            "why it could not run)"]


def reach_note(last: int, shapes: str) -> list[str]:
    """The largest position any row of the contract scored: a defect that acts only past it (a RoPE variant
    from position 64, a KV slot dropped late in a long decode) cannot show in this verdict, whatever its size."""
    return [f"positions covered: up to position {last} (shape {shapes}); a defect acting only past position {last} "
            "cannot show here: a longer shape (--shape contract-long) reaches further"]
