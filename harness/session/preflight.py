"""Checks made once at start, before any test: can the chosen backend run here (for NxDI's CPU
mode: does the given NxDI import, stubbing only the Neuron-only packages), and the header line that
says whether the NxDI CPU tier runs and what would enable it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import BackendError
from harness.core.versions import installed_versions
from harness.session.config import HarnessConfig


def check_backend_available(config: HarnessConfig, connect: bool = True) -> None:
    """Fail the session at start, once, when an engine, server or draft the command line asked for
    cannot run on this machine: skipped instead, every test that needs it would pass the run with
    exit 0. For NxDI's CPU mode this imports NxDI (stubbing only the Neuron-only packages), so an
    API break of a candidate NxDI release, or a transformers it does not support, stops the session
    with its ImportError. ``connect``: ask --carbon-endpoint's server (not under --collect-only)."""
    if config.backend == "openai" and not (config.endpoint or config.serve):
        raise BackendError("--carbon-backend openai needs --carbon-endpoint URL of a running server "
                           "or --carbon-serve vllm")
    check_requested_drafts(config)
    check_serving(config, connect)
    if config.backend != "neuron":
        return
    if config.neuron_cpu:
        import_nxdi_for_cpu(config.nxdi_source)
        return
    from harness.backends.neuron.host import neuron_unavailable_reason

    reason = neuron_unavailable_reason()
    if reason:
        raise BackendError(f"--carbon-backend neuron cannot run here: {reason} (or add --carbon-neuron-cpu to run "
                           "NxDI's CPU mode)")


def check_requested_drafts(config: HarnessConfig) -> None:
    """--carbon-draft given where no speculative engine can run it (the default drafts only skip)."""
    if not config.drafts_requested:
        return
    drafts = ", ".join(d.label for d in config.drafts)
    if config.backend == "openai" or config.endpoint:
        if config.serve != "vllm":
            raise BackendError(f"--carbon-draft {drafts} cannot run with --carbon-endpoint: speculative serving needs "
                               "a server the harness starts with its draft: --carbon-serve vllm (a running server "
                               "speculates with whatever draft it was started with)")
        return
    from harness.workloads.speculative import loop_unavailable_reason

    reason = loop_unavailable_reason(config.backend, config.neuron_cpu, config.hf_compile)
    if reason:
        raise BackendError(f"--carbon-draft {drafts} cannot run on --carbon-backend {config.backend}: {reason}")


def vllm_unavailable_reason() -> str | None:
    """Why --carbon-serve vllm cannot start a server here (``harness.serving.server.vllm_python``'s
    choice: $CARBON_VLLM_PYTHON, else this Python if it has vllm), None when it can."""
    import importlib.util
    import os
    import shutil
    import sys

    explicit = os.environ.get("CARBON_VLLM_PYTHON")
    if explicit:
        return None if shutil.which(explicit) else f"CARBON_VLLM_PYTHON={explicit} is not an executable file"
    if importlib.util.find_spec("vllm") is None:
        return f"this Python ({sys.executable}) has no vllm and CARBON_VLLM_PYTHON is not set"
    return None


def check_serving(config: HarnessConfig, connect: bool) -> None:
    """The server the run asked for: vLLM for --carbon-serve vllm, the serving client, and (with
    ``connect``) an answer from --carbon-endpoint naming the model to measure."""
    if config.serve == "vllm":
        reason = vllm_unavailable_reason()
        if reason:
            from harness.serving.server import VLLM_INSTALL_HINT

            raise BackendError(f"--carbon-serve vllm cannot start here: {reason}; needs {VLLM_INSTALL_HINT}")
    if not (config.serve or config.endpoint):
        return
    from harness.serving.client import INSTALL_HINT, Endpoint, ServingError, resolve_endpoint, run_async

    try:
        import aiohttp  # noqa: F401
    except ImportError:
        asked = f"--carbon-serve {config.serve}" if config.serve else f"--carbon-endpoint {config.endpoint}"
        raise BackendError(f"{asked} needs the serving client, aiohttp: {INSTALL_HINT}") from None
    if config.endpoint and connect:
        try:
            run_async(resolve_endpoint(Endpoint.from_env(config.endpoint, config.served_model)))
        except ServingError as exc:
            raise BackendError(f"--carbon-endpoint {config.endpoint} cannot be used: {exc}") from None


NXDI_CPU_MODULES = ("neuronx_distributed_inference.models.config",
                    "neuronx_distributed_inference.models.llama.modeling_llama",
                    "neuronx_distributed_inference.utils.hf_adapter")


def import_nxdi_for_cpu(source: Path | None) -> Any:
    """Import NxDI for its CPU mode (from ``source`` or the installed package) and return where it
    came from; any failure is one BackendError naming NxDI's location and version, the import error,
    and the transformers installed against the one that NxDI release pins."""
    import importlib

    from harness.backends.neuron.sources import NeuronImportError
    from harness.backends.neuron.stubs import install

    try:
        where = install(source)
        for module in NXDI_CPU_MODULES:
            importlib.import_module(module)
    except NeuronImportError as exc:
        raise BackendError(str(exc)) from None
    except Exception as exc:  # an API break of this NxDI build or of its dependencies
        version, pin = nxdi_release(source)
        installed = installed_versions(("transformers",)).get("transformers")
        raise BackendError(f"NxDI {version} from {source or 'the installed package'} cannot be imported for its CPU "
                           f"mode: {type(exc).__name__}: {exc} (transformers {installed} is installed; NxDI {version} "
                           f"pins {pin})") from None
    return where


def nxdi_release(source: Path | None) -> tuple[str, str]:
    """The version of the NxDI that ``source`` (or the installed package) holds, and the transformers
    pin it declares, read from its files without importing it (for error messages)."""
    import importlib.util
    import re

    from harness.backends.neuron.artifacts import package_version
    from harness.backends.neuron.sources import NXDI_PACKAGE, NeuronImportError, source_roots

    try:
        if source is not None:
            package = source_roots(source)[0] / NXDI_PACKAGE
        else:
            spec = importlib.util.find_spec(NXDI_PACKAGE)
            package = Path(next(iter(spec.submodule_search_locations))) if spec else None
    except (NeuronImportError, StopIteration, ImportError):
        package = None
    version = (package_version(package) if package else None) or "(version unknown)"
    pin = None
    setup = package.parent.parent / "setup.py" if package else None
    found = re.search(r'"(transformers[^"]*)"', setup.read_text()) if setup and setup.is_file() else None
    if found:
        pin = found.group(1)
    elif version != "(version unknown)":
        from importlib import metadata

        try:
            requires = metadata.requires("neuronx-distributed-inference") or []
            pin = next((r for r in requires if r.startswith("transformers")), None)
        except metadata.PackageNotFoundError:
            pin = None
    return version, pin or "a transformers its setup.py names"


def nxdi_tier_line(config: HarnessConfig) -> str:
    """The report-header line on the NxDI CPU tier: what runs it, or what would enable it."""
    from harness.backends.neuron.stubs import installed

    where = installed()
    if where is not None:
        stubbed = ", ".join(where.stubbed) or "nothing"
        mode = "neuron backend in NxDI CPU mode" if config.neuron_cpu else "NxDI CPU-mode tests"
        return f"carbon-harness: {mode}: NxDI from {where.nxdi_path}; stubbed Neuron-only packages: {stubbed}"
    if config.nxdi_source is not None:
        return f"carbon-harness: NxDI CPU tier: NxDI from {config.nxdi_source} (imported on first use)"
    return ("carbon-harness: NxDI CPU tier: off (pass --carbon-nxdi-source DIR, an NxDI checkout, in a transformers "
            "4.57 environment: nox -s trn2-stack)")
