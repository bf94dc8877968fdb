"""What a Python process runs with beyond its packages, and how two sides' differ.

Two sides with the same packages still compute differently when one has another module path
(``PYTHONPATH``, ``sys.path``), a hook the interpreter runs at start (``sitecustomize``, ``usercustomize``,
a ``.pth`` file with an ``import`` line), a preload or another library path for the dynamic loader
(``LD_PRELOAD``, ``LD_LIBRARY_PATH``), other thread or allocator settings (``TORCH_*``, ``OMP_*``, ``MKL_*``,
``MALLOC_*``, ``PYTORCH_*``) or another Neuron driver loaded (``/sys/module/neuron/version``: the module
that runs, which dpkg does not show when a newer package is installed and not loaded). This project's own zoo
plants its defects exactly so (a ``sitecustomize`` on ``PYTHONPATH``), and real hosts differ so.

Redaction: a variable whose name says it holds a secret (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL) is
recorded as ``<set>``, and so is any value that looks like one (a run of 32 or more letters, digits, ``-``
or ``_`` with no path separator): its name is enough to tell two runs apart. Paths are written relative to the
process's own prefix (``<prefix>``, ``<base>``: a venv's location is not a difference) and with the Python
minor version as ``pythonX.Y`` (recorded apart, as ``python``). Pure, except ``environment_record``.
"""

from __future__ import annotations

import hashlib
import os
import re
import site
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_LIBRARY_PATH", "LD_PRELOAD")
PREFIXES = ("TORCH_", "PYTORCH_", "OMP_", "MKL_", "MALLOC_")
HOOKS = ("sitecustomize", "usercustomize")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
SECRET_VALUE = re.compile(r"[A-Za-z0-9_\-]{32,}")
NEURON_DRIVER = Path("/sys/module/neuron/version")


def env_pairs(entries: Mapping[str, str] | Iterable[Any]) -> tuple[tuple[str, str], ...]:
    """A side's own variables as ``(NAME, VALUE)`` pairs, from a mapping, pairs or ``NAME=VALUE`` strings (as
    ``--baseline-env`` and a shell write them). ``dict()`` of a ``NAME=VALUE`` string fails on its length
    ("dictionary update sequence element #0 has length 55; 2 is required": the length of
    ``PYTHONPATH=<10-char checkout>/tests/stand_ins/vllm_neuron_2_32``); an entry that is neither is refused, named."""
    out = []
    for entry in entries.items() if isinstance(entries, Mapping) else entries:
        if isinstance(entry, str):
            name, sep, value = entry.partition("=")
        elif isinstance(entry, (tuple, list)) and len(entry) == 2 and all(isinstance(x, str) for x in entry):
            (name, value), sep = entry, "="
        else:
            name, sep, value = "", "", ""
        if not sep or not name:
            raise ValueError(f"environment entry {entry!r}: give NAME=VALUE or a (NAME, VALUE) pair")
        out.append((name, value))
    return tuple(out)


def redacted(name: str, value: str) -> str:
    return "<set>" if SECRET_NAME.search(name) or SECRET_VALUE.fullmatch(value) else value


def recorded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that change what a process loads or how it threads and allocates, redacted."""
    return {k: redacted(k, v) for k, v in sorted(environ.items()) if k in VARIABLES or k.startswith(PREFIXES)}


def normalized(path: str, prefixes: Mapping[str, str]) -> str:
    """``path`` with each of ``prefixes`` (a directory -> its placeholder) replaced and pythonX.Y generic."""
    for directory, placeholder in prefixes.items():
        if directory and (path == directory or path.startswith(directory.rstrip("/") + "/")):
            path = placeholder + path[len(directory.rstrip("/")):]
            break
    return re.sub(r"python3\.?\d+", "pythonX.Y", path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def runs_code(pth_text: str) -> bool:
    """A ``.pth`` line that starts with ``import`` is executed at interpreter start (site's rule)."""
    return any(line.startswith(("import ", "import\t")) for line in pth_text.splitlines())


def environment_record(environ: Mapping[str, str] = os.environ, path: Iterable[str] | None = None,
                       modules: Mapping[str, Any] | None = None, site_dirs: Iterable[str] | None = None,
                       driver: Path = NEURON_DRIVER) -> dict[str, Any]:
    """This process's module path, start hooks (by path and sha256), ``.pth`` files, recorded variables and
    Neuron driver."""
    modules = sys.modules if modules is None else modules
    prefixes = {sys.prefix: "<prefix>", sys.base_prefix: "<base>", str(Path.home()): "~"}
    dirs = list(site.getsitepackages() + [site.getusersitepackages()] if site_dirs is None else site_dirs)
    hooks = {}
    for name in HOOKS:
        file = getattr(modules.get(name), "__file__", None)
        if file and Path(file).is_file():
            hooks[name] = {"path": normalized(str(Path(file).resolve()), prefixes), "sha256": sha256(Path(file))}
    pth = {}
    for directory in dirs:
        for file in sorted(Path(directory).glob("*.pth")) if Path(directory).is_dir() else ():
            text = file.read_text(errors="replace")
            pth[normalized(str(file), prefixes)] = {"sha256": sha256(file), "runs_code": runs_code(text)}
    try:
        loaded = driver.read_text().strip()
    except OSError:
        loaded = None
    return {"env": recorded_env(environ),
            "sys_path": [normalized(p, prefixes) for p in (sys.path if path is None else path) if p],
            "hooks": hooks, "pth": pth, "neuron_driver": loaded}


def flattened(record: Mapping[str, Any]) -> dict[str, str]:
    """One line per thing that can differ, for a side table: ``env PYTHONPATH``, ``sys.path``, ``hook
    sitecustomize``, ``pth NAME``, ``neuron driver``."""
    out = {f"env {k}": str(v) for k, v in (record.get("env") or {}).items()}
    out["sys.path"] = ", ".join(record.get("sys_path") or [])
    for name, hook in (record.get("hooks") or {}).items():
        out[f"hook {name}"] = f"{hook['path']} (sha256 {hook['sha256'][:12]})"
    for name, pth in (record.get("pth") or {}).items():
        out[f"pth {Path(name).name}"] = f"sha256 {pth['sha256'][:12]}" + (", runs code" if pth.get("runs_code") else "")
    out["neuron driver"] = str(record.get("neuron_driver") or "-")
    return out


def differences(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Each line that differs between two records: (what, baseline's, candidate's), ``-`` where absent."""
    a, b = flattened(baseline), flattened(candidate)
    return [(key, a.get(key, "-"), b.get(key, "-")) for key in sorted(a.keys() | b.keys())
            if a.get(key, "-") != b.get(key, "-")]
