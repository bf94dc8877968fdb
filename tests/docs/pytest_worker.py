"""pytest's own parser and collection on the docs' pytest lines, all in one process.

``python -m tests.docs.pytest_worker JOBS.json RESULTS.json``, from the checkout's root: each job is
``{"id", "args", "mode"}``; ``mode`` ``parse`` stops pytest once it has parsed the line (every option known to
pytest or a plugin, each value accepted by its option's type, ``-k`` well formed, each ``-m`` name a
registered marker) and ``collect`` runs ``pytest ARGS --collect-only -q`` (the plugin's configuration and
pre-flight checks included) and counts what it selects. One process: the first collection imports torch,
transformers and the test modules (~15 s); each further one takes ~2 s instead of a fresh start's ~15.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest

COLLECT = ("--collect-only", "-q", "-p", "no:cacheprovider",
           # its gc.collect() passes at unconfigure cost ~3 s a collection here, and a collection runs no test
           "-p", "no:unraisableexception")
PARSE = ("-p", "no:cacheprovider")
# pytest's own markers and the harness plugin's (added at configure, which a parse stops before)
BUILTIN_MARKERS = {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings", "tryfirst", "trylast",
                   "fixed_shape", "benchmark", "hypothesis", "timeout"}
EXPRESSION_WORDS = {"and", "or", "not", "True", "False"}


def registered_markers(config: pytest.Config) -> set[str]:
    return {re.split(r"[(:]", line, maxsplit=1)[0].strip() for line in config.getini("markers")} | BUILTIN_MARKERS


def expression_names(expression: str) -> set[str]:
    """The marker names an ``-m`` expression uses (what pytest's own grammar takes for identifiers)."""
    return set(re.findall(r"[^\s()]+", re.sub(r"\([^()]*\)", " ", expression))) - EXPRESSION_WORDS


class ParseOnly:
    """Stops the run right after pytest parsed the command line, before any plugin configures."""

    def __init__(self) -> None:
        self.error = ""

    @pytest.hookimpl(tryfirst=True)
    def pytest_cmdline_main(self, config: pytest.Config) -> int:
        from _pytest.mark.expression import Expression  # pytest's -m / -k grammar (private, stable since 6)

        for option, expression in (("-m", config.option.markexpr), ("-k", config.option.keyword)):
            if expression:
                try:
                    Expression.compile(expression)
                except Exception as exc:  # pytest 9: SyntaxError; pytest 6-8: ParseError
                    self.error = f"{option} {expression!r}: {exc}"
                    return 4
        unknown = sorted(expression_names(config.option.markexpr or "") - registered_markers(config))
        if unknown:
            self.error = (f"-m {config.option.markexpr!r}: no marker {', '.join(unknown)} is registered "
                          f"(pyproject.toml's markers: {', '.join(sorted(registered_markers(config) - BUILTIN_MARKERS))})")
            return 4
        return 0


def selected(output: str) -> int | None:
    """How many tests a ``--collect-only -q`` run selected, from its last line."""
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", output)
    if found:
        return int(found.group(1))
    return 0 if re.search(r"no tests (collected|ran)", output) else None


def run(job: dict) -> dict:
    out = io.StringIO()
    parse_only = ParseOnly()
    plugins = [parse_only] if job["mode"] == "parse" else []
    extra = PARSE if job["mode"] == "parse" else COLLECT
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = int(pytest.main([*job["args"], *extra], plugins=plugins))
        except SystemExit as exc:  # argparse's own exit, should a plugin's parser raise it
            code = int(exc.code or 0)
    text = out.getvalue()
    if parse_only.error:
        text += "\n" + parse_only.error
    return {"id": job["id"], "rc": code, "output": text[-6000:],
            "selected": selected(text) if job["mode"] == "collect" else None}


def main(argv: list[str]) -> int:
    sys.argv[0] = "pytest"  # the name pytest's usage errors give the program
    jobs = json.loads(Path(argv[0]).read_text())
    results = [run(job) for job in jobs]
    Path(argv[1]).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
