"""Every path option of the harness in both spellings, in real pytest subprocesses run from the
checkout with no test path (as the docs' commands are): ``--opt=PATH`` keeps the project's
rootdir, pyproject.toml and benchmark names; ``--opt PATH`` with an existing path outside the
project, which pytest reads as a test path before plugins' options are known, stops at start
with one line naming the ``--opt=PATH`` form instead of running elsewhere."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.carbon.checkpoint import cached_checkpoint
from harness.plugin.rootdir import builtin_value_options, misread_values
from tests.unit.conftest import REPO, run_pytest

pytestmark = pytest.mark.unit

PATH_OPTIONS = ("--carbon-thresholds", "--carbon-model-root", "--carbon-cache-dir", "--carbon-nxdi-source",
                "--carbon-model", "--carbon-draft", "--carbon-remote-tokenizer", "--benchmark-json")


def option_values(tmp_path, cache_dir) -> dict[str, str]:
    """A real, valid value outside the project for each path option."""
    thresholds = tmp_path / "t.json"
    shutil.copy(REPO / "fixtures" / "thresholds" / "cpu.json", thresholds)
    checkpoint = cached_checkpoint("carbon-tiny", cache_dir, progress=None)
    (tmp_path / "models").mkdir()
    (tmp_path / "nxdi").mkdir()
    out = tmp_path / "o.json"
    out.write_text("{}")  # an existing file: the case that moved the rootdir
    return {"--carbon-thresholds": str(thresholds), "--carbon-model-root": str(tmp_path / "models"),
            "--carbon-cache-dir": str(cache_dir), "--carbon-nxdi-source": str(tmp_path / "nxdi"),
            "--carbon-model": str(checkpoint), "--carbon-draft": str(checkpoint),
            "--carbon-remote-tokenizer": str(checkpoint), "--benchmark-json": str(out)}


@pytest.mark.parametrize("option", PATH_OPTIONS)
def test_space_spelling_that_would_move_the_rootdir_stops_naming_the_equals_form(tmp_path, carbon_cache_dir, option):
    value = option_values(tmp_path, carbon_cache_dir)[option]
    r = run_pytest("-m", "perf", "-k", "test_latency", "--carbon-shape", "smoke", "--co", option, value,
                   cache_dir=carbon_cache_dir)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, r.stderr
    assert errors[0].startswith(f"ERROR: carbon-harness: pytest read the value of {option} {value} as a test path")
    assert f"instead of {REPO} with pyproject.toml: write {option}={value}" in errors[0]
    assert "collected" not in r.stdout


def test_equals_spelling_keeps_rootdir_config_and_benchmark_names(tmp_path, carbon_cache_dir):
    """Item 1's command with every path option: the project's rootdir and configfile, no unknown
    marks, and benchmark names as in a plain run. The nonexistent --benchmark-json target, spelled
    with a space as the docs do, moves nothing and is accepted."""
    values = option_values(tmp_path, carbon_cache_dir)
    out = tmp_path / "a.json"
    args = [f"{option}={value}" for option, value in values.items() if option != "--benchmark-json"]
    r = run_pytest("-m", "perf", "-k", "test_latency", "--carbon-shape", "smoke", "--carbon-runs", "1", *args,
                   "--benchmark-json", str(out), cache_dir=carbon_cache_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert f"rootdir: {REPO}\nconfigfile: pyproject.toml\n" in r.stdout
    assert "PytestUnknownMarkWarning" not in r.stdout + r.stderr
    names = sorted(b["fullname"] for b in json.loads(out.read_text())["benchmarks"])
    assert names == [f"tests/perf/test_latency.py::test_{k}[carbon-tiny-smoke]" for k in ("cte", "e2e", "tkg")]


def test_misread_values_pairs_each_value_with_its_option():
    args = ["-m", "perf", "--carbon-shape", "smoke", "--carbon-thresholds", "/tmp/t.json", "tests/perf"]
    early = ["smoke", "/tmp/t.json", "tests/perf"]  # pytest's parse with its builtin options only
    assert misread_values(args, early, ["tests/perf"]) == [("--carbon-shape", "smoke"),
                                                          ("--carbon-thresholds", "/tmp/t.json")]
    assert misread_values(args, ["tests/perf"], ["tests/perf"]) == []


@pytest.mark.parametrize("builtin", ["--basetemp", "-k"])
def test_misread_values_skips_a_value_that_a_builtin_option_consumed(builtin):
    """The same value after a builtin option and after a plugin option (``--basetemp DIR
    --carbon-cache-dir DIR``, ``-k smoke --carbon-shape smoke``): the misread one is the plugin's."""
    from _pytest.config import get_config

    parser = get_config()._parser
    args = [builtin, "smoke", "--carbon-shape", "smoke"]
    early = parser.parse_known_args(args).file_or_dir  # pytest's real early parse: its builtin options only
    assert early == ["smoke"]
    assert misread_values(args, early, [], builtin_value_options(parser)) == [("--carbon-shape", "smoke")]


@pytest.mark.parametrize("builtin, option", [("--basetemp", "--carbon-cache-dir"), ("-k", "--carbon-thresholds")])
def test_error_names_the_plugin_option_not_the_builtin_one_with_the_same_value(tmp_path, carbon_cache_dir, builtin,
                                                                                option):
    value = tmp_path / "outside"
    value.mkdir()
    r = run_pytest("--co", builtin, str(value), option, str(value), cache_dir=carbon_cache_dir)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, r.stderr
    assert errors[0].startswith(f"ERROR: carbon-harness: pytest read the value of {option} {value} as a test path")
    message, pointer = errors[0].rsplit(" (carbon-harness explain: ", 1)  # the line ends with its entry's anchor
    assert message.endswith(f"write {option}={value}") and pointer.startswith("docs/troubleshooting/run.md#")
