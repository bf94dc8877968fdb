"""NxDI's CPU mode (``NeuronEngine(cpu=True)``, the engine an nxdi side of the check runs) teacher-forced as the
contract scores a side: two prompts in one batch of the contract's long shape (30 and 50 tokens), a prefill,
then decode steps fed ``STEPS`` given tokens, each step's full logits saved. Run with a planted copy of the NxDI
tree and with the tree it was copied from, the two say at which step of which prompt an NxDI plant acts
(``test_defects``). Needs transformers 4.57 (NxDI 0.9's), such as .nox/trn2-stack/bin/python."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

LENGTHS, STEPS = (30, 50), 20


def step_logits(checkpoint: Path, source: Path, dtype: str) -> torch.Tensor:
    """``[2, STEPS, V]`` float32: per prompt, row 0 the prefill's last position, row j the decode step whose query
    sits at position ``length + j - 1``."""
    from harness.backends import make_engine
    from harness.backends.base import Batch
    from harness.core.spec import get_shape

    engine = make_engine("neuron", checkpoint, get_shape("contract-long"), "carbon-tiny", neuron_cpu=True,
                         nxdi_source=source, dtype=dtype)
    prompts = [[(7 * i + 11) % 4000 + 5 for i in range(n)] for n in LENGTHS]
    given = torch.tensor([[(13 * j + 3 * r) % 4000 + 5 for j in range(STEPS)] for r in range(len(LENGTHS))])
    with torch.inference_mode():
        logits = engine.continuation_logits(Batch.from_ids(prompts), given)
    return logits.reshape(len(LENGTHS), STEPS, -1)


if __name__ == "__main__":
    torch.save(step_logits(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]), sys.argv[4])
