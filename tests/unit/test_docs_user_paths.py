"""No path of this repository's own development machines in anything a user sees.

A user has no ``../shared/vendor`` (the NxDI trees this project was built beside) and no ``/work/``: a message,
a help line or a page that names either sends them to a folder that does not exist. The way to NxDI's sources
is ``carbon-harness nxdi-source RELEASE`` (or ``CARBON_NXDI_SOURCE``). What a user sees: the package's string
literals (messages, help, docstrings ``help()`` shows; comments are not shown), its data files, the docs, the
README, the troubleshooting causes the pages and ``carbon-harness explain`` are generated from, and every
subcommand's ``--help``. noxfile.py and tests/ are the developer's and may name the development tree.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser
from tests.helpers import REPO

pytestmark = pytest.mark.unit

DEV_PATH = re.compile(r"shared/vendor|/work/")


@functools.lru_cache(maxsize=1)
def generated() -> dict[Path, str]:
    """The troubleshooting pages and ``explain``'s data as ci/troubleshooting.py makes them now: what a user will
    read once they are regenerated (tests/unit/test_troubleshooting.py checks the files on disk are current)."""
    spec = importlib.util.spec_from_file_location("carbon_troubleshooting_paths", REPO / "ci" / "troubleshooting.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module.outputs()[1]


def on_disk(paths) -> list[Path]:
    """``paths`` less the generated files, which are read as the generator makes them."""
    return [p for p in paths if p not in generated() and "troubleshooting" not in p.relative_to(REPO).parts[:2]]


def dev_paths(text: str) -> list[str]:
    """The lines of ``text`` that name a development path."""
    return [line.strip() for line in text.splitlines() if DEV_PATH.search(line)]


def string_literals(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module (f-string pieces and docstrings included), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_package_strings_name_no_development_path():
    found = [f"{p.relative_to(REPO)}:{line}: {hit}" for p in sorted((REPO / "harness").rglob("*.py"))
             for line, text in string_literals(p) for hit in dev_paths(text)]
    found += [f"{p.relative_to(REPO)}: {hit}" for p in on_disk(sorted((REPO / "harness").rglob("*")))
              if p.is_file() and p.suffix in (".json", ".yaml", ".yml", ".txt", ".md")
              for hit in dev_paths(p.read_text(encoding="utf-8"))]
    assert not found, "development paths a user would see:\n" + "\n".join(found)


def user_pages() -> list[Path]:
    return [REPO / "README.md", REPO / "mkdocs.yml", REPO / "ci" / "troubleshooting_causes.yaml",
            *sorted(p for p in (REPO / "docs").rglob("*") if p.is_file() and p.suffix in (".md", ".js", ".json"))]


def test_the_docs_and_causes_name_no_development_path():
    found = [f"{p.relative_to(REPO)}: {hit}" for p in on_disk(user_pages())
             for hit in dev_paths(p.read_text(encoding="utf-8"))]
    found += [f"{p.relative_to(REPO)} (generated): {hit}" for p, text in generated().items() for hit in dev_paths(text)]
    assert not found, "development paths a user would read:\n" + "\n".join(found)


def every_help() -> dict[str, str]:
    """``carbon-harness --help`` and each subcommand's, as argparse prints them."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"carbon-harness": parser.format_help(),
            **{f"carbon-harness {name}": p.format_help() for name, p in sub.choices.items()}}


def test_every_help_is_plain_text_without_development_paths():
    helps = every_help()
    assert {"carbon-harness release-check", "carbon-harness nxdi-source", "carbon-harness explain"} <= set(helps)
    found = [f"{name} --help: {hit}" for name, text in helps.items() for hit in dev_paths(text)]
    found += [f"{name} --help shows RST markup: {line.strip()}" for name, text in helps.items()
              for line in text.splitlines() if re.search(r"``|:(?:class|func|mod|meth):`", line)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("text, bad", [("see ../shared/vendor/releases", True), ("e.g. /work/main", True),
                                       ("carbon-harness nxdi-source 2.29.0", False), ("/workspace/x", False)])
def test_the_pattern_catches_what_it_is_for(text, bad):
    assert bool(dev_paths(text)) is bad
