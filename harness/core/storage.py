"""Atomic files and directories, and the cache lock.

A benchmark harness that crashes (or is killed by CI) half-way must never leave a result or an
artifact that looks complete: everything is written beside its destination and renamed into
place, and a directory counts as complete only when its ``.complete`` marker exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

COMPLETE_MARKER = ".complete"
PARTIAL_SUFFIX = ".partial"


class StorageError(OSError):
    """A path cannot be written; the message names it and why."""


def ensure_writable_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create directory {path}: {exc.strerror or exc}") from exc
    if not os.access(path, os.W_OK):
        raise StorageError(f"directory {path} is not writable: give a directory you can write (its --out or "
                           "--carbon-cache-dir option), or fix its permissions")


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``os.umask`` can only
    set it: setting and restoring would open a window in which another thread creates files 0666)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def open_mode(path: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would leave: an existing file keeps its own,
    a new one gets 0666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it and rename it into place, with
    the mode a plain ``open()`` would give (mkstemp makes 0600 files: evidence such as a report or
    a thresholds file is for sharing, and a CI job uploading it as another user must read it)."""
    path = Path(path)
    ensure_writable_dir(path.parent)
    mode = open_mode(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def load_json(path: str | Path, error: type[Exception] = ValueError, what: str = "file") -> Any:
    """Parse a JSON file; a missing or malformed one raises ``error`` naming the path and line."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory, not a JSON file") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid JSON (not UTF-8: byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).is_file()


@contextmanager
def atomic_dir(dest: str | Path, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside ``dest``; on success mark it complete and rename it to
    ``dest``. On any error the temporary directory is removed and ``dest`` is untouched: with
    ``replace`` the old ``dest`` is moved aside, the new one renamed in, and only then the old one
    deleted; if the second rename fails the old one is put back."""
    dest = Path(dest)
    ensure_writable_dir(dest.parent)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=PARTIAL_SUFFIX))
    try:
        yield tmp
        (tmp / COMPLETE_MARKER).write_text("")
        if dest.exists():
            if not replace and any(dest.iterdir()):
                raise StorageError(f"{dest} already exists and is not empty")
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".old"))
            os.replace(dest, old)
            try:
                os.replace(tmp, dest)
            except BaseException:
                os.replace(old, dest)  # restore: --out must never be lost
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def exclusive_lock(dest: str | Path, busy: str) -> Iterator[None]:
    """Hold the lock of ``dest`` (a hidden file beside it) or fail at once with ``busy``: for
    commands a user runs, where waiting silently for another writer would hide the race."""
    from filelock import FileLock, Timeout

    dest = Path(dest)
    ensure_writable_dir(dest.parent)
    lock = FileLock(str(dest.parent / f".{dest.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise StorageError(f"{busy} (lock {lock.lock_file} is held)") from None
    try:
        yield
    finally:
        lock.release()


def remove_stale_partials(dest: str | Path, log: Callable[[str], None] | None = None) -> list[Path]:
    """Delete the temporary directories of builds of ``dest`` that were killed (``.NAME.*.partial``
    and ``.NAME.*.old``). Call only while holding ``dest``'s lock: every live builder of ``dest``
    holds it, so whatever is left is from a dead one."""
    dest = Path(dest)
    removed = []
    for pattern in (f".{dest.name}.*{PARTIAL_SUFFIX}", f".{dest.name}.*.old"):
        for stale in dest.parent.glob(pattern):
            middle = stale.name[len(dest.name) + 2:].rsplit(".", 1)[0]  # mkdtemp's random part: no dots
            if stale.is_dir() and "." not in middle:
                shutil.rmtree(stale, ignore_errors=True)
                removed.append(stale)
    if removed and log:
        log(f"removed {len(removed)} stale partial build(s) of {dest.name} left by a killed build")
    return removed


def build_once(dest: Path, build: Callable[[Path], None], validate: Callable[[Path], None] | None = None,
               log: Callable[[str], None] = lambda _: None) -> tuple[Path, bool]:
    """Build ``dest`` with ``build(tmpdir)`` unless a complete, valid copy exists.

    A file lock beside ``dest`` makes concurrent workers (pytest-xdist, parallel CI jobs on a
    shared cache) wait for one builder instead of building the same key twice. A directory with
    no completion marker, or one that ``validate`` rejects, is treated as corrupt and rebuilt.
    Returns (path, built_now).
    """
    from filelock import FileLock

    ensure_writable_dir(dest.parent)
    with FileLock(str(dest) + ".lock"):
        remove_stale_partials(dest, log)
        if dest.exists():
            reason = None
            if not is_complete(dest):
                reason = "no completion marker (an interrupted build)"
            elif validate is not None:
                try:
                    validate(dest)
                except Exception as exc:  # any validation failure means: rebuild
                    reason = str(exc)
            if reason is None:
                return dest, False
            log(f"rebuilding {dest}: {reason}")
            shutil.rmtree(dest)
        with atomic_dir(dest) as tmp:
            build(tmp)
        return dest, True


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def refuse_existing_out(out: Path, force: bool, what: str) -> None:
    """A written file (a golden, a thresholds file) replaces what others compare against: only with --force."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory: give the {what} file to write")
    if out.exists() and not force:
        raise ValueError(f"--out {out} exists: refusing to overwrite it; pass --force to replace it")


def refuse_overwrite(inputs: Sequence[Path], outputs: dict[str, Path | None]) -> None:
    """An output option naming one of the inputs would destroy it: refuse before reading anything."""
    for option, out in outputs.items():
        if out is None:
            continue
        for src in inputs:
            if out.resolve() == src.resolve() or (out.exists() and src.exists() and out.samefile(src)):
                raise ValueError(f"{option} {out} is the input file {src}: refusing to overwrite it; "
                                 "write to another path")
