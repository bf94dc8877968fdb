"""The test environments users have, one nox session each (the README's test command is ``nox``).

- ``trn2-stack``: the Neuron SDK 2.29 stack's Python packages (transformers 4.57.*), where the NxDI
  CPU-mode tier runs against an NxDI source checkout (``../shared/vendor`` when present, or
  ``CARBON_NXDI_SOURCE``).
- ``latest``: the newest transformers; the whole suite under ``pytest -n 2`` (pytest-xdist), so that
  the benchmarks' scale-out path (workers measure, the controller merges one JSON) and the suite's
  own subprocess runs are exercised in parallel workers.

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
    """transformers 4.57.* as NxDI 0.9 pins it; the NxDI CPU-mode tier runs here."""
    install_harness(session, "transformers==4.57.*")
    args = list(session.posargs)
    source = nxdi_source()
    if source:
        args = ["--carbon-nxdi-source", source, *args]
    session.run("pytest", *args)


@nox.session(name="latest")
def latest(session: nox.Session) -> None:
    """The newest transformers, the suite in two pytest-xdist workers."""
    install_harness(session)
    session.install("--upgrade", "transformers")
    session.run("pytest", "-n", "2", *session.posargs)
