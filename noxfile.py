"""The test environments users have, one nox session each (the README's test command is ``nox``).

- ``trn2-stack``: the Neuron SDK 2.29 stack's Python packages (transformers 4.57.*), where the NxDI
  CPU-mode tier runs against an NxDI source checkout (``../shared/vendor`` when present, or
  ``CARBON_NXDI_SOURCE``).
- ``latest``: the newest transformers.

The CPU torch wheel is installed first in every environment so that resolving ``torch>=2.1`` never
pulls a CUDA build.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["trn2-stack", "latest"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent
TORCH_CPU = "torch==2.13.0"


def nxdi_source() -> str | None:
    """Where the NxDI CPU tier takes NxDI from: $CARBON_NXDI_SOURCE, else ../shared/vendor."""
    explicit = os.environ.get("CARBON_NXDI_SOURCE")
    if explicit:
        return explicit
    vendored = ROOT.parent / "shared" / "vendor"
    return str(vendored) if vendored.is_dir() else None


def install_harness(session: nox.Session, *extra: str) -> None:
    session.install(TORCH_CPU)
    session.install("-e", ".[plot,test]", *extra)


@nox.session(name="trn2-stack")
def trn2_stack(session: nox.Session) -> None:
    """transformers 4.57.* as NxDI 0.9 pins it. With an NxDI source, the NxDI CPU tier runs in the
    suite, and the perf path of the neuron backend runs once through NxDI's CPU mode (smoke shape:
    NxDI's CPU mode decodes ~20x slower than transformers on the CPU, so the longer suites are left
    to the main job on hardware)."""
    install_harness(session, "transformers==4.57.*")
    source = nxdi_source()
    if not source:
        session.warn("no NxDI source (../shared/vendor or $CARBON_NXDI_SOURCE): the NxDI CPU tier is skipped")
        session.run("pytest", *session.posargs)
        return
    session.run("pytest", "--carbon-nxdi-source", source, *session.posargs)
    if not session.posargs:
        session.run("pytest", "-m", "perf", "tests/perf/test_latency.py", "--carbon-backend", "neuron",
                    "--carbon-neuron-cpu", "--carbon-nxdi-source", source, "--carbon-shape", "smoke",
                    "--carbon-runs", "2", "--benchmark-json", str(ROOT / ".nox" / "nxdi-cpu-perf.json"))


@nox.session(name="latest")
def latest(session: nox.Session) -> None:
    """The newest transformers."""
    install_harness(session)
    session.install("--upgrade", "transformers")
    session.run("pytest", *session.posargs)
