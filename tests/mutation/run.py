"""A small mutation check of the gate's core: each mutant in ``mutants.toml`` (one line each: a file, an
exact piece of it, its replacement, the tests that must notice) is applied, one at a time, and its tests
are run; a mutant none of them fails **survived**, and the check fails naming it. So a change to the rule
that no test notices cannot land.

How: one process. Each mutant's module is served from its mutated source by an import hook placed
before every other (its ``__file__`` stays the real path), every ``harness`` and ``tests`` module is
dropped from ``sys.modules`` so each run imports them afresh, and the tests run in-process with
``pytest.main`` (third-party modules, numpy and pytest itself, stay imported: a run costs the tests,
not an interpreter start). The working tree is never written. First a control run: every listed test
must pass on the unmutated code, or no kill would mean anything.

    python -m tests.mutation.run [--only harness/core/sequential.py] [--json OUT] [--mutants OTHER.toml]

Exit 0: every mutant killed; 1: a survivor (or a control that fails); 2: the list is stale (a piece
that is not found exactly once in its file) or a test id that selects nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.util
import io
import json
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).with_name("mutants.toml")
# --assert=plain: pytest marks an installed plugin's whole distribution (harness) for assertion rewriting, and
# its import hook, placed first on sys.meta_path, would serve the module from disk ahead of the mutant; it does
# where the checkout is the editable install's own (CI, /work/main), not in another worktree
PYTEST_ARGS = ["-q", "-x", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "--no-header",
               "--tb=line", "-o", "addopts="]


@dataclass(frozen=True)
class Mutant:
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    why: str = ""

    @property
    def module(self) -> str:
        return self.file.removesuffix(".py").replace("/", ".")

    def label(self) -> str:
        first = self.find.strip().splitlines()[0]
        return f"{self.file}: {first[:70]!r} -> {self.replace.strip().splitlines()[0][:50] if self.replace.strip() else '(removed)'!r}"

    def mutated(self) -> str:
        return (REPO / self.file).read_text().replace(self.find, self.replace, 1)


class MutantError(ValueError):
    """The list does not match the code (a piece not found exactly once, a file that is gone)."""


def load(path: Path = MUTANTS) -> list[Mutant]:
    data = tomllib.loads(path.read_text())
    out = []
    for i, raw in enumerate(data.get("mutants", []), 1):
        unknown = set(raw) - {"file", "find", "replace", "test", "why"}
        if unknown or not {"file", "find", "replace", "test"} <= set(raw):
            raise MutantError(f"{path}: mutant {i}: needs file, find, replace, test (and may have why); got "
                              f"{sorted(raw)}")
        tests = (raw["test"],) if isinstance(raw["test"], str) else tuple(raw["test"])
        m = Mutant(raw["file"], raw["find"], raw["replace"], tests, raw.get("why", ""))
        source = REPO / m.file
        if not source.is_file():
            raise MutantError(f"{path}: mutant {i}: {m.file} does not exist")
        count = source.read_text().count(m.find)
        if count != 1:
            raise MutantError(f"{path}: mutant {i} ({m.file}): {m.find!r} is found {count} times, not once: the code "
                              "moved on; update the mutant to the code as it is")
        if m.find == m.replace:
            raise MutantError(f"{path}: mutant {i} ({m.file}): the replacement is the same text")
        for test in m.tests:
            if not (REPO / test.split("::")[0]).is_file():
                raise MutantError(f"{path}: mutant {i}: its test file {test.split('::')[0]} does not exist")
        out.append(m)
    return out


class _Serve(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from the mutated source, ahead of every other finder."""

    def __init__(self, mutant: Mutant):
        self.mutant, self.source = mutant, mutant.mutated()

    def find_spec(self, name, path=None, target=None):
        if name != self.mutant.module:
            return None
        return importlib.util.spec_from_loader(name, self, origin=str(REPO / self.mutant.file))

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = str(REPO / self.mutant.file)
        exec(compile(self.source, module.__file__, "exec"), module.__dict__)


def _forget() -> None:
    for name in list(sys.modules):
        if name in ("harness", "tests", "conftest") or name.startswith(("harness.", "tests.")):
            if name != __name__ and name != "tests.mutation":
                del sys.modules[name]


def run_tests(tests: tuple[str, ...], mutant: Mutant | None = None) -> tuple[int, str]:
    """pytest.main on ``tests`` in this process (with ``mutant`` served in place of its module): the exit
    code and the output's tail."""
    import pytest

    hook = _Serve(mutant) if mutant else None
    _forget()
    if hook:
        sys.meta_path.insert(0, hook)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = int(pytest.main([*PYTEST_ARGS, *tests]))
    finally:
        if hook:
            sys.meta_path.remove(hook)
        _forget()
    return rc, out.getvalue()[-2000:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutation.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", metavar="FILE", help="only the mutants of this file (repeatable)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write each mutant's outcome here")
    p.add_argument("--mutants", type=Path, default=MUTANTS, metavar="TOML",
                   help="another list in mutants.toml's format (a mutant tried before it joins the list)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    try:
        mutants = [m for m in load(args.mutants) if not args.only or m.file in args.only]
    except MutantError as exc:
        print(f"mutation check: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    every = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    rc, text = run_tests(every)
    if rc != 0:
        print(f"mutation check: the listed tests do not pass on the unmutated code (pytest exit {rc}):\n{text}",
              file=sys.stderr)
        return 1 if rc == 1 else 2
    control_s = time.perf_counter() - t0
    results, survivors, errors = [], [], []
    for m in mutants:
        t1 = time.perf_counter()
        rc, text = run_tests(m.tests, m)
        state = {0: "survived", 1: "killed"}.get(rc, f"error (pytest exit {rc})")
        results.append({"file": m.file, "find": m.find, "replace": m.replace, "tests": list(m.tests), "why": m.why,
                        "state": state, "seconds": round(time.perf_counter() - t1, 2)})
        print(f"{state:>8}  {m.label()}  [{time.perf_counter() - t1:.1f} s]", flush=True)
        if rc == 0:
            survivors.append(f"{m.label()}: {', '.join(m.tests)} passed with it ({m.why})")
        elif rc != 1:
            errors.append(f"{m.label()}: pytest exit {rc}: {text.strip().splitlines()[-1] if text.strip() else ''}")
    wall = time.perf_counter() - t0
    summary = {"mutants": len(mutants), "killed": sum(r["state"] == "killed" for r in results),
               "survived": survivors, "errors": errors, "control_s": round(control_s, 1), "seconds": round(wall, 1),
               "results": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"mutation check: {summary['killed']} of {len(mutants)} mutants killed, {len(survivors)} survived, "
          f"{len(errors)} errors, in {wall:.0f} s (control {control_s:.0f} s)")
    for line in survivors + errors:
        print(f"  {line}", file=sys.stderr)
    return 2 if errors else 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
