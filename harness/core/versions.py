"""Installed package versions, for run manifests and artifact keys."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """Versions of the named distributions that are installed (absent ones are left out)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
