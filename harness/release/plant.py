"""A planted slowdown: a copy of an NxDI source tree whose token-generation step does ``extra_ms``
more CPU work, for showing that a release check catches what it exists to catch (and lets a change
well under its tolerance pass). Used by the suite and by ``python -m harness.release.power``.

The work is a spin on ``time.process_time`` right after NxDI's token-generation sub-model returns
(``NeuronBaseForCausalLM._get_model_outputs``), so it lands inside every timed decode step and
costs the same process CPU time whatever else the machine is doing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.backends.neuron.stubs import source_roots

ANCHOR = "            is_run_on_neuron = self.token_generation_model.is_neuron()\n"
MODEL_BASE = Path("neuronx_distributed_inference") / "models" / "model_base.py"


class PlantError(ValueError):
    """The tree cannot be planted (not an NxDI tree, or its token-generation path has moved)."""


def _plant(source: Path, dest: Path, code: str) -> Path:
    """``dest`` laid out like ``../shared/vendor`` (``neuronx-distributed-inference/src`` and a link to
    the source's neuronx-distributed), with ``code`` run at the start of each TKG step."""
    nxdi_src, nxd_src = source_roots(source)
    target = dest / "neuronx-distributed-inference" / "src"
    shutil.copytree(nxdi_src / "neuronx_distributed_inference", target / "neuronx_distributed_inference",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if nxd_src is not None:
        (dest / "neuronx-distributed").mkdir(parents=True, exist_ok=True)
        # absolute: a link relative to the caller's directory would dangle from inside dest
        (dest / "neuronx-distributed" / "src").symlink_to(nxd_src.resolve(), target_is_directory=True)
    model_base = target / MODEL_BASE
    text = model_base.read_text()
    if text.count(ANCHOR) != 1:
        raise PlantError(f"{nxdi_src / MODEL_BASE}: the token-generation call ({ANCHOR.strip()!r}) is not found "
                         "exactly once; this NxDI release lays out its forward differently")
    model_base.write_text(text.replace(ANCHOR, code + ANCHOR))
    return dest


def plant_tkg_slowdown(source: Path, dest: Path, extra_ms: float) -> Path:
    """A copy of ``source`` with ``extra_ms`` of CPU work added to each TKG step."""
    if not extra_ms >= 0:
        raise PlantError(f"extra_ms={extra_ms!r} must be a non-negative number of milliseconds")
    spin = (f"            import time as _planted_time  # planted: {extra_ms} ms of CPU work per TKG step\n"
            f"            _planted_end = _planted_time.process_time() + {extra_ms / 1000.0!r}\n"
            "            while _planted_time.process_time() < _planted_end:\n"
            "                pass\n")
    return _plant(source, dest, spin)


def plant_one_crash(source: Path, dest: Path, marker: Path) -> Path:
    """A copy of ``source`` whose first TKG step after ``marker`` exists removes it and raises: one
    process crashes (the first to decode, such as a check's first baseline perf round with
    ``--no-conformance``), every later one runs the release unchanged."""
    marker = marker.resolve()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("the next TKG step raises once\n")
    crash = ("            import os as _planted_os  # planted: one crash, while the marker exists\n"
             f"            if _planted_os.path.exists({str(marker)!r}):\n"
             f"                _planted_os.remove({str(marker)!r})\n"
             "                raise RuntimeError('planted crash: this process fails once')\n")
    return _plant(source, dest, crash)
