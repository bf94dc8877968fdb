"""What a docs command invokes, and the real parser that judges its options.

``invocation`` reads a command line as a shell would (``VAR=value`` and ``env`` prefixes aside) and names the
program; ``option_error`` parses its arguments with that program's own parser: carbon-harness's
``build_parser()``, a ``python -m harness.X`` module's ``build_parser()``, nox's and pip's, and says what it
rejected (None when they pass). pytest lines go to ``tests/docs/pytest_worker.py`` instead (pytest's parser
needs the plugins loaded, and a collection to tell a selected marker from a renamed one).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHONS = ("python", "python3")
PLACEHOLDER = "..."  # "the rest of the options, as above": dropped before parsing
# the checkout's own paths a command may name (they must exist); ../shared/vendor and ~/... are the reader's
REPO_PREFIXES = ("ci/", "fixtures/", "tests/", "harness/", "docs/", ".ci/", "noxfile.py", "pyproject.toml",
                 "README.md", "mkdocs.yml")


@dataclass(frozen=True)
class Invocation:
    """A command as the program it runs: ``program`` is pytest, carbon-harness, harness-module, nox, pip,
    script, or None (a program this checkout has no parser for: vllm, hf, a shell loop)."""

    program: str | None
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    module: str = ""  # harness-module: the module after ``python -m``
    tokens: tuple[str, ...] = ()  # the whole command, env prefixes aside

    def argv(self) -> list[str]:
        """The command to run here: the programs of this checkout through this interpreter."""
        if self.program == "pytest":
            return [sys.executable, "-m", "pytest", *self.args]
        if self.program == "carbon-harness":
            return [sys.executable, "-m", "harness.cli", *self.args]
        if self.program == "harness-module":
            return [sys.executable, "-m", self.module, *self.args]
        if self.program == "nox":
            return [sys.executable, "-m", "nox", *self.args]
        if self.program == "pip":
            return [sys.executable, "-m", "pip", "install", *self.args]
        if self.tokens and self.tokens[0] in PYTHONS:
            return [sys.executable, *self.tokens[1:]]
        return list(self.tokens)


def unwrap(token: str) -> str:
    """``[--json]``, an optional part written as usage text, is taken as given."""
    return token[1:-1] if re.fullmatch(r"\[-[^\[\]]*\]", token) else token


def invocation(text: str) -> Invocation:
    tokens = shlex.split(text)
    env: dict[str, str] = {}
    if tokens and tokens[0] == "env":
        tokens = tokens[1:]
    while tokens and ENV_ASSIGNMENT.match(tokens[0]):
        name, value = tokens.pop(0).split("=", 1)
        env[name] = value
    tokens = [unwrap(t) for t in tokens if t != PLACEHOLDER]
    if not tokens:
        return Invocation(None, (), env)
    head, rest = tokens[0], tuple(tokens[1:])
    if head in PYTHONS and len(tokens) >= 3 and tokens[1] == "-m":
        module, rest = tokens[2], tuple(tokens[3:])
        if module in ("pytest", "nox"):
            return Invocation(module, rest, env, tokens=tuple(tokens))
        if module == "pip" and rest[:1] == ("install",):
            return Invocation("pip", rest[1:], env, tokens=tuple(tokens))
        if module == "harness.cli":
            return Invocation("carbon-harness", rest, env, tokens=tuple(tokens))
        if module.startswith("harness."):
            return Invocation("harness-module", rest, env, module, tuple(tokens))
        return Invocation(None, rest, env, tokens=tuple(tokens))
    if head in ("pytest", "carbon-harness", "nox"):
        return Invocation(head, rest, env, tokens=tuple(tokens))
    if head == "pip" and rest[:1] == ("install",):
        return Invocation("pip", rest[1:], env, tokens=tuple(tokens))
    if head in ("bash", "sh") and rest and not rest[0].startswith("-"):
        return Invocation("script", rest, env, tokens=tuple(tokens))
    return Invocation(None, rest, env, tokens=tuple(tokens))


def exact(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser, and its sub-commands', taking no abbreviation: a page's ``--sim`` must not pass for
    ``--sims``, or an option renamed to a longer name would still parse the old one."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                exact(sub)
    return parser


def argparse_error(parser: argparse.ArgumentParser, args: tuple[str, ...]) -> str | None:
    """What an argparse parser says of args (abbreviations refused): None when it accepts them."""
    exact(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(list(args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


def module_parser(module: str):
    """A ``python -m harness.X`` module's ``build_parser()`` (its package's ``__main__`` for a package)."""
    target = importlib.import_module(module)
    if hasattr(target, "__path__"):
        target = importlib.import_module(f"{module}.__main__")
    build = getattr(target, "build_parser", None)
    if build is None:
        raise LookupError(f"python -m {module}: the module has no build_parser() to check the docs' options against; "
                          f"give it one (main() parsing with it), as harness.cli has")
    return build()


@functools.lru_cache(maxsize=None)
def nox_listing(root: Path) -> tuple[tuple[str, str], ...]:
    """``nox -l``'s sessions as (mark, name): ``*`` for one plain ``nox`` runs, ``-`` for the others."""
    listing = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(root / "noxfile.py")], cwd=root,
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, f"nox -l failed: {listing.stderr[-2000:]}"
    return tuple((m.group(1), m.group(2)) for m in re.finditer(r"^([*-]) (\S+)", listing.stdout, re.M))


def nox_sessions(root: Path) -> frozenset[str]:
    """Every session noxfile.py defines, default or not."""
    return frozenset(name for _, name in nox_listing(root))


def nox_default_sessions(root: Path) -> frozenset[str]:
    """The sessions a plain ``nox`` (the README's test command) runs."""
    return frozenset(name for mark, name in nox_listing(root) if mark == "*")


def nox_error(args: tuple[str, ...], root: Path) -> str | None:
    import nox._options  # nox's own argument parser (nox has no public one)

    error = argparse_error(nox._options.options.parser(), args)
    if error:
        return error
    parsed = nox._options.options.parser().parse_args(list(args))
    unknown = sorted(set(getattr(parsed, "sessions", None) or []) - nox_sessions(root))
    return f"no nox session {', '.join(unknown)} in noxfile.py (it has {', '.join(sorted(nox_sessions(root)))})" \
        if unknown else None


def project_extras(root: Path) -> set[str]:
    data = tomllib.loads((root / "pyproject.toml").read_text())
    return set(data["project"].get("optional-dependencies", {}))


def pip_error(args: tuple[str, ...], root: Path) -> str | None:
    """pip's own install parser, then the extras asked of this project (``.[a,b]``, ``-e ".[a,b]"``)."""
    from pip._internal.commands import create_command  # pip's parser (pip has no public API)

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            _, targets = create_command("install").parse_args(list(args))
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "pip rejected the options"
    abbreviated = [a.split("=", 1)[0] for a in args if a.startswith("--")
                   and not create_command("install").parser.has_option(a.split("=", 1)[0])]
    if abbreviated:  # optparse takes a prefix of a long option; a page must name it whole
        return f"pip install has no option {', '.join(abbreviated)} (an abbreviation, or renamed)"
    editable = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-e", "--editable")]
    extras = set()
    for target in [*targets, *editable]:
        found = re.fullmatch(r"\.\[([\w,\s-]+)\]", target)
        if found:
            extras |= {e.strip() for e in found.group(1).split(",")}
    unknown = sorted(extras - project_extras(root))
    return f"pyproject.toml has no extra {', '.join(unknown)} (it has {', '.join(sorted(project_extras(root)))})" \
        if unknown else None


def option_error(call: Invocation, root: Path) -> str | None:
    """The parser's complaint about a command's options, or None; pytest and unknown programs: None here."""
    if call.program == "carbon-harness":
        from harness.cli import build_parser

        return argparse_error(build_parser(), call.args)
    if call.program == "harness-module":
        try:
            return argparse_error(module_parser(call.module), call.args)
        except (ImportError, LookupError) as exc:
            return str(exc)
    if call.program == "nox":
        return nox_error(call.args, root)
    if call.program == "pip":
        return pip_error(call.args, root)
    if call.program == "script":
        syntax = subprocess.run(["bash", "-n", str(root / call.args[0])], capture_output=True, text=True)
        return f"bash -n {call.args[0]}: {syntax.stderr.strip()}" if syntax.returncode else None
    return None


def missing_paths(call: Invocation, root: Path) -> list[str]:
    """The checkout's paths the command names (``ci/…``, ``fixtures/…``, ``tests/…::test``, globs) that are not there."""
    missing = []
    for token in call.tokens:
        value = token.split("=", 1)[1] if token.startswith("-") and "=" in token else token
        path = value.split("::", 1)[0]
        if path.startswith(REPO_PREFIXES) and not any(root.glob(path)):
            missing.append(path)
    return missing


NXDI_SOURCE_VARIABLE = ("$CARBON_NXDI_SOURCE", "${CARBON_NXDI_SOURCE}")


def nxdi_tree() -> str | None:
    """What a page's ``$CARBON_NXDI_SOURCE`` stands for here: the variable where set (CI sets it to its NxDI
    checkouts), else this project's local tree beside the checkout (``../shared/vendor``), as ``nox`` reads it."""
    vendored = Path(__file__).resolve().parents[3] / "shared" / "vendor"
    return os.environ.get("CARBON_NXDI_SOURCE") or (str(vendored) if vendored.is_dir() else None)


def expand_home(token: str) -> str:
    """``~``, ``$HOME`` and ``$CARBON_NXDI_SOURCE`` (the NxDI tree a reader exports: ``nxdi_tree`` here) as a
    shell expands them, for commands the suite runs."""
    tree = nxdi_tree()
    for variable in NXDI_SOURCE_VARIABLE if tree else ():
        token = token.replace(variable, tree)
    return os.path.expanduser(token.replace("$HOME", os.path.expanduser("~")).replace("${HOME}", os.path.expanduser("~")))


def expand_glob(token: str, cwd: Path) -> list[str]:
    """A token with ``*``, ``?`` or ``[`` as a shell expands it in ``cwd``: the matching paths, sorted; the token
    itself where nothing matches (bash without nullglob). A pattern the page quotes to keep it (a pytest node
    id ``'test_e2e[carbon-tiny-smoke]'``) names no file, so it stays."""
    if not any(c in token for c in "*?[") or token.startswith("-"):
        return [token]
    return sorted(glob.glob(token, root_dir=cwd)) or [token]
