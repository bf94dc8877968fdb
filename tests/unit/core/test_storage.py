"""Atomic writes and build-once under a lock, with real files and real processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.core.storage import (
    COMPLETE_MARKER,
    StorageError,
    atomic_dir,
    atomic_write_bytes,
    atomic_write_json,
    build_once,
    current_umask,
    is_complete,
)
from tests.unit.conftest import run_in_processes

pytestmark = pytest.mark.unit


def test_atomic_write_replaces_whole_file(tmp_path):
    p = atomic_write_json(tmp_path / "a" / "r.json", {"x": 1})
    assert p.read_text() == '{\n  "x": 1\n}\n'
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]


def test_atomic_dir_failure_leaves_destination_absent(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_refuses_non_empty_destination(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("keep")
    with pytest.raises(StorageError, match="not empty"):
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "g").write_text("new")
    assert (tmp_path / "d" / "f").read_text() == "keep"


def test_atomic_dir_fills_an_existing_empty_destination(tmp_path):
    (tmp_path / "d").mkdir()
    with atomic_dir(tmp_path / "d") as tmp:
        (tmp / "g").write_text("new")
    assert (tmp_path / "d" / "g").read_text() == "new" and is_complete(tmp_path / "d")


def test_a_write_that_fails_leaves_no_temporary_file_and_the_old_file_whole(tmp_path):
    path = atomic_write_json(tmp_path / "r.json", {"x": 1})
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "text, not bytes")  # fails inside the write, after the temporary file exists
    assert [f.name for f in tmp_path.iterdir()] == ["r.json"] and path.read_text() == '{\n  "x": 1\n}\n'


def test_the_umask_is_read_as_octal_without_changing_it():
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert os.umask(0o027) == 0o027  # still what was set: reading it changed nothing
    finally:
        os.umask(old)


def _build_into(dest: str, log: str) -> None:
    def build(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write("built\n")
        (tmp / "artifact").write_text("ok")

    build_once(Path(dest), build)


def test_parallel_builders_build_once(tmp_path):
    dest, log = tmp_path / "key", tmp_path / "log"
    assert run_in_processes(_build_into, (str(dest), str(log)), 4) == [0] * 4
    assert log.read_text() == "built\n"
    assert (dest / "artifact").read_text() == "ok" and is_complete(dest)


def test_partial_directory_is_rebuilt(tmp_path):
    dest = tmp_path / "key"
    dest.mkdir()
    (dest / "artifact").write_text("half")  # no completion marker: an interrupted build
    messages = []
    _, built = build_once(dest, lambda tmp: (tmp / "artifact").write_text("ok"), log=messages.append)
    assert built and (dest / "artifact").read_text() == "ok"
    assert "no completion marker" in messages[0]


def test_invalid_directory_is_rebuilt(tmp_path):
    dest = tmp_path / "key"
    build_once(dest, lambda tmp: (tmp / "artifact").write_text("bad"))

    def validate(d: Path) -> None:
        if (d / "artifact").read_text() != "ok":
            raise ValueError("artifact is corrupt")

    _, built = build_once(dest, lambda tmp: (tmp / "artifact").write_text("ok"), validate=validate)
    assert built and (dest / "artifact").read_text() == "ok" and (dest / COMPLETE_MARKER).exists()
    _, built_again = build_once(dest, lambda tmp: None, validate=validate)
    assert not built_again


def test_replace_keeps_the_old_directory_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    """A failure between atomic_dir's two renames (here: the second one fails, as on a full or
    read-only disk) puts the old directory back instead of losing it."""
    import harness.core.storage as storage

    dest = tmp_path / "out"
    with atomic_dir(dest) as tmp:
        (tmp / "f").write_text("old")
    real_replace = storage.os.replace

    def second_rename_fails(src, dst):
        if str(src).endswith(storage.PARTIAL_SUFFIX):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(storage.os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="No space left"):
        with atomic_dir(dest, replace=True) as tmp:
            (tmp / "f").write_text("new")
    monkeypatch.undo()
    assert (dest / "f").read_text() == "old" and is_complete(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no partial or old directory left
    with atomic_dir(dest, replace=True) as tmp:
        (tmp / "f").write_text("new")
    assert (dest / "f").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_build_once_removes_partials_of_killed_builders_only_for_its_key(tmp_path):
    dest = tmp_path / "key"
    killed = tmp_path / ".key.abc123.partial"
    killed.mkdir()
    other = tmp_path / ".key.v2.abc123.partial"  # a partial of the key "key.v2", not of "key"
    other.mkdir()
    messages = []
    build_once(dest, lambda tmp: (tmp / "artifact").write_text("ok"), log=messages.append)
    assert not killed.exists() and other.exists()
    assert "removed 1 stale partial build(s) of key" in messages[0]


def test_load_json_names_non_utf8_and_directories(tmp_path):
    from harness.core.storage import load_json

    bad = tmp_path / "b.json"
    bad.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=r"b.json: not valid JSON \(not UTF-8: byte 7\)"):
        load_json(bad)
    with pytest.raises(ValueError, match="is a directory"):
        load_json(tmp_path)
