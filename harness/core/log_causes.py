"""The actual cause, where the harness can see it, for two errors whose fix used to be "read the log".

- A served side's checkpoint missing under ``--model-root``: the check looks for ``<root>/<hub name>``
  (``Carbon-3B`` for ``carbon-3b``, as ``--carbon-model-root`` does); the error names that directory and the
  download that puts it there (docs/migration.md, step 3), since ``--model`` takes a model's name, never a path.
- A vLLM server that exits before it is ready because its interpreter lacks a module: the log's
  ``ModuleNotFoundError: No module named 'X'`` is named, with the venv to install into (the server's own
  interpreter's) and what to install there.

Small functions over text and paths (the one read is the server's own log), in core so both the release check
(``harness.release.served``) and the serving layer (``harness.serving.server``) can call them.
"""

from __future__ import annotations

import re
from pathlib import Path

MISSING_MODULE = re.compile(r"\b(?:ModuleNotFoundError|ImportError): No module named '([A-Za-z_][\w.]*)'")
# What to install for a module the harness's servers import, by its top-level package: pip's arguments (run
# with the server's interpreter), or what to do where one pip line is not the fix. Any other module: its name.
INSTALLS = {
    "harness": "-e '.[test,serving]' (from this checkout; ci/scripts/sdk-venv.sh installs it with "
               "EXTRAS=test,serving)",
    "aiohttp": "-e '.[serving]' (from this checkout)",
}
REBUILDS = {
    "vllm": "the side's vLLM build, from its ci/constraints file (ci/scripts/sdk-venv.sh builds the venv from it; "
            "vLLM's CPU build: nox -s serving)",
    "vllm_neuron": "the side's vLLM Neuron plugin, from its ci/constraints/vllm-neuron-*.txt "
                   "(ci/scripts/sdk-venv.sh builds the venv from it)",
}


def missing_checkpoint_message(model_root: Path, model: str, hub_name: str) -> str:
    """The error for a served side whose checkpoint is not under ``--model-root``: the directory looked for,
    and the command that downloads it there."""
    where = Path(model_root) / hub_name
    return (f"--model {model}: no checkpoint at {where} (--model-root {model_root} holds each model in a directory "
            f"named as on the hub); download it: hf download HuggingFaceBio/{hub_name} --local-dir {where}, or give "
            f"--model-root the directory that holds {hub_name}/")


def venv_of(python: str | Path) -> Path:
    """The venv an interpreter belongs to (``VENV/bin/python`` -> ``VENV``), else the interpreter's folder."""
    path = Path(python)
    return path.parent.parent if path.parent.name == "bin" else path.parent


def missing_module(log_text: str) -> str | None:
    """The module a log says could not be imported (the last such line: the one that stopped the process)."""
    found = MISSING_MODULE.findall(log_text)
    return found[-1] if found else None


def missing_module_note(log: Path, python: str | Path) -> str:
    """A line for a dead server's error: the missing module its log names (the log's last 500 lines), and
    where and what to install; empty when the log names none or cannot be read."""
    try:
        module = missing_module("\n".join(Path(log).read_text(errors="replace").splitlines()[-500:]))
    except OSError:
        return ""
    if module is None:
        return ""
    top = module.split(".")[0]
    what = REBUILDS.get(top) or f"{python} -m pip install {INSTALLS.get(top, top)}"
    return (f"\ncause: the log says ModuleNotFoundError: No module named '{module}': the server's interpreter "
            f"{python} lacks it; install into that venv ({venv_of(python)}): {what}")
