"""What the test suites share, defined once: the checkout under test, the command line and child
pytest sessions run as real subprocesses, the option values a session is configured from, and the
prompts the speculative lossless checks send."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.carbon.dna import batch_suite
from harness.core.errors import BackendCannot
from harness.core.paths import REPO_ROOT
from harness.release.children import child_env


def checkout_under_test(tests_dir: Path, harness_root: Path) -> Path:
    """The checkout these tests belong to, which must be the one whose ``harness`` is imported:
    pytest's console script loads the plugin through the installed entry point, so in a second clone
    the tests would otherwise exercise another tree's code while reading this tree's fixtures."""
    here = tests_dir.resolve().parent
    if here != harness_root.resolve():
        raise RuntimeError(f"the tests in {here} import the harness package of {harness_root}: run "
                           f"`python -m pytest` from {here}, or install it with `pip install -e {here}`")
    return harness_root


REPO = checkout_under_test(Path(__file__).parent, REPO_ROOT)
# A release check planned for a Trn2 instance whose sides stand in for the device on this CPU rehearses the device's bf16
# and runs the fp32 leg beside it (harness.release.legs.rehearsed); the tests of other things pin the sides' fp32,
# one leg, as they ran before (the legs' own: tests/unit/release/test_rehearsed_legs.py, test_contract_legs_release.py)
FP32 = ("--dtype", "fp32")


def ci_run_commands(root: Path = REPO) -> list[str]:
    """The commands .ci/run runs, less the shell preamble (shebang, comments, set, cd)."""
    lines = [line.strip() for line in (root / ".ci" / "run").read_text().splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]


def run_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """``carbon-harness ARGS`` as a user runs it: a fresh interpreter, text output captured, in the
    environment of this process less what the outer pytest run set (``child_env``) unless ``env``."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=child_env() if env is None else env)


def start_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``carbon-harness ARGS`` started and left running (for concurrent writers), pipes as text."""
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env() if env is None else env)


def run_pytest(*args: str, cache_dir: Path, cwd: Path = REPO, preexec_fn=None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """A child pytest session as a user starts one: its own cache dir (so it never builds into the
    user's), no cache provider, and none of the outer run's xdist or pytest variables (``child_env``)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--carbon-cache-dir={cache_dir}", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=child_env(),
                          preexec_fn=preexec_fn)


def plugin_options(**overrides: Any) -> dict[str, Any]:
    """The option values ``pytest_configure`` hands ``make_config``, at the plugin's defaults except
    where a default would read the host or the environment: the hardware is ``cpu`` (not detected),
    the cache dir and the NxDI source ignore $CARBON_CACHE_DIR and $CARBON_NXDI_SOURCE."""
    defaults = {"backend": "hf", "models": None, "model_root": None, "shapes": None, "device": "auto", "dtype": "auto",
                "cache_dir": "~/.cache/carbon-harness", "thresholds": None, "hardware": "cpu", "runs": 5, "warmup": 1,
                "variants": None, "cores_per_worker": None, "cpu_threads": None, "neuron_cpu": False, "nxdi_source": None, "drafts": None,
                "speculation_length": 4, "endpoint": None, "served_model": None, "serve": None, "serve_timeout": 600,
                "hf_compile": False, "work_counts": "on"}
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise KeyError(f"not a plugin option: {', '.join(unknown)} (known: {', '.join(defaults)})")
    return {**defaults, **overrides}


def lossless_prompts() -> list[str]:
    """Four prompts, DNA and text, of four different token lengths: batched, every row is padded
    differently, which is where a speculative loop that mixes up rows or positions shows."""
    dna = [c.prompt for c in batch_suite(60, 2)]
    return [dna[0], "<dna>ACGTAC", "Carbon <dna>" + "CAG" * 30, dna[1][:40]]


@contextmanager
def skip_when_backend_cannot(what: str) -> Iterator[None]:
    """Skip the test when the engine call inside raises the backends' ``BackendCannot`` ("cannot do
    this here"); any other error, a plain NotImplementedError (a bug) included, fails it. Wrap only the
    engine call, never a gate."""
    import pytest  # tests/helpers.py is imported by subprocess helpers too: pytest only where a test skips

    try:
        yield
    except BackendCannot as exc:
        pytest.skip(f"{what}: {exc}")


# --- scoring on a backend against hf: the same checks for neuron's scoring build and a server's view ---------

SCORE_RTOL = 1e-5  # fp32 on both sides; scores are sums over up to 1,530 bases


def assert_variant_scores_agree(got_engine: Any, want_engine: Any, tokenizer: Any, window: Any, variants: Any) -> None:
    import pytest

    from harness.workloads.scoring import score_variants

    got = score_variants(got_engine, tokenizer, window, variants)
    want = score_variants(want_engine, tokenizer, window, variants)
    assert [s.variant for s in got.scores] == [s.variant for s in want.scores]
    for g, w in zip(got.scores, want.scores):
        assert (g.ref_log_prob, g.alt_log_prob) == pytest.approx((w.ref_log_prob, w.alt_log_prob), rel=SCORE_RTOL)
        assert (g.window_ll_ref, g.window_ll_alt) == pytest.approx((w.window_ll_ref, w.window_ll_alt), rel=SCORE_RTOL)


def assert_scan_agrees(got_engine: Any, want_engine: Any, tokenizer: Any, window: Any, trim: int) -> None:
    """A scan of ``window`` less its last ``trim`` bases: every base scored, a trailing partial 6-mer's included."""
    from dataclasses import replace

    import numpy as np

    from harness.workloads.scoring import scan_window

    window = replace(window, sequence=window.sequence[: len(window.sequence) - trim])
    got, want = scan_window(got_engine, tokenizer, window), scan_window(want_engine, tokenizer, window)
    assert got.log_probs.shape == (len(window.sequence),)
    np.testing.assert_allclose(got.log_probs, want.log_probs, rtol=SCORE_RTOL, atol=1e-6)


def assert_sequence_scores_agree(got_engine: Any, want_engine: Any, tokenizer: Any) -> None:
    """bp-level scores of sequences ending 0, 1 and 2 bases past a whole 6-mer."""
    from harness.carbon.dna import prompt_suite
    from harness.workloads.scoring import score_sequences

    seqs = [c.sequence[: 120 + 7 * i] for i, c in enumerate(prompt_suite(180)[:3])]
    assert_same_sequence_scores(score_sequences(got_engine, tokenizer, seqs), score_sequences(want_engine, tokenizer, seqs))


def assert_same_sequence_scores(got: list[Any], want: list[Any]) -> None:
    """Every sequence scored on both sides, in order, with the same per-base probabilities: a side that
    drops a sequence fails (``zip`` alone would compare the common prefix and pass)."""
    import numpy as np

    assert [g.sequence for g in got] == [w.sequence for w in want], (
        f"scored {len(got)} sequences, expected {len(want)}: the sequences differ or one is missing")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.base_probs, w.base_probs, rtol=SCORE_RTOL)
