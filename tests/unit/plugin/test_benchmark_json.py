"""--benchmark-json is checked at start and written atomically: a failed write (here a real
EFBIG from a file-size limit, as a full disk gives ENOSPC) leaves the previous file as it was and
fails the session with one line."""

from __future__ import annotations

import argparse
import json
import resource
import signal

import pytest

from harness.plugin.benchmark_json import BenchmarkJsonTarget, parse_benchmark_json
from tests.helpers import run_pytest

pytestmark = pytest.mark.unit

PREVIOUS = '{"benchmarks": [], "previous": "the last good run"}\n'

ONE_BENCHMARK = '''
def test_sum(benchmark):
    benchmark.extra_info["payload"] = "x" * 4096
    assert benchmark.pedantic(sum, args=(range(1000),), rounds=3) == 499500
'''


def limit_file_size() -> None:
    """In the child: files may not grow past 2 KiB (writes beyond fail with EFBIG, as on a full
    disk; the signal that would kill the process is ignored, and stays ignored across exec)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def test_failed_write_keeps_the_previous_file_and_fails_with_one_line(tmp_path, carbon_cache_dir):
    (tmp_path / "test_one.py").write_text(ONE_BENCHMARK)
    out = tmp_path / "out.json"
    out.write_text(PREVIOUS)
    r = run_pytest("--rootdir", str(tmp_path), "test_one.py", "--benchmark-json", str(out),
                   cache_dir=carbon_cache_dir, cwd=tmp_path, preexec_fn=limit_file_size)
    output = r.stdout + r.stderr
    assert out.read_text() == PREVIOUS
    assert r.returncode == 1, output
    assert "1 passed" in output
    assert (f"carbon-harness: --benchmark-json {out} was not written (File too large); the previous file, if any, "
            f"is unchanged") in output
    assert "Traceback" not in output and "INTERNALERROR" not in output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.json")] == []  # no temporary left


def test_target_replaces_the_file_only_when_complete(tmp_path):
    out = tmp_path / "out.json"
    out.write_text(PREVIOUS)
    target = parse_benchmark_json(str(out))
    with pytest.raises(RuntimeError), target as fh:
        fh.write(b'{"benchmarks": [')
        raise RuntimeError("serialisation failed half-way")
    assert out.read_text() == PREVIOUS
    with target as fh:
        fh.write(json.dumps({"benchmarks": []}).encode())
    assert json.loads(out.read_text()) == {"benchmarks": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def under_a_file(d):
    (d / "file").write_text("")
    return d / "file" / "out.json"


@pytest.mark.parametrize("make,message", [
    (under_a_file, "file is not a directory"),
    (lambda d: d / "missing" / "out.json", "does not exist"),
    (lambda d: d, "is a directory; give a file path such as"),
])
def test_unwritable_target_is_a_usage_error_at_start(tmp_path, make, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_benchmark_json(str(make(tmp_path)))
    assert isinstance(parse_benchmark_json(str(tmp_path / "new.json")), BenchmarkJsonTarget)
    with pytest.raises(argparse.ArgumentTypeError, match="'' is not a file path"):
        parse_benchmark_json("")

