"""docs/troubleshooting.md and harness/data/troubleshooting.json are generated from the harness's source
(``ci/troubleshooting.py``, issues 41 and 50): these tests keep them from going stale and hold the page to
one entry per message a user can see. The page and the data must equal what the generator writes now; every
error message the scan finds must have a cause and a fix in ``ci/troubleshooting_causes.yaml``, and every
entry there must still be raised somewhere; each entry has its own anchor, the same from one regeneration to
the next; a message raised in several places is one entry; and no heading is only placeholders.

``carbon-harness explain`` (``harness.core.troubleshooting``) must find the entry of real errors from the real
code paths, whole or as a fragment: the issue's four (a vLLM server that is never ready, a NeuronCore plan
that does not fit, a typo in a thresholds file, an unknown model on the command line), each produced here as
a user meets it; and the command's one error line ends with its entry's anchor. Reads source text, plus a few
cheap error paths that import no torch or transformers (the vLLM one starts a shell standing in for vLLM,
which never answers, and gives it no time)."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import sys
import tomllib

import pytest

from harness.core import troubleshooting as tr
from tests.helpers import REPO
from tests.pasted_errors import FOUR, entry_of, pasted, unknown_model

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


@pytest.fixture(scope="module")
def built(entries, causes):
    return ts.items(entries, causes)


def test_the_scan_sees_the_harness_errors(entries):
    """An empty or broken scan would pass the other checks vacuously: known messages of each kind are in it."""
    keys = {k for _, k in entries}
    assert len(entries) > 400, len(entries)
    assert any(k.startswith("SpecError: unknown model <name>") for k in keys), sorted(keys)[:20]
    assert "usage: --acceptance needs --draft" in keys  # parser.error with an if/else message: both branches
    assert "usage: --draft needs --acceptance A (the expected draft-token acceptance rate, in [0, 1])" in keys
    # print to stderr, then return 2; the pointer the line ends with is not part of the message
    assert "usage: carbon-harness <args.command>: error: <exc>" in keys
    assert "UsageError: carbon-harness: <exc>" in keys
    assert any(k.startswith("message: <path> does not exist") for k in keys)  # a compiled_dir_problem reason


def test_every_error_has_a_cause_and_every_cause_an_error(entries, causes):
    problems = ts.problems(entries, causes)
    assert not problems, ("\n".join(problems) + "\n\nwrite the cause and fix of each new or reworded message in "
                          "ci/troubleshooting_causes.yaml (`python ci/troubleshooting.py --missing` prints stubs), "
                          "delete the entries of removed ones, then run `python ci/troubleshooting.py --write`")


def test_a_removed_or_uncovered_message_is_reported(entries, causes):
    """The check above can fail: a cause whose message is gone, a message without a cause, a cause without a
    fix, and a key or group the page does not know are each named."""
    module, key = next(iter(causes))
    stale = {**causes, (module, key + " (reworded)"): {"cause": "c", "fix": "f"}}
    del stale[(module, key)]
    problems = ts.problems(entries, stale)
    assert any("raised nowhere" in p and "(reworded)" in p for p in problems), problems
    assert any("no cause/fix" in p and key in p for p in problems), problems
    assert any("needs both" in p for p in ts.problems(entries, {**causes, (module, key): {"cause": "c", "fix": " "}}))
    odd = {**causes, (module, key): {"cause": "c", "fix": "f", "titel": "t", "group": "lunch"}}
    assert [p for p in ts.problems(entries, odd) if "'titel'" in p or "'lunch'" in p], ts.problems(entries, odd)


def test_the_page_and_its_data_are_what_the_generator_writes():
    _, files = ts.outputs(REPO)
    for path, text in files.items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO)} is stale: run `{ts.COMMAND}` and commit it with the page")


def test_the_data_ships_with_the_package():
    """``carbon-harness explain`` reads the data from the package, not from a checkout's docs/."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.json" in data["harness"]
    assert ts.DATA == REPO / "harness" / "data" / "troubleshooting.json"


@pytest.mark.parametrize("source, pattern", [
    ('raise SpecError(f"unknown model {name!r}; known: {\', \'.join(MODELS)}")', "unknown model <name>; known: <value>"),
    ('raise ValueError(f"{a.b:.2f} ms" + " over")', "<a.b> ms over"),
    ('raise ValueError("%s is %d" % (x, y))', "<value> is <value>"),
    ('msg = f"bad {x}"\nraise ValueError(msg)', "bad <x>"),
    ('raise UsageError(f"carbon-harness: {exc}{explain_pointer(exc)}")', "carbon-harness: <exc>"),
    ('raise UsageError(message + explain_pointer(message))', "<message>"),
])
def test_a_message_becomes_a_pattern_with_placeholders(source, pattern):
    scanner = ts.Scanner("m.py")
    scanner.visit(ast.parse(f"def f():\n" + "\n".join("    " + line for line in source.splitlines())))
    assert ["".join(p if isinstance(p, str) else f"<{p.name}>" for p in parts) for _, _, parts, _ in scanner.found] \
        == [pattern]


def test_each_entry_has_its_own_anchor_that_survives_a_regeneration(entries, causes, built):
    """Anchors are unique, short, and depend on the message only: moving every raise site (other lines, the
    scan in another order) keeps each, while a reworded message gets a new one."""
    ids = [i.id for i in built]
    assert len(ids) == len(set(ids)) and not ts.id_problems(built)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*-[0-9a-f]{4}", i) and len(i) <= 48 for i in ids), ids[:5]
    moved = {}
    for k, e in reversed(list(entries.items())):
        moved[k] = ts.Entry(e.module, e.cls, e.parts, [n + 7 for n in e.lines], e.wraps)
    again = {i.fixed if not i.placeholder_only else i.sites[0].key: i.id for i in ts.items(moved, causes)}
    assert again == {i.fixed if not i.placeholder_only else i.sites[0].key: i.id for i in built}
    (module, key), e = next((k, e) for k, e in entries.items() if k[0] == "harness/core/spec.py")
    reworded = {**entries, (module, key): ts.Entry(e.module, e.cls, e.parts + ("!",), e.lines, e.wraps)}
    before = next(i.id for i in built if e in i.sites)
    assert before not in {i.id for i in ts.items(reworded, causes) if i.sites[0].module == module}
    pages = "".join(p.read_text(encoding="utf-8") for p in sorted(ts.PAGES.glob("*.md")))
    assert sorted(re.findall(r'^<a id="([a-z0-9-]+)"></a>\n\n## ', pages, re.M)) == sorted(ids)
    index = ts.PAGE.read_text(encoding="utf-8")  # a link from before the split lands on the entry's line there
    assert sorted(re.findall(r'^- <a id="([a-z0-9-]+)"></a>\[', index, re.M)) == sorted(ids)


def test_one_entry_per_message_and_none_only_placeholders(built):
    """The page used to have 18 duplicates and 27 placeholder-only entries: the same text is one entry, with
    every site that raises it; a heading always has words, from its cause where the message has none."""
    shown = [i.fixed for i in built if not i.placeholder_only]
    assert len(shown) == len(set(shown))
    decode = next(i for i in built if i.fixed == ("decode_step() before prefill(): nothing to decode from",))
    assert {e.module for e in decode.sites} == {"harness/backends/hf.py", "harness/backends/hf_compiled.py",
                                                "harness/backends/neuron/engine.py"}
    typo = next(i for i in built if any(e.module == "harness/analysis/gates.py" and "unknown field" in e.pattern
                                        for e in i.sites))
    assert {e.module for e in typo.sites} == {"harness/analysis/gates.py", "harness/core/hardware.py"}
    assert len(typo.causes) == 3  # one per distinct cause: a thresholds entry, its provenance, a hardware profile
    only = [i for i in built if i.placeholder_only]
    assert only and all(i.title != i.message and len(re.findall(r"[A-Za-z]{3,}", i.title)) >= 3 for i in only)
    pages = {p.stem: p.read_text(encoding="utf-8") for p in ts.PAGES.glob("*.md")}
    for page in pages.values():
        for heading in re.findall(r'^<a id="[a-z0-9-]+"></a>\n\n## (.*)$', page, re.M):
            assert len(re.findall(r"[A-Za-z]{2,}", re.sub(r"&lt;[^&]*&gt;", "", heading))) >= 2, heading
    groups = re.findall(r'^<a id="([a-z]+[0-9]?)"></a>\n\n## ', ts.PAGE.read_text(encoding="utf-8"), re.M)
    assert groups == [g for g in ts.GROUP_IDS if any(i.group == g for i in built)], groups
    assert sorted(pages) == sorted(groups)  # one page per group, each holding that group's entries
    assert all(f'<a id="{i.id}"></a>' in pages[i.group] for i in built)


@pytest.mark.parametrize("name", FOUR)
def test_explain_finds_the_entry_of_a_real_error_whole_or_in_part(name, tmp_path, capsys):
    from harness.cli import main

    whole, fragment, entry = pasted(name, tmp_path, capsys)
    assert tr.find(whole) == entry and tr.find(fragment) == entry
    assert main(["explain", fragment]) == 0
    out = capsys.readouterr().out
    assert out.startswith(entry.title + "\n") and f"docs/troubleshooting/{entry.group}.md#{entry.id}" in out
    assert f"cause: {entry.causes[0]['cause']}" in out or "cause (raised at" in out
    assert "what to do: " + entry.causes[0]["fix"] in out


def test_the_error_line_ends_with_its_entry(tmp_path, capsys):
    """The unknown model's argparse line, a command's own ``error:`` line (main's handler), and a message the
    harness did not write (an OSError), which names where to look instead."""
    from harness.cli import main

    line = unknown_model(tmp_path, capsys)
    assert line.endswith(f" (carbon-harness explain: docs/troubleshooting/models.md#"
                         f"{entry_of('harness/core/spec.py', 'unknown model <name>').id})"), line
    assert main(["cost", "--hardware", "cpu", "--bp-per-s", "1000"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    cost = entry_of("harness/cli.py", "has no price_per_hour")
    assert line.startswith("carbon-harness cost: error: hardware profile 'cpu' has no price_per_hour")
    assert line.endswith(f"(carbon-harness explain: docs/troubleshooting/{cost.group}.md#{cost.id})"), line
    assert tr.find(line) == cost  # the pasted line, pointer and all
    # a wrapper that quotes that line, pointer and all, points to the same entry once, not twice
    wrapped = f"the baseline cannot run: {line.split('error: ', 1)[1]}"
    assert tr.explain_pointer(wrapped) == ""
    assert tr.explain_pointer(wrapped.split(" (carbon-harness explain:")[0]) == line[line.index(" (carbon-harness"):]
    assert tr.explain_pointer(OSError(2, "No such file or directory")).startswith(" (no entry in docs/")
    assert tr.explain_pointer("argument --out: expected one argument", quiet=True) == ""


def test_explain_says_when_nothing_matches(capsys):
    from harness.cli import main

    assert main(["explain", "Segmentation fault (core dumped)"]) == 1
    err = capsys.readouterr().err
    assert "no entry of docs/troubleshooting.md matches 'Segmentation fault (core dumped)'" in err
    assert tr.find("CUDA out of memory. Tried to allocate 2.00 GiB") is None
    assert tr.find("ModuleNotFoundError: No module named 'torch'") is None


def test_explain_takes_an_anchor_and_standard_input(monkeypatch, capsys):
    from harness.cli import main

    entry = entry_of("harness/core/spec.py", "unknown model <name>")
    assert tr.find(f"see docs/troubleshooting.md#{entry.id}") == entry and tr.find(entry.id) == entry
    assert tr.find(f"see docs/troubleshooting/models.md#{entry.id}") == entry  # the pointer errors print
    assert tr.find(f"https://site/troubleshooting/models/#{entry.id}") == entry  # the site's address
    monkeypatch.setattr(sys, "stdin", io.StringIO("collecting ...\nERROR: carbon-harness: unknown model 'x'; "
                                                  "known models: carbon-tiny\n"))
    assert main(["explain", "-"]) == 0
    assert f"#{entry.id}" in capsys.readouterr().out


def test_a_wrapper_is_found_only_where_nothing_more_specific_is(capsys):
    """argparse's line names the inner error's entry, not the wrapper's; a line with nothing else is the
    wrapper's."""
    from harness.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "--model", "carbon-tiny", "--shape", "smoke-typo"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("carbon-harness plan: error: argument --shape:"), line
    assert tr.find(line) == entry_of("harness/core/spec.py", "unknown shape <name>")
    assert tr.find("carbon-harness cost: error: something no entry says") == entry_of(
        "harness/cli.py", "carbon-harness <command>: error:")


# flags of other tools that a fix may name: pytest's, pytest-benchmark's, vLLM's, neuron-ls's; --opt: the
# placeholder of a path option's own message
OTHER_TOOLS_FLAGS = {"--opt", "--junitxml", "--benchmark-json", "--benchmark-save-data", "--disable-log-stats",
                     "--speculative-config", "--json-output",
                     # vLLM's own server flags, which the vLLM Neuron start rules' causes name, and pip's
                     "--additional-config", "--max-model-len", "--max-num-batched-tokens", "--max-num-seqs",
                     "--no-async-scheduling", "--tensor-parallel-size", "--no-deps"}


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
    known = harness_commands()
    assert {"release-check", "vllm-serve", "plan", "explain"} <= known
    wrong = sorted({f"carbon-harness {name} ({key[0]})" for key, entry in causes.items()
                    for text in (entry.get("cause") or "", entry.get("fix") or "")
                    for name in re.findall(r"`carbon-harness ([a-z][a-z-]*)", text) if name not in known})
    assert not wrong, wrong


def test_a_placeholder_reads_as_a_name_not_as_code(built):
    """``<self.log_path>`` showed in a message: a value is named by its last part, ``<log_path>``."""
    assert not [i.message for i in built if re.search(r"<\w+\.", i.message)]
    died = next(i for i in built if i.fixed[0].startswith("vLLM server exited with code "))
    assert "last lines of <log_path>:" in died.message and "<self.log_path>" in died.sites[0].key
