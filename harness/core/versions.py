"""Installed package versions, for run manifests and artifact keys."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """Versions of the named distributions that are installed (absent ones are left out)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def checkout_commit(root: Path, tracked: str) -> str | None:
    """The commit of the git checkout that tracks ``tracked`` (a path under ``root``); None where none
    does. ``git -C root rev-parse HEAD`` alone answers with whatever repository encloses ``root``: an
    untracked copy of the harness inside another project, or site-packages in a venv that lives in one,
    would be stamped with that project's commit."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    if git("ls-files", "--error-unmatch", tracked) is None:
        return None
    return git("rev-parse", "HEAD") or None


def distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
