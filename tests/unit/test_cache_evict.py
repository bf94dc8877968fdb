"""ci/scripts/cache-evict.sh evicts by last use (issue 30, item 5): on a real cache tree whose
artifacts were loaded recently and long ago, only the old go, even when every directory's atime was
just refreshed (as the script's own ``du`` and any listing of the cache do)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.backends.neuron.artifacts import KEY_FILE, LAST_USED_FILE, touch_last_used
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

SCRIPT = REPO / "ci" / "scripts" / "cache-evict.sh"
DAY = 86400


def artifact(cache: Path, name: str, built_days_ago: float, loaded_days_ago: float | None) -> Path:
    """A compiled-artifact directory as the engine leaves it: key file at build, last_used at load."""
    now = time.time()
    path = cache / name
    (path / "weights").mkdir(parents=True)
    (path / "weights" / "tp0_sharded_checkpoint.safetensors").write_bytes(b"\0" * 64)
    (path / KEY_FILE).write_text("{}")
    os.utime(path / KEY_FILE, (now, now - built_days_ago * DAY))
    if loaded_days_ago is not None:
        (path / LAST_USED_FILE).touch()
        os.utime(path / LAST_USED_FILE, (now, now - loaded_days_ago * DAY))
    os.utime(path, (now, now - built_days_ago * DAY))  # atime: just now, as after a `du`
    return path


def evict(cache: Path, days: str = "14") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(cache), days], capture_output=True, text=True, timeout=60)


def test_only_artifacts_loaded_long_ago_are_evicted(tmp_path):
    cache = tmp_path / "neuron"
    recent = artifact(cache, "recent", built_days_ago=60, loaded_days_ago=1)  # built long ago, loaded weekly
    old = artifact(cache, "old", built_days_ago=60, loaded_days_ago=30)
    legacy_old = artifact(cache, "legacy-old", built_days_ago=30, loaded_days_ago=None)  # before last_used
    legacy_new = artifact(cache, "legacy-new", built_days_ago=2, loaded_days_ago=None)
    r = evict(cache)
    assert r.returncode == 0, r.stderr
    assert recent.is_dir() and legacy_new.is_dir()
    assert not old.exists() and not legacy_old.exists()
    assert "2 artifact(s) evicted" in r.stdout


def test_a_load_refreshes_last_used(tmp_path):
    cache = tmp_path / "neuron"
    path = artifact(cache, "old", built_days_ago=60, loaded_days_ago=30)
    before = (path / LAST_USED_FILE).stat().st_mtime
    touch_last_used(path)
    assert (path / LAST_USED_FILE).stat().st_mtime > before + 29 * DAY
    assert evict(cache).returncode == 0 and path.is_dir()


@pytest.mark.parametrize("days", ["two", "-1", "1.5"])
def test_a_bad_day_count_is_refused_naming_it(tmp_path, days):
    r = evict(tmp_path, days)
    assert r.returncode == 2 and f"got '{days}'" in r.stderr
