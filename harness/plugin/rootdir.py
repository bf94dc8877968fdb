"""A plugin option's path read by pytest as a test path: stop at start instead of running elsewhere.

pytest finds its rootdir and configuration file (``Config.parse`` → ``determine_setup``) from the
command line parsed with its *builtin* options only: plugins installed through entry points
(this harness, pytest-benchmark) are loaded afterwards, and no plugin hook runs in between
(``pytest_cmdline_preparse`` is gone since pytest 8). So in ``--carbon-thresholds /tmp/t.json`` the
value is, at that moment, a test path: an existing path outside the project moves the rootdir
there, pyproject.toml is not read (no ``addopts``, no markers, no ``testpaths``), node ids and
benchmark names change, and a ``--benchmark-compare`` finds no baseline to compare with. The
``--opt=PATH`` spelling is one argument starting with ``-`` and never taken for a path.

The plugin cannot move the rootdir back, so at its first hook (``pytest_load_initial_conftests``,
before any conftest or test is imported) it recomputes the rootdir pytest would have found had it
known every option, and when that differs it stops the session with one line naming the
``--opt=PATH`` form. A value that does not exist, or lies inside the project, moves nothing and
is accepted in either spelling.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any


def misread_values(args: Sequence[str], early_positional: Sequence[str], positional: Sequence[str],
                   value_options: Collection[str] = ()) -> list[tuple[str, str]]:
    """``(option, value)`` for each value that pytest's early parse (builtin options only) took for
    a test path but the full parse gave to the option before it: ``early_positional`` minus
    ``positional``, each found in ``args`` right after its option. ``value_options``: the builtin
    options that take a value (``builtin_value_options``); the value each consumes is skipped, so
    in ``--basetemp DIR --carbon-cache-dir DIR`` the misread ``DIR`` is the second, named with
    ``--carbon-cache-dir``, not ``--basetemp``."""
    misread = Counter(early_positional) - Counter(positional)
    out = []
    i = 0
    while i < len(args):
        value = args[i]
        if value == "--":  # everything after it is positional for both parses
            break
        if value in value_options and i + 1 < len(args) and not args[i + 1].startswith("-"):
            i += 2  # a builtin option and the value pytest's early parse gave it
            continue
        if i > 0 and misread[value] > 0 and args[i - 1].startswith("-"):
            misread[value] -= 1
            out.append((args[i - 1], value))
        i += 1
    return out


def builtin_value_options(parser: Any) -> frozenset[str]:
    """The option strings of pytest's builtin parser (``get_config()._parser``) that take a value
    (``--basetemp DIR``, ``-k EXPR``, ``--debug [FILE]``): what its early parse gives them is no test path."""
    optparser = getattr(parser, "optparser", None) or parser._getparser()
    return frozenset(s for action in optparser._actions if action.nargs != 0 for s in action.option_strings)


def rootdir_message(pairs: Sequence[tuple[str, str]], got: tuple[Path, Path | None],
                    wanted: tuple[Path, Path | None]) -> str:
    """The one-line usage error: which options, what pytest did with them, and the spelling that works."""
    named = ", ".join(f"{option} {value}" for option, value in pairs)
    fixed = " ".join(f"{option}={value}" for option, value in pairs)
    config = wanted[1].name if wanted[1] is not None else "no configuration file"
    found = got[1].name if got[1] is not None else "no configuration file"
    return (f"carbon-harness: pytest read the value of {named} as a test path (it finds its rootdir before "
            f"plugins' options are known), so the rootdir became {got[0]} with {found} instead of {wanted[0]} "
            f"with {config}: write {fixed}")


def _determine_setup(**kwargs: Any) -> tuple[Path, Path | None]:
    """pytest's own rootdir search, called with the arguments this pytest version takes."""
    from _pytest.config.findpaths import determine_setup

    accepted = inspect.signature(determine_setup).parameters
    result = determine_setup(**{k: v for k, v in kwargs.items() if k in accepted})
    return Path(result[0]), (Path(result[1]) if result[1] is not None else None)


def misread_path_error(early_config: Any, args: Sequence[str]) -> str | None:
    """The usage error when a plugin option's value moved pytest's rootdir or configuration file
    (``early_config`` and ``args`` as ``pytest_load_initial_conftests`` gets them), else None."""
    from _pytest.config import get_config

    ns = early_config.known_args_namespace  # parsed again once the plugins' options are known
    if getattr(ns, "help", False) or getattr(ns, "version", False):
        return None
    builtin = get_config()._parser
    early = builtin.parse_known_args(list(args))  # builtin options only, as pytest parsed first
    pairs = misread_values(args, early.file_or_dir or [], ns.file_or_dir or [], builtin_value_options(builtin))
    if not pairs:
        return None
    got = (Path(early_config.rootpath), early_config.inipath)
    wanted = _determine_setup(inifile=ns.inifilename, override_ini=ns.override_ini, args=ns.file_or_dir or [],
                              rootdir_cmd_arg=ns.rootdir or None, invocation_dir=early_config.invocation_params.dir)
    if got == wanted:
        return None
    moved = [(option, value) for option, value in pairs if Path(value).exists()]
    return rootdir_message(moved or pairs, got, wanted)
