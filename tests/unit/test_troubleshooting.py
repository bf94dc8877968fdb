"""docs/troubleshooting.md is generated from the harness's source (``ci/troubleshooting.py``, issue 41 item 4):
these tests keep it from going stale. The page must equal what the generator writes now; every error
message the scan finds must have a cause and a fix in ``ci/troubleshooting_causes.yaml``, and every entry
there must still be raised somewhere; and errors printed by the real code paths (a spec lookup, the
thresholds loader, the ``carbon-harness`` command line in a child process) must be found by the page's
matcher, so a user who pastes one lands on its entry. Reads source text only, plus a few cheap error paths
that import no torch or transformers."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

# ci/ is not a package: load the generator itself, as test_transformers_tests loads its script
_spec = importlib.util.spec_from_file_location("carbon_troubleshooting", REPO / "ci" / "troubleshooting.py")
assert _spec and _spec.loader
ts = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ts  # dataclasses look their module up while the class is built
_spec.loader.exec_module(ts)


@pytest.fixture(scope="module")
def entries():
    return ts.scan(REPO)


@pytest.fixture(scope="module")
def causes():
    return ts.load_causes(ts.CAUSES)


def test_the_scan_sees_the_harness_errors(entries):
    """An empty or broken scan would pass the other checks vacuously: known messages of each kind are in it."""
    keys = {k for _, k in entries}
    assert len(entries) > 400, len(entries)
    assert any(k.startswith("SpecError: unknown model <name>") for k in keys), sorted(keys)[:20]
    assert "usage: --acceptance needs --draft" in keys  # parser.error with an if/else message: both branches
    assert "usage: --draft needs --acceptance A (the expected draft-token acceptance rate, in [0, 1])" in keys
    assert "usage: carbon-harness <args.command>: error: <exc>" in keys  # print to stderr, then return 2
    assert any(k.startswith("message: <path> does not exist") for k in keys)  # a compiled_dir_problem reason


def test_every_error_has_a_cause_and_every_cause_an_error(entries, causes):
    problems = ts.problems(entries, causes)
    assert not problems, ("\n".join(problems) + "\n\nwrite the cause and fix of each new or reworded message in "
                          "ci/troubleshooting_causes.yaml (`python ci/troubleshooting.py --missing` prints stubs), "
                          "delete the entries of removed ones, then run `python ci/troubleshooting.py --write`")


def test_a_removed_or_uncovered_message_is_reported(entries, causes):
    """The check above can fail: a cause whose message is gone, and a message without a cause, are both named."""
    module, key = next(iter(causes))
    stale = {**causes, (module, key + " (reworded)"): {"cause": "c", "fix": "f"}}
    del stale[(module, key)]
    problems = ts.problems(entries, stale)
    assert any("raised nowhere" in p and "(reworded)" in p for p in problems), problems
    assert any("no cause/fix" in p and key in p for p in problems), problems
    assert any("needs both" in p for p in ts.problems(entries, {**causes, (module, key): {"cause": "c", "fix": " "}}))


def test_the_page_is_what_the_generator_writes(entries, causes):
    page = ts.render(entries, causes, ts.error_classes(REPO))
    assert ts.PAGE.read_text(encoding="utf-8") == page, (
        f"{ts.PAGE.relative_to(REPO)} is stale: run `{ts.COMMAND}` and commit the page")


@pytest.mark.parametrize("source, pattern", [
    ('raise SpecError(f"unknown model {name!r}; known: {\', \'.join(MODELS)}")', "unknown model <name>; known: <value>"),
    ('raise ValueError(f"{a.b:.2f} ms" + " over")', "<a.b> ms over"),
    ('raise ValueError("%s is %d" % (x, y))', "<value> is <value>"),
    ('msg = f"bad {x}"\nraise ValueError(msg)', "bad <x>"),
])
def test_a_message_becomes_a_pattern_with_placeholders(source, pattern):
    scanner = ts.Scanner("m.py")
    scanner.visit(ast.parse(f"def f():\n" + "\n".join("    " + line for line in source.splitlines())))
    assert ["".join(p if isinstance(p, str) else f"<{p.name}>" for p in parts) for _, _, parts, _ in scanner.found] \
        == [pattern]


def found(message: str, entries) -> str:
    entry = ts.find(message, entries)
    assert entry is not None, f"no entry of {ts.PAGE.name} matches the printed error {message!r}"
    return f"{entry.module}: {entry.key}"


def test_a_real_unknown_model_is_found(entries):
    from harness.core.spec import SpecError, get_model

    with pytest.raises(SpecError) as exc:
        get_model("carbon-hueg")
    assert found(str(exc.value), entries).startswith("harness/core/spec.py: SpecError: unknown model")


def test_a_real_thresholds_typo_is_found(entries, tmp_path):
    from harness.analysis.gates import ThresholdError, load_thresholds

    path = tmp_path / "typo.json"
    path.write_text(json.dumps({"schema": 1, "thresholds": [
        {"hardware": "*", "model": "*", "shape": "*", "metric": "tkg_ms_p50", "maxx": 3.0}]}))
    with pytest.raises(ThresholdError) as exc:
        load_thresholds([path])
    assert "'maxx'" in str(exc.value)
    assert found(str(exc.value), entries) == "harness/analysis/gates.py: ThresholdError: <where>: unknown field <field><value>; fields: <value>"


def test_real_command_line_errors_are_found(entries, capsys):
    """argparse's line (in-process: ``main`` exits 2 as the console script does) and a command's own
    ``error:`` line from a child ``carbon-harness`` process, exit status 2: each names the inner error's entry,
    not the wrapper's."""
    from harness.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--model", "carbon-tiny", "--shape", "smoke-typo"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and line.startswith("carbon-harness plan: error: argument --shape:"), line
    assert found(line, entries) == "harness/core/spec.py: SpecError: unknown shape <name>; known shapes: <value>"

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "harness.cli", "cost", "--hardware", "cpu", "--bp-per-s", "1000"],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and line.startswith("carbon-harness cost: error: "), (r.returncode, r.stderr)
    assert found(line, entries) == ("harness/cli.py: ValueError: hardware profile <profile.name> has no "
                                    "price_per_hour; pass --price-per-hour")
    wrapper = ts.find("carbon-harness cost: error: something no entry says", entries)
    assert wrapper is not None and wrapper.key == "usage: carbon-harness <args.command>: error: <exc>"


# flags of other tools that a fix may name: pytest's, pytest-benchmark's, vLLM's, neuron-ls's; --opt: the
# placeholder of a path option's own message
OTHER_TOOLS_FLAGS = {"--opt", "--junitxml", "--benchmark-json", "--benchmark-save-data", "--disable-log-stats",
                     "--speculative-config", "--json-output"}


def harness_flags() -> set[str]:
    """Every option the harness defines (argparse's add_argument, pytest's addoption), a per-side one
    (``f"--{side}-dtype"``) for both sides."""
    flags = set()
    for path in (REPO / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("add_argument", "addoption")):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    flags.add(arg.value)
                elif isinstance(arg, ast.JoinedStr) and len(arg.values) == 3:
                    head, _, tail = arg.values
                    if isinstance(head, ast.Constant) and head.value == "--" and isinstance(tail, ast.Constant):
                        flags |= {f"--{side}{tail.value}" for side in ("baseline", "candidate")}
    return flags


def test_every_flag_a_fix_names_is_one_the_harness_takes(causes):
    """Trust IV: the page's fixes named --carbon-variants, --carbon-drafts, --carbon-models and
    --carbon-concurrency, which the plugin rejects (its flags are singular; --carbon-max-concurrency)."""
    import re

    known = harness_flags() | OTHER_TOOLS_FLAGS
    assert {"--carbon-variant", "--serve-timeout", "--candidate-dtype"} <= known  # the scan reads what it must
    wrong = sorted({f"{flag} ({key[0]})" for key, entry in causes.items()
                    for text in (entry.get("cause") or "", entry.get("fix") or "")
                    for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text) if flag not in known})
    assert not wrong, wrong


def harness_commands() -> set[str]:
    """The CLI's subcommands (each ``add_parser`` name)."""
    names = set()
    for path in (REPO / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_parser" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names


def test_every_command_a_fix_names_is_one_the_cli_has(causes):
    """A command written as code (`` `carbon-harness NAME ...` ``) in a cause or fix is a real subcommand."""
    import re

    known = harness_commands()
    assert {"release-check", "vllm-serve", "plan"} <= known
    wrong = sorted({f"carbon-harness {name} ({key[0]})" for key, entry in causes.items()
                    for text in (entry.get("cause") or "", entry.get("fix") or "")
                    for name in re.findall(r"`carbon-harness ([a-z][a-z-]*)", text) if name not in known})
    assert not wrong, wrong
