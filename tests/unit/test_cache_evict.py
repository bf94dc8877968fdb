"""ci/scripts/cache-evict.sh evicts by last use (issue 30, item 5): on a real cache tree whose
artifacts were loaded recently and long ago, only the old go, even when every directory's atime was
just refreshed (as the script's own ``du`` and any listing of the cache do). Both compile caches (NxDI's
artifacts, vLLM Neuron's compile roots) are bounded together by size, least recently used first, and a leg
that would start without the disk it needs fails naming it (issue 39, item 4)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.backends.neuron.artifacts import KEY_FILE, LAST_USED_FILE, touch_last_used
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

SCRIPT = REPO / "ci" / "scripts" / "cache-evict.sh"
DAY = 86400


def artifact(cache: Path, name: str, built_days_ago: float, loaded_days_ago: float | None, kib: int = 0) -> Path:
    """A compiled-artifact directory as the engine leaves it: key file at build, last_used at load."""
    now = time.time()
    path = cache / name
    (path / "weights").mkdir(parents=True)
    (path / "weights" / "tp0_sharded_checkpoint.safetensors").write_bytes(os.urandom(64 + kib * 1024))
    (path / KEY_FILE).write_text("{}")
    os.utime(path / KEY_FILE, (now, now - built_days_ago * DAY))
    if loaded_days_ago is not None:
        (path / LAST_USED_FILE).touch()
        os.utime(path / LAST_USED_FILE, (now, now - loaded_days_ago * DAY))
    os.utime(path, (now, now - built_days_ago * DAY))  # atime: just now, as after a `du`
    return path


def evict(cache: Path, days: str = "14", *more: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--days", days, *more, str(cache)], capture_output=True, text=True,
                          timeout=60)


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
    assert "2 entries evicted" in r.stdout


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
    assert r.returncode == 2 and f"--days must be a whole number, got '{days}'" in r.stderr


def test_both_caches_are_bounded_together_least_recently_used_first(tmp_path):
    neuron, vllm = tmp_path / "neuron", tmp_path / "vllm"
    oldest = artifact(neuron, "a", built_days_ago=10, loaded_days_ago=9, kib=700)
    middle = artifact(vllm, "carbon-3b-smoke-vllm-neuron-0.29.0.1.2.0", built_days_ago=10, loaded_days_ago=5, kib=700)
    newest = artifact(neuron, "b", built_days_ago=10, loaded_days_ago=1, kib=700)
    # ~2 MiB under a 1 GiB bound, every entry used within the 14 days: nothing goes
    r = subprocess.run(["bash", str(SCRIPT), "--max-gb", "1", str(neuron), str(vllm)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "0 entries evicted" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(["bash", str(SCRIPT), "--max-gb", "0", str(neuron), str(vllm)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    evicted = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("evicting ")]
    assert evicted == [str(oldest), str(middle), str(newest)]  # least recently used first, across both caches
    assert "more than 0 GiB" in r.stdout


def test_a_leg_without_the_disk_it_needs_fails_naming_it_after_evicting_what_it_can(tmp_path):
    cache = tmp_path / "neuron"
    old = artifact(cache, "old", built_days_ago=3, loaded_days_ago=2)
    free_gib = shutil.disk_usage(tmp_path).free // 2**30
    r = evict(cache, "14", "--free-gb", str(free_gib + 10_000))
    assert r.returncode == 1 and not old.exists()
    assert f"the leg needs {free_gib + 10_000} GiB" in r.stderr and "::error::" in r.stderr
    r = evict(tmp_path / "absent", "14", "--free-gb", "1")  # no cache yet: the preflight alone
    assert r.returncode == 0, r.stderr
