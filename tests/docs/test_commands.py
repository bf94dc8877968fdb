"""Every shell block of README.md and docs/ is tested as its marker says (tests/docs/blocks.py): a renamed
option, marker, session, extra or path fails here, naming the page's line, instead of going stale.

Cost (2-core box): the pytest lines' parse and collection share one process (``pytest_results``, about
15 s to start and 2-5 s a collection); each run line is a fresh process (``carbon-harness`` starts in 2-10 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import CI, EXTENDED, KINDS, MARKER_HELP, RETIRED, Block, Command, blocks, expected_pieces, pages
from tests.docs.clis import expand_glob, expand_home, invocation, missing_paths, nox_default_sessions, option_error
from tests.docs.needs import collect_skip_reason
from tests.docs.output import pieces_missing, shown_lines, unmatched
from tests.helpers import ci_run_commands

pytestmark = pytest.mark.docs

REPO = Path(__file__).resolve().parents[2]
BLOCKS = [b for page in pages(REPO) for b in blocks(page, REPO)]
SHELL = [b for b in BLOCKS if b.shell]
COMMANDS = [(b, c) for b in SHELL if b.kind in ("run", "device-only") for c in b.commands]
PYTEST = [(b, c) for b, c in COMMANDS if invocation(c.text).program == "pytest"]
RUN_TIMEOUT_S = 1800  # CI's run lines take seconds; a hang fails within the suite's own 1800 s
# An extended line is a whole job: the contract zoo's 22 release checks took over 30 minutes on half of this box's
# 2 cores (2026-11-27), so an extended run gets 3 hours, its test as long (pytest-timeout's mark).
EXTENDED_TIMEOUT_S = 3 * 3600


def param(block: Block, command: Command):
    return pytest.param(block, command, id=command.where)


def long_param(*values, where: str, extended: bool):
    """A run: ``extended`` ones (``<!-- run: extended -->``) only where ``-m`` selects extended (tests/docs/conftest.py)."""
    marks = [pytest.mark.extended, pytest.mark.timeout(EXTENDED_TIMEOUT_S + 60)] if extended else []
    return pytest.param(*values, id=where, marks=marks)


def argv_here(command: Command) -> list[str]:
    return [expand_home(token) for token in invocation(command.text).args]


def test_the_pages_hold_shell_blocks_of_each_kind():
    """An empty parametrization passes by skipping: the collector finds the pages' blocks."""
    assert (REPO / "README.md").is_file()
    assert len(SHELL) >= 10, [b.where for b in SHELL]
    assert {b.kind for b in SHELL} >= {"run", "device-only"}, sorted({str(b.kind) for b in SHELL})
    assert {b.detail for b in SHELL if b.kind == "run"} >= {"", EXTENDED, CI}


@pytest.mark.parametrize("block", SHELL, ids=[b.where for b in SHELL])
def test_every_shell_block_says_how_it_is_tested(block: Block):
    assert block.kind != RETIRED, (
        f"{block.where}: <!-- check --> (parsed, never run) is gone: every CPU command of the docs runs. Mark it "
        f"<!-- run --> (seconds), <!-- run: extended --> (a whole job: nox -s release-extended runs it), or "
        f"<!-- device-only: WHAT THE HOST NEEDS -->")
    assert block.kind in KINDS and block.kind != "output", (
        f"{block.where}: a ```{block.language} block without a marker: put {MARKER_HELP}")
    assert block.commands, f"{block.where}: a ```{block.language} block with no command in it"
    if block.kind == "device-only":
        assert len(block.detail.split()) >= 3, (
            f"{block.where}: <!-- device-only: ... --> must say what the host needs (a Trn2 host with the Neuron "
            f"SDK, a CUDA GPU, the published weights...), not {block.detail!r}")
    else:
        assert block.detail in ("", EXTENDED, CI), (
            f"{block.where}: <!-- run: {block.detail} -->: give run, run: extended or run: ci")


# renamed options and markers planted in a docs pytest line: the parse must fail, naming them
PLANTS = {"option": (["-m", "perf", "--carbon-shap", "smoke"], "--carbon-shap"),
          "marker": (["-m", "perff or compat"], "perff"),
          "value": (["-m", "perf", "--carbon-runs", "none"], "--carbon-runs")}


def job_id(mode: str, argv: list[str]) -> str:
    return f"{mode} {json.dumps(argv)}"


@pytest.fixture(scope="module")
def pytest_results(tmp_path_factory) -> dict[str, dict]:
    """Every docs pytest line parsed, and those of run blocks collected, in one worker process."""
    jobs: dict[str, dict] = {}  # a line the pages repeat (README's and a page's) is parsed and collected once
    for block, command in PYTEST:
        argv = argv_here(command)
        jobs.setdefault(job_id("parse", argv), {"id": job_id("parse", argv), "args": argv, "mode": "parse"})
        if block.kind != "device-only" and not collect_skip_reason(argv, REPO):
            jobs.setdefault(job_id("collect", argv), {"id": job_id("collect", argv), "args": argv, "mode": "collect"})
    jobs = list(jobs.values())
    jobs += [{"id": f"plant {name}", "args": args, "mode": "parse"} for name, (args, _) in PLANTS.items()]
    work = tmp_path_factory.mktemp("docs-pytest")
    (work / "jobs.json").write_text(json.dumps(jobs))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "tests.docs.pytest_worker", str(work / "jobs.json"),
                           str(work / "results.json")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, f"the docs' pytest worker failed: {done.stderr[-4000:]}"
    return {r["id"]: r for r in json.loads((work / "results.json").read_text())}


@pytest.mark.parametrize("block,command", [param(b, c) for b, c in COMMANDS])
def test_command_options_parse(block: Block, command: Command, request):
    """The options of every command go through the real parser of its CLI, whatever its block's marker."""
    where = f"{command.where}: `{command.text}`"
    try:
        call = invocation(command.text)
    except ValueError as exc:
        pytest.fail(f"{where}: not a shell command line: {exc}")
    if call.program is None:
        assert block.kind == "device-only", (
            f"{where}: this checkout has no parser for `{(call.tokens or ('',))[0]}`: mark the block "
            f"<!-- device-only: WHAT THE HOST NEEDS --> if it needs another host, or write the command with "
            f"carbon-harness / pytest / nox / pip / python -m harness...")
        return
    missing = missing_paths(call, REPO)
    assert not missing, f"{where}: names {', '.join(missing)}, not in this checkout"
    if call.program == "pytest":
        result = request.getfixturevalue("pytest_results")[job_id("parse", argv_here(command))]
        assert result["rc"] == 0, f"{where}: pytest rejects it (exit {result['rc']}):\n{result['output'][-2000:]}"
        return
    error = option_error(call, REPO)
    assert not error, f"{where}: {error}"


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_rename_fails_the_pytest_parse(plant: str, pytest_results):
    """The gate can fail: a pytest line with a renamed option, marker or a bad value is rejected, by name."""
    result, named = pytest_results[f"plant {plant}"], PLANTS[plant][1]
    assert result["rc"] == 4 and named in result["output"], result


@pytest.mark.parametrize("block,command", [param(b, c) for b, c in PYTEST if b.kind != "device-only"])
def test_pytest_command_selects_tests(block: Block, command: Command, pytest_results):
    """A run block's pytest line collects (the plugin configured, as for a run) and selects tests."""
    reason = collect_skip_reason(argv_here(command), REPO)
    if reason:
        pytest.skip(f"{command.where}: parsed, not collected here: {reason}")
    result = pytest_results[job_id("collect", argv_here(command))]
    where = f"{command.where}: `{command.text}`"
    assert result["rc"] == 0, f"{where}: --collect-only exits {result['rc']}:\n{result['output'][-3000:]}"
    assert result["selected"], f"{where}: selects no test:\n{result['output'][-1500:]}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A copy of the checkout's tracked files, where run lines run (they write what they write there);
    ``../shared`` beside it where the checkout has one (the docs' ``../shared/vendor``), and its ``.nox``."""
    base = tmp_path_factory.mktemp("docs-run")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    copy = base / "checkout"
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    if (REPO.parent / "shared").is_dir():
        (base / "shared").symlink_to(REPO.parent / "shared")
    if (REPO / ".nox").is_dir():  # the venvs a page's command names (.nox/serving/bin/python), as nox built them
        (copy / ".nox").symlink_to(REPO / ".nox")
    (base / "tmp").mkdir()
    return copy


RAN: dict[str, subprocess.CompletedProcess] = {}  # a command the pages repeat runs once (it may write a fixed --out)


def run_once(command: Command, copy: Path, timeout_s: int = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    if command.text not in RAN:
        RAN[command.text] = run_here(command, copy, timeout_s)
    return RAN[command.text]


def run_here(command: Command, copy: Path, timeout_s: int = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """The command, as a subprocess in the scratch copy: its programs through this interpreter, ``/tmp/X``
    paths under the scratch directory's own tmp/, ``~``, ``$HOME`` and globs (``stream-*.json``) expanded as a
    shell would."""
    call = invocation(command.text)
    # a page's /tmp/X is the scratch copy's; a path that exists already (this interpreter, when the checkout
    # itself lies under /tmp, as a CI clone may) is kept as it is
    argv = [expand_home(a).replace("/tmp/", f"{copy.parent}/tmp/", 1) if a.startswith("/tmp/") and not (
        i == 0 or os.path.exists(a)) else expand_home(a) for i, a in enumerate(call.argv())]
    argv = argv[:1] + [word for a in argv[1:] for word in expand_glob(a, copy)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(call.env)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr in one stream, in the order a terminal shows them
    return subprocess.run(argv, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout_s)


@pytest.mark.parametrize("block,command", [long_param(b, c, where=c.where, extended=b.extended)
                                           for b, c in COMMANDS if b.kind == "run" and b.detail != CI])
def test_run_command(block: Block, command: Command, scratch: Path):
    done = run_once(command, scratch, EXTENDED_TIMEOUT_S if block.extended else RUN_TIMEOUT_S)
    printed = done.stdout
    where = f"{command.where}: `{command.text}`"
    said = " or ".join(map(str, command.exit_statuses))
    assert done.returncode in command.exit_statuses, f"{where}: exit {done.returncode}, the page says {said}:\n{printed[-3000:]}"
    missing = pieces_missing([p for line in command.expect for p in expected_pieces(line)], printed)
    assert not missing, f"{where}: the page shows output it did not print: {missing}\nit printed:\n{printed[-3000:]}"


def ci_commands(root: Path) -> set[str]:
    """What CI runs: ``.ci/run``'s command lines, and ``nox -s S`` for each session ``nox`` runs by default."""
    return set(ci_run_commands(root)) | {f"nox -s {name}" for name in nox_default_sessions(root)}


def test_ci_run_has_the_lines_and_sessions_the_ci_blocks_name():
    """The reader of ``ci_commands`` finds what it must, so a ``run: ci`` block cannot pass on an empty set."""
    ran = ci_commands(REPO)
    assert "nox" in ran and "nox -s trn2-stack" in ran and any(c.startswith("pip install") for c in ran), ran


@pytest.mark.parametrize("block,command", [param(b, c) for b, c in COMMANDS if b.kind == "run" and b.detail == CI])
def test_ci_block_commands_are_what_ci_runs(block: Block, command: Command):
    ran = ci_commands(REPO)
    assert command.text in ran, (f"{command.where}: `{command.text}` is marked <!-- run: ci --> but CI does not run "
                                 f"it; CI runs: {sorted(ran)}")


OUTPUTS = [b for b in BLOCKS if b.kind == "output"]


@pytest.mark.parametrize("block", [long_param(b, where=b.where, extended=b.extended) for b in OUTPUTS])
def test_output_block(block: Block, scratch: Path):
    """A page's sample output, from the command its marker names, matched loosely (tests/docs/output.py)."""
    shown = Command(block.page, block.line, block.output_command)
    done = run_once(shown, scratch)
    printed = done.stdout
    assert done.returncode == 0, f"{block.where}: `{shown.text}` exits {done.returncode}:\n{printed[-3000:]}"
    missing = unmatched(shown_lines(block.body), printed)
    assert not missing, (f"{block.where}: the page shows lines `{shown.text}` no longer prints: {missing}\n"
                         f"it printed:\n{printed[-4000:]}")
