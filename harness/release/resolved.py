"""A side's resolved set: name==version of every distribution its interpreter sees, recorded at the first build of
a release whose constraints file cannot pin everything (its ``# unpinned:`` line), and every later build of the same
release held to it. Why: the 2.32+ vLLM Neuron plugin leaves its compile stack (libtorch-neuronx-lite), transformers,
fastapi and others open, so a "2.32.0" venv built next month is not the one that was qualified; a drift stops the leg
with one line naming the package and both versions.

Run by a side's own interpreter, by path (``VENV/bin/python -I harness/release/resolved.py RECORD --release NAME``,
from ci/scripts/hold-resolved.sh, which ci/scripts/sdk-venv.sh calls): stdlib only, so it needs nothing but the
interpreter whose set it reads. It writes ``RESOLVED_FILE`` into the venv (``sys.prefix``), which the probe puts
into the verdict (``harness.release.probe``). Exit 0 (recorded, or held with no drift), 2 (a drift, or bad input)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

# Written into the venv: {"record", "release", "status", "packages"}; read by the probe.
RESOLVED_FILE = "carbon-harness-resolved.json"
# Not held: pip is the installer (sdk-venv.sh upgrades it at every build), never imported by a side's suite or server.
NOT_HELD = frozenset({"pip"})
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def canonical(name: str) -> str:
    """PEP 503's normalised name: ``Ml_Dtypes`` and ``ml-dtypes`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _editable(dist: metadata.Distribution) -> bool:
    """An editable install (the harness's checkout): named by its git sha elsewhere, not by a version."""
    try:
        told = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool(isinstance(told, dict) and (told.get("dir_info") or {}).get("editable"))


def installed_set(paths: list[str] | None = None) -> dict[str, str]:
    """name -> version of every distribution on ``paths`` (default: this interpreter's ``sys.path``), editable
    installs and ``NOT_HELD`` left out. Two copies of one name (a stray dist-info) are both kept, joined by '+'."""
    out: dict[str, str] = {}
    for dist in metadata.distributions(path=paths if paths is not None else sys.path):
        name = dist.metadata["Name"]
        if not name or canonical(name) in NOT_HELD or _editable(dist):
            continue
        key = canonical(name)
        out[key] = dist.version if key not in out or out[key] == dist.version else f"{out[key]}+{dist.version}"
    return out


def parse_set(text: str, where: str) -> dict[str, str]:
    """A recorded set (``name==version`` a line; ``#`` comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"{where}:{n}: {raw.strip()!r} is not name==version")
        out[canonical(m.group(1))] = m.group(2)
    return out


def format_set(packages: dict[str, str], header: str) -> str:
    return "".join(f"# {h}\n" for h in header.splitlines()) + "".join(f"{k}=={packages[k]}\n" for k in sorted(packages))


def drifts(recorded: dict[str, str], current: dict[str, str]) -> list[tuple[str, str | None, str | None]]:
    """(package, recorded version or None, this build's or None) for every package that differs, sorted by name."""
    return [(k, recorded.get(k), current.get(k)) for k in sorted(set(recorded) | set(current))
            if recorded.get(k) != current.get(k)]


def drift_line(release: str, record: Path, found: list[tuple[str, str | None, str | None]]) -> str:
    """One line: the first drift named with both versions, the rest counted and named, and what to do."""
    def one(d: tuple[str, str | None, str | None]) -> str:
        return f"{d[0]} {d[1] or '(absent)'} (recorded) -> {d[2] or '(absent)'} (this build)"

    more = f"; {len(found) - 1} more: " + ", ".join(one(d) for d in found[1:]) if len(found) > 1 else ""
    return (f"{release}: this build is not the one recorded in {record}: {one(found[0])}{more}. Pin the package in "
            f"the release's constraints file to the recorded version, or, to hold later builds to this one instead, "
            f"remove {record}")


def _write_atomic(path: Path, text: str) -> None:
    """Whole or not at all: a reader never sees half a record (stdlib only: this runs without the harness)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def hold(record: Path, release: str, prefix: Path, current: dict[str, str]) -> tuple[int, str]:
    """Record ``current`` where ``record`` does not exist, else compare; the outcome is written into the venv
    (``prefix``/``RESOLVED_FILE``) either way. Returns (exit status, one line)."""
    if record.exists():
        try:
            recorded = parse_set(record.read_text(), str(record))
        except (OSError, ValueError) as exc:
            return 2, f"{release}: the recorded set cannot be read ({exc}): fix or remove {record}"
        found = drifts(recorded, current)
        status = "held" if not found else "drift"
        line = (f"{release}: {len(current)} packages held to {record}" if not found
                else drift_line(release, record, found))
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        _write_atomic(record, format_set(current, f"The resolved set of {release}, recorded {stamp} from "
                                                  f"{prefix} (Python {sys.version.split()[0]}); later builds of "
                                                  f"{release} are held to it (harness/release/resolved.py)"))
        status, found = "recorded", []
        line = f"{release}: first build: {len(current)} packages recorded in {record}"
    _write_atomic(prefix / RESOLVED_FILE, json.dumps(
        {"record": str(record), "release": release, "status": status, "line": line, "packages": current,
         "drift": [list(d) for d in found]}, sort_keys=True) + "\n")
    return (2 if found else 0), line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="resolved.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("record", type=Path, help="the release's recorded set (written at its first build)")
    parser.add_argument("--release", required=True, help="the release's name, e.g. vllm-neuron-2.32.0")
    args = parser.parse_args(argv)
    code, line = hold(args.record, args.release, Path(sys.prefix), installed_set())
    print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
