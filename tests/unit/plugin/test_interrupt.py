"""Ctrl-C during a timed benchmark, in a real pytest session that receives SIGINT mid-benchmark.

pytest-benchmark writes its JSON at session finish from whatever it holds: cut in its first round,
the interrupted benchmark has no rounds and the write was an internal error (``min()`` of an empty
sequence, ~100 lines); cut later, its cut-short rounds replaced the previous ``--benchmark-json`` as
if complete. Expected: pytest's "interrupted" exit 2, one line from the harness, the previous
JSON and saved runs untouched."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import child_env

pytestmark = pytest.mark.unit

# One finished benchmark, then one that, in round INTERRUPT_AT, says it is there (the file ``ready``)
# and waits for the signal.
BENCHMARK = '''
import pathlib
import signal

READY = pathlib.Path(__file__).with_name("ready")


def test_finished(benchmark):
    benchmark.pedantic(sum, args=(range(1000),), rounds=3)


def test_interrupted(benchmark):
    rounds = 0

    def step():
        nonlocal rounds
        rounds += 1
        if rounds == {interrupt_at}:
            READY.write_text(f"in round {{rounds}}")
            while True:
                signal.pause()

    benchmark.pedantic(step, rounds=5)
'''
PREVIOUS = '{"previous": "a good run"}\n'


def ctrl_c_reaches_python() -> None:
    """In the child before exec: SIGINT back to its default. A process started in the background by a
    non-interactive shell (``nohup ... &``, some CI runners) inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: the child would sleep through the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(path, proc: subprocess.Popen, limit_s: float = 600) -> None:
    """Until the child has written ``path`` (it is then inside the benchmarked function); a child
    that ends first, or never gets there, fails with its output."""
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the child never reached the benchmark's round (exit {proc.returncode}):\n{out[-3000:]}{err}")
        time.sleep(0.05)


@pytest.mark.parametrize("interrupt_at", [1, 3], ids=["first-round", "third-round"])
def test_ctrl_c_mid_benchmark_exits_2_with_one_line_and_writes_nothing(tmp_path, carbon_cache_dir, interrupt_at):
    (tmp_path / "test_cut.py").write_text(BENCHMARK.format(interrupt_at=interrupt_at))
    previous = tmp_path / "out.json"
    previous.write_text(PREVIOUS)
    storage = tmp_path / "storage"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--carbon-cache-dir={carbon_cache_dir}",
                             "test_cut.py", f"--benchmark-json={previous}", "--benchmark-autosave",
                             f"--benchmark-storage=file://{storage}"],
                            cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_python)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:] + err
    assert previous.read_text() == PREVIOUS  # not replaced by the cut-short run
    assert not list(storage.rglob("*.json"))  # nor saved
    assert "Traceback" not in out + err and "INTERNALERROR" not in out + err, out[-3000:] + err
    assert "test_interrupted" not in out  # no results table with the cut-short rounds
    ours = [line for line in out.splitlines() if line.startswith("carbon-harness: interrupted")]
    assert ours == ["carbon-harness: interrupted: no benchmark result written or compared, none of the interrupted "
                    f"benchmark's rounds recorded or gated; --benchmark-json {previous} and --benchmark-save / "
                    "--benchmark-autosave storage left as it was"]
    assert out.rstrip().splitlines()[-1] == ours[0]  # the last word of the run
