"""Counting an engine step's work (``harness.backends.work_counter``) on the real hf backend, in fresh
processes: the same code gives the same counts in every process (what lets a gate trust a count on a noisy
machine), a planted host-work increase (more Python calls per forward, no sleep) shows exactly, named by the
function that grew, and counting leaves no profile hook behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.work import WorkCount, describe_change
from harness.release.children import child_env
from harness.release.plant import plant_host_work
from tests.helpers import REPO

pytestmark = pytest.mark.unit

CHILD = """import json, sys
from pathlib import Path
from harness.backends.base import Batch
from harness.backends.hf import HFEngine
from harness.backends.work_counter import count_steps
from harness.core.spec import get_shape
engine = HFEngine(Path(sys.argv[1]), get_shape("smoke"), "carbon-tiny", device="cpu", dtype="fp32")
engine.prefill(Batch.from_ids([[151669, 151672, 151673, 151674]]))
work = count_steps(engine.decode_step, steps=3)
assert sys.getprofile() is None
print(json.dumps(work.to_dict()))
"""


def counted(checkpoint: Path, **env: str) -> WorkCount:
    r = subprocess.run([sys.executable, "-c", CHILD, str(checkpoint)], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=child_env(env))
    assert r.returncode == 0, r.stderr[-2000:]
    return WorkCount.from_dict(json.loads(r.stdout.strip().splitlines()[-1]))


def test_the_same_step_counts_the_same_in_every_process_and_a_planted_one_is_named(tmp_path, carbon_tiny_checkpoint):
    runs = [counted(carbon_tiny_checkpoint) for _ in range(3)]
    assert all(r == runs[0] for r in runs), [(r.python_calls, r.aten_ops, r.bytes_allocated) for r in runs]
    assert runs[0].python_calls > 0 and runs[0].aten_ops > 0 and runs[0].bytes_allocated > 0
    assert runs[0].instructions is not None or runs[0].instructions_why  # a PMU's count, or why there is none
    planted = counted(carbon_tiny_checkpoint, PYTHONPATH=str(plant_host_work(tmp_path / "plant", 40)))
    assert planted.aten_ops == runs[0].aten_ops  # host work only
    lines = describe_change(runs[0], planted)
    assert "+40 Python calls/step in sitecustomize._patch.<locals>._planted_host_work" in lines, lines
