"""Where an NxDI source tree keeps its packages: the layouts ``--carbon-nxdi-source`` (and a release
check's ``--baseline-nxdi-source`` / ``--candidate-nxdi-source``) accept.

Apart from ``stubs`` on purpose: a release check, its probe and its planted trees only read the tree's
layout, and must not load the module that rewires this process's import system for NxDI's CPU mode.
Pure path logic on the file system; nothing here imports NxDI.
"""

from __future__ import annotations

from pathlib import Path

NXDI_PACKAGE = "neuronx_distributed_inference"
NXD_PACKAGE = "neuronx_distributed"


class NeuronImportError(ImportError):
    """NxDI (or neuronx-distributed) cannot be imported from what was given; the message says why."""


def source_roots(source: Path) -> tuple[Path, Path | None]:
    """The directories to put on sys.path for a source tree given as ``source``: an NxDI checkout
    (``src/neuronx_distributed_inference``), a directory holding the package itself, or a folder
    with both checkouts side by side (``neuronx-distributed-inference/``, ``neuronx-distributed/``,
    as ``carbon-harness nxdi-source`` lays a tree out). The second is neuronx-distributed's, when found there."""
    source = source.expanduser()
    if not source.is_dir():
        raise NeuronImportError(f"--carbon-nxdi-source {source} is not a directory")
    candidates = [source, source / "src", source / "neuronx-distributed-inference" / "src",
                  source / "neuronx-distributed-inference"]
    nxdi = next((c for c in candidates if (c / NXDI_PACKAGE / "__init__.py").is_file()), None)
    if nxdi is None:
        raise NeuronImportError(
            f"--carbon-nxdi-source {source} holds no {NXDI_PACKAGE} package: give an NxDI checkout (with "
            f"src/{NXDI_PACKAGE}), the directory that contains {NXDI_PACKAGE}/, or a folder with "
            "neuronx-distributed-inference/ and neuronx-distributed/ checkouts side by side")
    nxd_candidates = [nxdi, source / "neuronx-distributed" / "src", source / "neuronx-distributed",
                      source.parent / "neuronx-distributed" / "src"]
    nxd = next((c for c in nxd_candidates if (c / NXD_PACKAGE / "__init__.py").is_file()), None)
    return nxdi, nxd
