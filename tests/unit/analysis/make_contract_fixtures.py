"""Regenerates the unit tests' three-way contract fixtures (fixtures/contract/threeway-*.json) from a real
release check's evidence, trimmed to stay small: the first ``PROMPTS`` prompts, each row's top ``TOP`` ids,
the values of every id any of the three computations kept in its top (in ``extra``), the first ``PROBES`` probes.

    python -m tests.unit.analysis.make_contract_fixtures SIDE.json REFERENCE.json YARDSTICK.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.core.contract_format import write_contract
from harness.core.paths import REPO_ROOT

PROMPTS, TOP, PROBES = 2, 60, 32
OUT = REPO_ROOT / "fixtures" / "contract"


def trim(contracts: list[dict]) -> list[dict]:
    out = []
    for c in contracts:
        c = {**c, "top_k": TOP, "probe_ids": c["probe_ids"][:PROBES], "prompts": c["prompts"][:PROMPTS]}
        out.append(c)
    for i in range(PROMPTS):
        for kind in out[0]["prompts"][i]["sequences"]:
            seqs = [c["prompts"][i]["sequences"][kind] for c in out]
            for j in range(len(seqs[0]["rows"])):
                rows = [s["rows"][j] for s in seqs]
                keep = {rows[0][0]} | {t[0] for r in rows for t in r[2][:TOP]}
                for s, r in zip(seqs, rows):
                    dropped = [t for t in r[2][TOP:] if t[0] in keep]  # still read where another kept it
                    extra = sorted(dropped + [e for e in (r[3] if len(r) > 3 else []) if e[0] in keep])
                    probes = (r[4] if len(r) > 4 else [])[:PROBES]
                    s["rows"][j] = [r[0], r[1], r[2][:TOP], extra, probes]
    return out


def main(argv: list[str]) -> int:
    side, ref, yard = (json.loads(Path(p).read_text()) for p in argv)
    command = "python -m tests.unit.analysis.make_contract_fixtures " + " ".join(argv)
    for name, contract in zip(("side", "reference", "yardstick"), trim([side, ref, yard])):
        contract["_provenance"] = command
        write_contract(OUT / f"threeway-{name}.json", contract)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
