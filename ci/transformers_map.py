"""Which test files depend on the transformers release: the list nox's ``latest`` session runs.

Why measured, not guessed: the suite runs in full once (``trn2-stack``, transformers 4.57); the newest
transformers needs only the tests whose outcome can depend on what differs between the two
environments. ``pip freeze`` of ``.nox/trn2-stack`` against ``.nox/latest`` differs in transformers,
tokenizers and huggingface_hub (and their own dependencies), so a test depends on the release if it,
or any process it starts, runs a line of those packages, or a line of the harness that calls into
tokenizers' compiled core (``CALL_SITES``: coverage cannot see inside Rust), or if the test file imports
those packages (or the harness modules that call them: ``REACHES``) itself.

    # in the newest-transformers environment (nox -s latest builds it), with coverage installed there
    python ci/transformers_map.py record --python .nox/latest/bin/python --out /tmp/tmap
    python ci/transformers_map.py analyse /tmp/tmap --out ci/transformers-tests.txt

``record`` runs ``pytest -m "not perf"`` in one process (no xdist: each test's lines are recorded
under its node id, and the subprocesses it starts under the same id); ``analyse`` writes the test
files whose tests ran such a line, one a line, with how it was measured.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "transformers_map"
PACKAGES = ("transformers", "tokenizers", "huggingface_hub")
# harness modules whose lines call into tokenizers' Rust objects, and the pattern of those lines
CALL_SITES = {"harness/carbon/tokenizer.py": r"\b_bpe\.",
              "harness/carbon/fastbpe.py": r"\b_tok\.|\btokenizer\.(get_added|normalizer|pre_tokenizer|model|truncation|padding)"}
NODE = re.compile(r"(tests/[^|:]+\.py)::")
# modules whose import means a test file calls transformers or tokenizers code itself (the packages, and the
# harness modules that call them): the static half of the list, for what coverage cannot see (a test calling
# tokenizers' Rust objects from its own body)
REACHES = ("transformers", "tokenizers", "huggingface_hub", "harness.backends.hf", "harness.carbon.tokenizer_reference",
           "harness.carbon.batch_encoding")
# dependent, left to other sessions, and why
EXCLUDED = {
    "tests/unit/test_trn2_host.py": "simulates a Trn2 host, where NxDI pins transformers 4.57: the newest is never "
                                    "installed there (190 s of the unit tier in a child)",
    "tests/compat/test_neuron_scoring.py": "the NxDI CPU tier: NxDI pins transformers 4.57 (runs in trn2-stack)",
    "tests/perf/test_tokenizer_speed.py": "benchmarks only (the newest transformers' benchmarks run in release-check's "
                                          "transformers pair)",
    "tests/unit/test_mutation.py": "the gate's rules under mutation (sequential, pairing, rounds: no model); its only "
                                   "package lines are huggingface_hub's import in the harness modules it reloads",
    "tests/unit/test_troubleshooting.py": "reads source text only; no transformers (its error paths are a spec "
                                          "lookup, the thresholds loader and carbon-harness plan/cost)",
    "tests/release/test_served_release.py": "whole release checks, run by nox's release-check sessions (its "
                                            "transformers pair sets 4.57 against the newest)",
    "tests/docs/test_commands.py": "the docs' commands, parsed by the harness's own parsers and collected once, in "
                                   "trn2-stack (the commands are the same under any transformers; a second pass in "
                                   "latest would double its cost)",
}


def record(python: str, out: Path, pytest_args: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CARBON_MAP_DIR=str(out.resolve()),
               CARBON_MAP_PACKAGES=",".join(PACKAGES + ("harness.carbon.tokenizer", "harness.carbon.fastbpe")),
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("CARBON_MAP_TEST", None)
    cmd = [python, "-m", "pytest", "-p", "carbon_map_plugin", "-p", "no:cacheprovider", "-m", "not perf", "-q",
           *pytest_args]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    subprocess.run([python, "-m", "coverage", "combine", "--data-file", str(out / ".coverage"), str(out)],
                   cwd=ROOT, check=True)
    (out / "record.txt").write_text(f"{dt.date.today().isoformat()} {python} rc={rc} {' '.join(pytest_args)}\n")
    return rc


def call_site_lines(path: Path, pattern: str) -> set[int]:
    rx = re.compile(pattern)
    return {i for i, line in enumerate(path.read_text().splitlines(), 1) if rx.search(line)}


def listed(path: Path) -> list[str]:
    """The test files a list names (comments and blank lines ignored)."""
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def imported(path: Path) -> set[str]:
    """The modules a test file imports, anywhere in it (a test's own body included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def importing_files() -> dict[str, set[str]]:
    """Test file -> the modules of ``REACHES`` it imports itself."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        hits = {r for n in imported(path) for r in REACHES if n == r or n.startswith(r + ".")}
        if hits:
            found[path.relative_to(ROOT).as_posix()] = {f"imports {h}" for h in hits}
    return found


def dependent_files(data_file: Path) -> dict[str, set[str]]:
    """Test file -> the packages (or call sites) its tests ran."""
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    sites = {f: call_site_lines(ROOT / f, p) for f, p in CALL_SITES.items()}
    found: dict[str, set[str]] = {}
    for measured in data.measured_files():
        norm = measured.replace(os.sep, "/")
        package = next((p for p in PACKAGES if f"/site-packages/{p}/" in norm), None)
        site = next((f for f in CALL_SITES if norm.endswith(f)), None)
        if package is None and site is None:
            continue
        for line, contexts in (data.contexts_by_lineno(measured) or {}).items():
            if site is not None and line not in sites[site]:
                continue
            for context in contexts:
                m = NODE.search(context)
                if m:
                    found.setdefault(m.group(1), set()).add(package or f"{site} (tokenizers call site)")
    return found


def analyse(folder: Path, out: Path) -> str:
    found = dependent_files(folder / ".coverage")
    for test_file, why in importing_files().items():
        found.setdefault(test_file, set()).update(why)
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    unmeasured = (folder / "unmeasured.txt").read_text().splitlines() if (folder / "unmeasured.txt").is_file() else []
    how = (folder / "record.txt").read_text().strip() if (folder / "record.txt").is_file() else "?"
    lines = ["# Test files whose tests (or the processes they start) run transformers, tokenizers or huggingface_hub:",
             "# the packages that differ between the Trn2 stack's environment and the newest. nox's `latest` session",
             "# runs these. Regenerate: see ci/transformers_map.py. Recorded: " + how,
             f"# {len(found)} of {len(every)} test files; processes not measured (no coverage in their env): "
             f"{len(unmeasured)}"]
    lines += [f"{f}  # {', '.join(sorted(found[f]))}" for f in sorted(found) if f not in EXCLUDED]
    lines += [f"# excluded: {f}: {why}" for f, why in sorted(EXCLUDED.items()) if f in found]
    text = "\n".join(lines) + "\n"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record")
    r.add_argument("--python", required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("pytest_args", nargs="*")
    a = sub.add_parser("analyse")
    a.add_argument("folder", type=Path)
    a.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "record":
        return record(args.python, args.out, args.pytest_args)
    print(analyse(args.folder, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
