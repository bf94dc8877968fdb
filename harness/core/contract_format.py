"""What the output contract's writer (``harness.workloads.contract``) and its judge
(``harness.analysis.contract``, where the format is described) must agree on, below both."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from harness.core.storage import atomic_write_text
from harness.core.vocab import VOCAB_SIZE


class ContractError(ValueError):
    """A contract file or tolerances file that cannot be judged (named, with what is accepted)."""


CONTRACT_SCHEMA = 2
KINDS = ("scored", "own", "cut")  # the sequences a side scores (harness.analysis.contract)
# scoring along the reference's sequence starts after its first two tokens: NxDI 0.9 refuses a 1-token
# prompt (it reads a pad slot for it), and every stack can score from a 2-token prefix
SCORED_FROM = 2
PROBES = 512
PROBE_SEED = 38


def probe_ids(n: int = PROBES, seed: int = PROBE_SEED) -> list[int]:
    """The "all" tier's fixed ids: ``n`` distinct ids drawn uniformly over the whole vocabulary (BPE, added
    tokens, the DNA block, the unused tail), the same on every side and every run."""
    return sorted(random.Random(seed).sample(range(VOCAB_SIZE), n))


def write_contract(path: Path, contract: Any) -> Path:
    """A contract file, compact (a side's is ~250 rows of a thousand ids each), written atomically."""
    return atomic_write_text(path, json.dumps(contract, separators=(",", ":")) + "\n")
