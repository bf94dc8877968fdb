"""The docs collector itself: how it reads a page's blocks and commands, and that a renamed option in a
carbon-harness or python -m harness line fails its parser by name (the pytest lines' plants are in
test_commands.py, where the worker parses them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import blocks, commands, expected_pieces, pages
from tests.docs.clis import expand_glob, invocation, missing_paths, option_error
from tests.docs.output import pieces_missing, unmatched

pytestmark = pytest.mark.docs

REPO = Path(__file__).resolve().parents[2]
PAGE = """# a page

<!-- run -->
```bash
carbon-harness plan --model carbon-3b \\
    --shape scan-64k   # exit 1: needs rope scaling
#  ... exceed the model's ... positions
VLLM_DEVICE=cpu python -m harness.release.power analyse fixtures/release/stream-*.json --out /tmp/p.md
```

```sh
nox -s trn2-stack
```

<!-- device-only: a Trn2 host with the Neuron SDK -->
```console
$ vllm serve /opt/m --additional-config '{"a": [1],
  "b": 2}'
INFO output line
```

<!-- output: extended: pytest -m perf --carbon-shape smoke -->
```
collected 1465 items
```
"""


def read(tmp_path: Path) -> list:
    (tmp_path / "README.md").write_text(PAGE)
    return blocks(tmp_path / "README.md", tmp_path)


def test_commands_join_continuations_and_carry_exit_status_and_output(tmp_path):
    run, unmarked, device, output = read(tmp_path)
    assert (run.kind, run.detail, run.line) == ("run", "", 4)
    first, second = run.commands
    assert first.text == "carbon-harness plan --model carbon-3b --shape scan-64k" and first.line == 5
    assert first.exit_statuses == (1,) and first.expect == ("... exceed the model's ... positions",)
    assert expected_pieces(first.expect[0]) == ["exceed the model's", "positions"]
    assert invocation(second.text).env == {"VLLM_DEVICE": "cpu"} and invocation(second.text).module == "harness.release.power"
    assert unmarked.kind is None and unmarked.commands[0].text == "nox -s trn2-stack"
    assert device.kind == "device-only" and len(device.commands) == 1 and "\n" in device.commands[0].text
    assert invocation(device.commands[0].text).program is None
    assert (output.kind, output.extended, output.output_command) == ("output", True, "pytest -m perf --carbon-shape smoke")


def test_pages_are_the_readme_and_the_docs_tree():
    found = [p.relative_to(REPO).as_posix() for p in pages(REPO)]
    assert found[0] == "README.md" and all(p.startswith("docs/") for p in found[1:])


@pytest.mark.parametrize("text,renamed", [
    ("carbon-harness release-check --conformance-only --backend hf --baseline-dtype fp32 --candidate-dtype bf16 "
     "--out /tmp/x", None),
    ("carbon-harness release-check --conformance-only --backend hf --base-dtype fp32 --candidate-dtype bf16 "
     "--out /tmp/x", "--base-dtype"),
    ("carbon-harness plan --model carbon-3b --shape report-bs1 --draft carbon-500m --acceptance 0.7", None),
    ("carbon-harness plan --model carbon-3b --shape report-bs2 --draft carbon-500m --acceptance 0.7", "report-bs2"),
    ("python -m harness.release.power analyse fixtures/release/stream-*.json --out /tmp/p.md --sim 3", "--sim"),
    ("nox -s trn2-stack", None),
    ("nox -s trn2-stacks", "trn2-stacks"),
    ('pip install -e ".[plot,test]" torch==2.13.0 --retries 1', None),
    ('pip install -e ".[plot,tests]"', "tests"),
    ("pip install --extra-index https://x torch", "--extra-index"),
])
def test_a_renamed_option_fails_its_parser_by_name(text: str, renamed: str | None):
    error = option_error(invocation(text), REPO)
    if renamed is None:
        assert error is None
    else:
        assert error and renamed in error, error


def test_a_missing_checkout_path_is_named():
    call = invocation("bash ci/scripts/sdk-venv.sh ~/v ci/constraints/sdk-2.29.txt fixtures/release/stream-*.json")
    assert missing_paths(call, REPO) == ["ci/constraints/sdk-2.29.txt"]


def test_loose_output_matching_takes_other_numbers_and_paths_not_other_words():
    printed = ("collected 1788 items / 1773 deselected / 15 selected\n"
               "tests/perf/test_compile.py ss                                            [ 13%]\n"
               f"thresholds=75 from {REPO}/fixtures/thresholds cache=~/.cache/carbon-harness\n")
    shown = ["collected 1465 items / 1451 deselected / 14 selected",
             "tests/perf/test_compile.py s                                             [  7%]",
             "thresholds=75 from fixtures/thresholds cache=~/.cache/carbo"]
    assert unmatched(shown, printed) == []
    assert unmatched(["collected 1465 items / 1451 skipped"], printed) == ["collected 1465 items / 1451 skipped"]
    assert unmatched(["Name (time in s)    Min", "=== 7 passed, 3 warnings in 30.26s ==="],
                     "Name (time in ms)  Min\n===== 7 passed in 102.08s (0:01:42) =====") == []
    assert pieces_missing(["predicted speedup 1.73x", "break-even"], "a predicted speedup 1.73x; break-even") == []
    assert pieces_missing(["break-even", "predicted"], "predicted ... break-even") == ["predicted"]


@pytest.mark.parametrize("comment,statuses", [("exit 1: needs rope scaling", (1,)), ("exit 0 or 3", (0, 3)),
                                              ("exit 0, 1 or 3: the host's noise decides", (0, 1, 3)),
                                              ("exits at once", (0,)), ("the tp of the shape", (0,))])
def test_a_trailing_exit_comment_names_the_statuses_the_command_may_end_with(comment, statuses):
    (command,) = commands("page.md", 1, (f"carbon-harness plan --model carbon-tiny   # {comment}",), "bash")
    assert command.exit_statuses == statuses


def test_a_glob_expands_as_a_shell_expands_it(tmp_path):
    for name in ("stream-b.json", "stream-a.json", "other.json"):
        (tmp_path / name).write_text("{}")
    assert expand_glob("stream-*.json", tmp_path) == ["stream-a.json", "stream-b.json"]
    assert expand_glob("test_e2e[carbon-tiny-smoke]", tmp_path) == ["test_e2e[carbon-tiny-smoke]"]  # no such file
    assert expand_glob("--glob=*.json", tmp_path) == ["--glob=*.json"]
    assert expand_glob(str(tmp_path / "stream-*.json"), tmp_path) == [str(tmp_path / "stream-a.json"),
                                                                    str(tmp_path / "stream-b.json")]
