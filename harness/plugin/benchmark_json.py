"""``--benchmark-json`` written atomically: the last good file survives a full disk or a crash.

pytest-benchmark declares the option as ``argparse.FileType('wb')``: the file is opened, and so
truncated, as soon as the command line is parsed (again in every xdist worker), and written in
place at the end. A run that stops early, or a write that fails half-way (full disk), leaves an
empty or truncated JSON where the previous good one was, and the write error is a traceback.

The plugin retypes the option before it is parsed: its value becomes a ``BenchmarkJsonTarget``,
checked at start (one usage error for a path that cannot be written) and written once at the end
through ``harness.core.storage.atomic_write_bytes`` (temporary file beside the target, fsync, rename).
pytest-benchmark's own ``save_json`` still serialises the data; a failed write becomes one line
and a non-zero exit, with the previous file unchanged. (The retyping needs the plugin loaded
from its entry point, i.e. the package installed: loaded from the repository's conftest.py only,
it comes after pytest-benchmark's option has been parsed once, and the write is atomic but the
previous file was already truncated at start.)
"""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path
from typing import Any

from harness.core.storage import atomic_write_bytes

OPTION = "--benchmark-json"


class BenchmarkJsonTarget:
    """Stands in for the file handle pytest-benchmark expects: ``with target as fh: fh.write(b)``
    buffers, and leaving the block writes the bytes atomically (nothing is written on error)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._buffer: io.BytesIO | None = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"BenchmarkJsonTarget({str(self.path)!r})"

    def __enter__(self) -> io.BytesIO:
        self._buffer = io.BytesIO()
        return self._buffer

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        data = self._buffer.getvalue() if self._buffer is not None else b""
        self._buffer = None
        if exc_type is None:
            atomic_write_bytes(self.path, data)


def parse_benchmark_json(value: str) -> Any:
    """The option's type: a writable file path, checked now so that a typo stops the session at
    start; ``-`` keeps pytest-benchmark's meaning (standard output)."""
    if value == "-":
        return argparse.FileType("wb")(value)
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file path; give one such as out.json")
    path = Path(os.path.abspath(os.path.expanduser(value)))
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a directory; give a file path such as {value}/out.json")
    parent = path.parent
    if not parent.exists():
        raise argparse.ArgumentTypeError(f"{value!r}: directory {parent} does not exist")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{value!r}: directory {parent} is not writable")
    return BenchmarkJsonTarget(path)


def retype_option(parser: Any) -> bool:
    """Give pytest-benchmark's ``--benchmark-json`` our type; True once it is done.

    pytest >= 9 builds the argparse action when the option is added (``parser.optparser``; from 9.2
    an ``Argument`` is a view of that action); older pytest builds the argparse parser from the
    stored ``Argument`` attributes at each parse. All are updated, before the first parse that
    knows the option.
    """
    done = False
    for group in getattr(parser, "_groups", ()):
        for argument in getattr(group, "options", ()):
            if OPTION in argument.names():
                action = getattr(argument, "_action", None)
                if action is not None:  # pytest >= 9.2: an Argument wraps its argparse action
                    action.type = parse_benchmark_json
                else:
                    argument.type = parse_benchmark_json
                    argument._attrs["type"] = parse_benchmark_json
                done = True
    optparser = getattr(parser, "optparser", None)
    action = getattr(optparser, "_option_string_actions", {}).get(OPTION) if optparser is not None else None
    if action is not None:
        action.type = parse_benchmark_json
        done = True
    return done


class JsonOptionTakeover:
    """Registered from the plugin's ``pytest_addoption``: whichever of the two plugins loads
    first, the option is retyped as soon as pytest-benchmark has added it (``pytest_plugin_registered``
    is historic: this object also sees the plugins registered before it)."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.done = False

    def pytest_plugin_registered(self, plugin: Any, manager: Any) -> None:
        if not self.done:
            self.done = retype_option(self.parser)


def guard_save_json(benchmark_session: Any, failures: list[str]) -> None:
    """Replace pytest-benchmark's ``save_json`` with the same serialisation written atomically:
    its own opens the target in place (5.2 through the ``FileType`` handle, 5.3 with
    ``open(path, 'wb')``). A failed write is recorded as one line (the plugin fails the session
    with it) instead of an internal-error traceback, and the previous file stays as it was."""
    from pytest_benchmark.utils import safe_dumps

    def save_json(output_json: dict) -> None:
        data = safe_dumps(output_json, ensure_ascii=True, indent=4).encode()
        target = benchmark_session.json
        if hasattr(target, "write") and not isinstance(target, BenchmarkJsonTarget):  # "-": standard output
            target.write(data)
            target.flush()
            return
        path = Path(str(target))
        try:
            atomic_write_bytes(path, data)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            failures.append(f"carbon-harness: --benchmark-json {path} was not written ({reason}); "
                            f"the previous file, if any, is unchanged")
            return
        benchmark_session.logger.info(f"Wrote benchmark data in: {path}", purple=True)

    benchmark_session.save_json = save_json
