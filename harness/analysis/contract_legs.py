"""The verdict's record of the output contract's legs (issue 56): for each leg the check ran (the sides' dtype,
the fp32 leg), each side's dtype and where it computed, and the leg's outcome, so that one verdict says what each
leg saw; and what a check whose fp32 leg did not run cannot exclude. The legs are planned and run by
``harness.release.legs``; each ``ContractResult`` carries its leg."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.analysis.contract import ContractResult


def leg_of(result: ContractResult) -> str:
    """The leg ``result`` was judged in: as the check named it, else the candidate's dtype (the leg the
    contract notes name), else ``?`` where no candidate was judged."""
    if result.leg:
        return result.leg
    return next((s.dtype for s in result.sides if s.who == "candidate"), "?")


def outcome(results: list[ContractResult]) -> str:
    """FAIL where any of the leg's contracts failed; PASS where every one judged a candidate; else ``not run``
    (nothing was compared: the leg could not run here, or no side wrote a contract)."""
    if any(r.reasons for r in results):
        return "FAIL"
    if results and all(any(s.who == "candidate" for s in r.sides) for r in results):
        return "PASS"
    return "not run"


def leg_records(contract: Mapping[str, ContractResult]) -> list[dict[str, Any]]:
    """One record per leg, in the order the check ran them: the contracts (model/shape) judged in it, each side's
    dtype as its engines reported it, where each side computed, the outcome, and why it did not run (if so)."""
    legs: dict[str, list[tuple[str, ContractResult]]] = {}
    for key, result in contract.items():
        legs.setdefault(leg_of(result), []).append((key, result))
    records = []
    for leg, judged in legs.items():
        results = [r for _, r in judged]
        dtypes = {s.who: s.dtype for r in results for s in r.sides}
        where = {who: w for r in results for who, w in r.where.items()}
        record: dict[str, Any] = {"leg": leg, "contracts": [k for k, _ in judged], "dtypes": dtypes, "where": where,
                                  "outcome": outcome(results)}
        if record["outcome"] == "not run":
            record["why"] = "; ".join(n for r in results for n in r.reasons + r.notes)[:500]
        records.append(record)
    return records


def fp32_leg_ran(contract: Mapping[str, ContractResult]) -> bool:
    """An fp32 leg judged a candidate (the caveat of a bf16 check is then answered by it)."""
    return any(s.who == "candidate" and s.dtype == "fp32" for r in contract.values() for s in r.sides)


def with_fp32_leg(result: ContractResult) -> ContractResult:
    """``result`` (the sides' own leg) once the fp32 leg ran beside it: its legs note says so, in place of the
    "no fp32 leg ran" advice of ``contract_notes.legs_note``."""
    ran = ", ".join(f"{s.who} {s.dtype}" for s in result.sides)
    result.notes = [f"contract legs: {ran}; this leg holds each side to its own dtype's rounding, and the fp32 leg "
                    "beside it (its own section) holds them to fp32's spread, where a defect below bf16 rounding shows"
                    if n.startswith("contract legs:") else n for n in result.notes]
    return result


def legs_markdown(records: list[dict[str, Any]]) -> list[str]:
    """The verdict's legs table, shown where the check ran more than one leg or named its leg."""
    if len(records) < 2 and not any(r["where"] for r in records):
        return []
    lines = ["| contract leg | baseline | candidate | outcome |", "|---|---|---|---|"]
    for r in records:
        cells = [f"{r['dtypes'].get(who, '-')}, {r['where'].get(who, '?')}" for who in ("baseline", "candidate")]
        said = r["outcome"] + (f": {r['why']}" if r.get("why") else "")
        lines.append(f"| {r['leg']} | {cells[0]} | {cells[1]} | {said} |")
    return lines + [""]
