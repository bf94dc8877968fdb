"""One host runtime under two releases (issue 55, item 10): a served pair whose sides need different Neuron runtimes
(a vLLM Neuron 2.32 -> 2.33 pair: runtime 2.34.10.0 against 2.35.30.0) run in venvs on one host runs one side on the
other's runtime. ``harness.release.runtime_layer`` records that after the fact; this refuses it before anything
starts, naming the mismatch, unless each side runs in its own image (``--*-image``: a Neuron DLC image brings its
own runtime) or the user accepts one runtime for both (``--accept-shared-runtime``), which the verdict records.

What a side needs is read from the venv its interpreter lives in: ``ci/scripts/sdk-venv.sh`` copies the release's
constraints file there (``runtime_layer.CONSTRAINTS_IN_VENV``), whose ``# OS packages`` line names the runtime the
release ships. A side whose venv has no such file (not built by sdk-venv.sh, a team's endpoint, an image's
interpreter) needs nothing known, and is not compared."""

from __future__ import annotations

from pathlib import Path

from harness.release.runtime_layer import CONSTRAINTS_IN_VENV, RUNTIME, constraints_os_packages

OPTION = "--accept-shared-runtime"


def needs(python: str, env: dict[str, str] | None = None) -> tuple[str, list[str]] | None:
    """(release, the runtime versions it ships) of the venv ``python`` lives in (``VENV/bin/python``: the link's
    own folder, never its target's), or of the side's ``CARBON_SDK_CONSTRAINTS`` (its ``--*-env``, as the probe
    reads it: ``runtime_layer.side_constraints``); None where neither names one."""
    told = (env or {}).get("CARBON_SDK_CONSTRAINTS")
    path = Path(told) if told else Path(python).absolute().parent.parent / CONSTRAINTS_IN_VENV
    try:
        text = path.read_text()
    except OSError:
        return None
    runtimes = constraints_os_packages(text).get(RUNTIME)
    if not runtimes:
        return None
    release = next((line.split("(")[0].strip("# ").strip() for line in text.splitlines() if line.startswith("#")),
                   path.parent.name)
    return release, runtimes


def mismatch(sides: dict[str, tuple[str, list[str]] | None], served: bool, images: dict[str, str | None]) -> str | None:
    """The one line naming two sides that need different runtimes and would share the host's, or None (not a
    served pair, a side in its own image, a need unknown, or a runtime both releases ship)."""
    if not served or any(images.values()) or None in sides.values() or len(sides) != 2:
        return None
    (a, (rel_a, rt_a)), (b, (rel_b, rt_b)) = sides.items()  # type: ignore[misc]
    if set(rt_a) & set(rt_b):
        return None
    return (f"the {a} ({rel_a}) needs Neuron runtime {' or '.join(rt_a)} and the {b} ({rel_b}) needs "
            f"{' or '.join(rt_b)}, but both would run on this host's one runtime: run each side in its own image "
            f"(--{a}-image / --{b}-image, a Neuron DLC image of its release), or give {OPTION} to run both on one "
            "runtime (the verdict records it)")

