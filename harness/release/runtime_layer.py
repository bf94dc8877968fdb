"""The runtime layer of a release check: which Neuron runtime, collectives and driver each side ran on,
against what its SDK release ships.

A check that swaps Python packages (``ci/scripts/sdk-venv.sh``) leaves both sides on the host's OS packages:
one libnrt, one collectives library, one driver. A regression in that layer (aws-neuron-sdk#1370: Neuron
2.31's runtime raised the gap between executables from ~13 us to 170-190 us) is then on both sides or on
neither, and the verdict cannot see it; worse, a "2.29 baseline" on a newer DLAMI runs on a runtime 2.29
never shipped with. So each side's probe reports the host's Neuron OS packages (``dpkg-query``) and the OS
package lines of the SDK constraints file its venv was built from (``sdk-venv.sh`` copies it into the venv
as ``carbon-harness-constraints.txt``; ``$CARBON_SDK_CONSTRAINTS`` names another), and this module names
every mismatch, and the blind spot when both sides shared one runtime. The way to see a runtime regression
is each side in its own Neuron DLC image (``--baseline-image`` / ``--candidate-image``): each side's probe
then reads its own image's packages.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

CONSTRAINTS_IN_VENV = "carbon-harness-constraints.txt"
RUNTIME = "aws-neuronx-runtime-lib"
# The packages a container image swaps (user space); the driver (dkms) is the host's kernel module either way.
COMPARED = (RUNTIME, "aws-neuronx-collectives", "aws-neuronx-dkms")
OS_PACKAGE = re.compile(r"(aws-neuronx-[a-z-]+) (\d+(?:\.\d+)+)")
BLIND = "a runtime regression between the SDKs cannot be seen"


def constraints_os_packages(text: str) -> dict[str, list[str]]:
    """The ``# OS packages`` comment of a constraints file: package -> the versions its release(s) ship."""
    block, inside = [], False
    for line in text.splitlines():
        if line.startswith("# OS packages"):
            inside = True
        elif inside and not line.startswith("#   "):
            break
        if inside:
            block.append(line)
    out: dict[str, list[str]] = {}
    for name, version in OS_PACKAGE.findall(" ".join(block)):
        out.setdefault(name, [])
        if version not in out[name]:
            out[name].append(version)
    return out


def side_constraints(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The constraints file this interpreter's venv was built from (for the probe), or why none is known."""
    environ = os.environ if environ is None else environ
    path = Path(environ["CARBON_SDK_CONSTRAINTS"]) if environ.get("CARBON_SDK_CONSTRAINTS") else \
        Path(sys.prefix) / CONSTRAINTS_IN_VENV
    try:
        text = path.read_text()
    except OSError:
        return {"file": None, "why": f"no {path} (a venv that ci/scripts/sdk-venv.sh did not build; set "
                                     "CARBON_SDK_CONSTRAINTS to its constraints file)"}
    release = next((line.split("(")[0].strip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
    return {"file": str(path), "release": release, "os_packages": constraints_os_packages(text)}


def matches(installed: str | None, shipped: list[str]) -> bool:
    """dpkg's version (``2.31.24.0`` or ``2.31.24.0-4d7e2f0ab``) is one the release ships."""
    return installed is not None and any(installed == v or installed.startswith(v + "-") for v in shipped)


def runtime_layer(versions: dict[str, dict[str, Any]], images: dict[str, str | None],
                  accepted: str | None = None) -> dict[str, Any]:
    """verdict.json's ``runtime_layer`` from each side's probe (``versions``: side -> probe info); ``accepted``: the
    runtime mismatch the user ran anyway with --accept-shared-runtime (``harness.release.shared_runtime``)."""
    sides: dict[str, Any] = {}
    for name, info in versions.items():
        host = info.get("neuron_os_packages") or {}
        host = {} if "error" in host else host
        constraints = info.get("sdk_constraints") or {}
        shipped = constraints.get("os_packages") or {}
        mismatches = [f"{pkg} {host.get(pkg) or 'not installed'}, where {constraints.get('release') or 'its SDK'} "
                      f"ships {' or '.join(shipped[pkg])}" for pkg in COMPARED
                      if pkg in shipped and host and not matches(host.get(pkg), shipped[pkg])]
        sides[name] = {"runtime": host.get(RUNTIME), "host_packages": host, "constraints": constraints.get("file"),
                       "release": constraints.get("release"), "shipped": shipped, "mismatches": mismatches,
                       "image": images.get(name)}
    notes = []
    if accepted:
        notes.append(f"accepted with --accept-shared-runtime: {accepted.split(', but ')[0]}; both ran on one runtime")
    runtimes = {s["runtime"] for s in sides.values()}
    if runtimes == {None}:
        notes.append("no Neuron runtime on this host (dpkg lists no aws-neuronx-runtime-lib): the runtime layer is "
                      "not part of this check")
    for name, side in sides.items():
        if side["mismatches"]:
            notes.append(f"the {name} ran on {', '.join(side['mismatches'])}")
    shipped_runtimes = {tuple(s["shipped"].get(RUNTIME, [])) for s in sides.values()}
    if len(runtimes) == 1 and None not in runtimes and (len(shipped_runtimes) > 1 or any(s["mismatches"] for s in
                                                                                           sides.values())):
        notes.append(f"both sides ran on runtime {next(iter(runtimes))}; {BLIND} (run each side in its own Neuron "
                     "DLC image: --baseline-image / --candidate-image)")
    return {"sides": sides, "notes": notes, "shared": len(runtimes) == 1 and None not in runtimes,
            "accepted_shared_runtime": accepted}


def markdown(layer: dict[str, Any]) -> list[str]:
    if not layer.get("notes"):
        return []
    return ["### Runtime layer", ""] + [f"- {note}" for note in layer["notes"]] + [""]
