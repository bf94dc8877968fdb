"""Generated mutants: mutmut (3.x) over the modules whose decisions a user trusts, each with its fast unit
tests, and a report of the kill rate per module with every survivor's diff (issue 57). ``mutants.toml`` stays
the hand-written list CI must always kill (``tests.mutation.run``); this is the wider, slower audit
(``nox -s mutation``, not CI: minutes per module on 2 cores).

Each module runs alone, in a scratch copy of the checkout (the files git tracks or would track: never the
working tree, where mutmut writes its ``mutants/``), with a ``setup.cfg`` that mutates only that module and
selects only its tests. A survivor that is equivalent to the original (no test can tell them apart) is
marked in ``equivalent.toml`` (beside this file) with a one-line reason: the module, the original line and
the mutated line as the survivor's diff shows them (stripped), and ``why``. The kill rate is killed over
the generated mutants less those marked equivalent; a mutant no selected test reaches ("no tests") is a
survivor, not left out.

    python -m tests.mutation.generated [--module harness/core/stats.py ...] [--out DIR] [--floor 0.85]
    python -m tests.mutation.generated --merge DIR1/mutation.json DIR2/mutation.json ... --out DIR

Writes ``DIR/mutation.json`` and ``DIR/mutation.md`` (one row per module, each with the commit of the checkout
it ran on, "+modified" where tracked files differed from it); exit 0 when every module run is at the floor or
above, 1 when one is below it, 2 when mutmut could not run a module (its log is named). ``--merge`` writes one
report from several runs' ``mutation.json`` (modules run one at a time, or on several days): a module found in
more than one keeps its last run, in the order given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.core.storage import atomic_write_text

REPO = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).with_name("equivalent.toml")
FLOOR = 0.85
KILLED = ("killed", "timeout", "caught by type check", "segfault")

# module -> the fast unit tests that exercise it (its own, and those of the modules that call it)
A, C, R = "tests/unit/analysis/", "tests/unit/core/", "tests/unit/release/"
MODULES: dict[str, tuple[str, ...]] = {
    # test_thresholds runs the CLI in subprocesses, which cannot load mutmut's trampolines outside its mutants/
    "harness/analysis/gates.py": (A + "test_gates.py",),
    "harness/analysis/pairing.py": (A + "test_pairing.py", A + "test_pairing_figures.py", A + "test_verdict.py"),
    "harness/analysis/verdict.py": (A + "test_verdict.py", A + "test_verdict_report.py"),
    "harness/analysis/contract.py": (A + "test_contract.py", A + "test_contract_report.py", A + "test_tolerances.py",
                                     A + "test_side_rows.py", A + "test_contract_judgement.py",
                                     A + "test_contract_verdict.py", A + "test_signed_bias_gate.py"),
    "harness/analysis/threeway.py": (A + "test_threeway.py", A + "test_threeway_floors.py", A + "test_threeway_report.py",
                                     A + "test_threeway_bounds.py", A + "test_threeway_gaps.py",
                                     A + "test_signed_bias_gate.py", A + "test_contract_verdict.py",
                                     A + "test_contract.py"),
    "harness/analysis/side_checks.py": (A + "test_side_checks.py",),  # test_contract's 3x slower, nothing more here
    "harness/analysis/side_rows.py": (A + "test_side_rows.py", A + "test_contract.py"),
    "harness/analysis/work_section.py": (A + "test_work_section.py",),
    "harness/core/stats.py": (C + "test_stats.py", C + "test_sequential.py", A + "test_verdict.py",
                              A + "test_pairing.py"),
    "harness/core/sequential.py": (C + "test_sequential_edges.py", C + "test_sequential.py"),
    "harness/core/neuron_visibility.py": (C + "test_neuron_visibility.py", C + "test_neuron_cores.py"),
    "harness/core/neuron_cores.py": (C + "test_neuron_cores.py", R + "test_core_turns.py"),
    "harness/core/work.py": (C + "test_work.py", A + "test_work_section.py"),
    "harness/core/server_work.py": (C + "test_server_work.py", A + "test_work_section.py"),
    "harness/core/process_environment.py": (C + "test_process_environment.py", R + "test_side_env.py"),
    "harness/release/rounds.py": (R + "test_rounds.py", R + "test_rounds_lines.py"),
    "harness/release/cores.py": (R + "test_cores_record.py", R + "test_core_turns.py", R + "test_worker_cores.py",
                                 C + "test_neuron_efa.py"),
    "harness/release/plan.py": (R + "test_plan.py", R + "test_release_sides.py", R + "test_side_env.py",
                                R + "test_rounds.py", R + "test_leg_time.py", R + "test_rehearsed_legs.py"),
}


@dataclass(frozen=True)
class Equivalent:
    """A survivor no test can tell from the original: its module, the original and the mutated line."""

    module: str
    original: str
    mutated: str
    why: str

    def matches(self, module: str, diff: str) -> bool:
        removed, added = changed_lines(diff)
        return module == self.module and self.original.strip() in removed and self.mutated.strip() in added


@dataclass
class ModuleResult:
    module: str
    tests: list[str]
    statuses: dict[str, str] = field(default_factory=dict)  # mutant name -> mutmut's status
    survivors: list[dict[str, str]] = field(default_factory=list)  # name, status, diff (equivalent ones apart)
    equivalent: list[dict[str, str]] = field(default_factory=list)  # name, why, diff
    seconds: float = 0.0
    error: str = ""
    commit: str = ""  # the checkout's HEAD when it ran ("+modified": tracked files differed from it)

    @property
    def killed(self) -> int:
        return sum(s in KILLED for s in self.statuses.values())

    @property
    def counted(self) -> int:
        """The generated mutants less those marked equivalent: what the kill rate is over."""
        return len(self.statuses) - len(self.equivalent)

    @property
    def rate(self) -> float | None:
        return self.killed / self.counted if self.counted else None

    def to_dict(self) -> dict:
        return {**asdict(self), "killed": self.killed, "counted": self.counted, "rate": self.rate}

    @classmethod
    def from_dict(cls, data: dict) -> ModuleResult:
        """A module's result as ``to_dict`` wrote it (its derived killed, counted and rate recomputed)."""
        fields = {"module", "tests", "statuses", "survivors", "equivalent", "seconds", "error", "commit"}
        missing = {"module", "tests", "statuses"} - set(data)
        if missing:
            raise ValueError(f"a module's result needs {sorted(missing)}; got {sorted(data)}")
        return cls(**{k: v for k, v in data.items() if k in fields})


def checkout_commit(repo: Path = REPO) -> str:
    """The checkout's HEAD, with "+modified" where a tracked file differs from it (what the mutants ran on)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                           text=True).stdout.strip()
    return head.stdout.strip() + ("+modified" if dirty else "")


def merge(paths: list[Path]) -> list[ModuleResult]:
    """Several runs' ``mutation.json`` as one list: a module run more than once keeps its last run (in the
    order given), in the order each was first seen."""
    out: dict[str, ModuleResult] = {}
    for path in paths:
        try:
            modules = json.loads(Path(path).read_text())["modules"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"mutation: {path}: not a report's mutation.json ({type(exc).__name__}: {exc})")
        for data in modules:
            result = ModuleResult.from_dict(data)
            out[result.module] = result
    return list(out.values())


class EquivalentError(ValueError):
    """equivalent.toml holds an entry that is not a module, an original line, a mutated line and a reason."""


def load_equivalent(path: Path = EQUIVALENT) -> list[Equivalent]:
    if not path.is_file():
        return []
    out = []
    for i, raw in enumerate(tomllib.loads(path.read_text()).get("equivalent", []), 1):
        keys = {"module", "original", "mutated", "why"}
        if set(raw) != keys or not all(isinstance(raw[k], str) and raw[k].strip() for k in keys):
            raise EquivalentError(f"{path}: entry {i}: needs exactly module, original, mutated and a one-line why; "
                                  f"got {sorted(raw)}")
        if "\n" in raw["why"]:
            raise EquivalentError(f"{path}: entry {i}: why must be one line")
        out.append(Equivalent(raw["module"], raw["original"], raw["mutated"], raw["why"]))
    return out


_RESULT = re.compile(r"^\s*(?P<name>\S+__mutmut_\d+): (?P<status>.+?)\s*$")


def parse_results(text: str) -> dict[str, str]:
    """``mutmut results --all true``: one ``name: status`` line per mutant."""
    return {m["name"]: m["status"] for m in map(_RESULT.match, text.splitlines()) if m}


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """The removed and the added lines of a unified diff, stripped (its ``---`` / ``+++`` headers left out)."""
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return removed, added


def setup_cfg(module: str, tests: tuple[str, ...]) -> str:
    """mutmut's configuration for one module: the whole package copied (so every import resolves in its
    ``mutants/``), only ``module`` mutated, only ``tests`` run; the fixtures the tests read copied too."""
    selection = "\n".join(f"    {t}" for t in tests)
    return ("[mutmut]\nsource_paths = harness\n"
            f"only_mutate = {module}\n"
            "also_copy =\n    fixtures\n    ci\n    docs\n"
            f"pytest_add_cli_args_test_selection =\n{selection}\n"
            "pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -q\n    -x\n")


def scratch_copy(dest: Path) -> None:
    """The checkout's files (tracked, and untracked ones git would not ignore) copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def mutmut_command() -> list[str]:
    found = shutil.which("mutmut", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if found is None:
        raise SystemExit("mutation: mutmut is not installed here: `pip install 'mutmut>=3,<4'` (nox -s mutation "
                         "installs it)")
    return [found]


def run_module(module: str, tests: tuple[str, ...], equivalent: list[Equivalent], logs: Path,
               timeout: float) -> ModuleResult:
    result = ModuleResult(module, list(tests), commit=checkout_commit())
    t0 = time.perf_counter()
    mutmut = mutmut_command()
    log = logs / (module.replace("/", "_").removesuffix(".py") + ".log")
    with tempfile.TemporaryDirectory(prefix="carbon-mutation-") as tmp:
        work = Path(tmp)
        scratch_copy(work)
        (work / "setup.cfg").write_text(setup_cfg(module, tests))
        with open(log, "w") as out:
            try:
                rc = subprocess.run([*mutmut, "run", "--max-children", "1"], cwd=work, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        listed = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, capture_output=True, text=True)
        result.statuses = parse_results(listed.stdout)
        if rc != 0 or not result.statuses:
            result.error = f"mutmut run: exit {rc}, {len(result.statuses)} mutants listed; its log: {log}"
        for name, status in sorted(result.statuses.items()):
            if status in KILLED:
                continue
            diff = subprocess.run([*mutmut, "show", name], cwd=work, capture_output=True, text=True).stdout
            marked = next((e for e in equivalent if e.matches(module, diff)), None)
            if marked is not None:
                result.equivalent.append({"name": name, "why": marked.why, "diff": diff})
            else:
                result.survivors.append({"name": name, "status": status, "diff": diff})
    result.seconds = round(time.perf_counter() - t0, 1)
    return result


def markdown(results: list[ModuleResult], floor: float) -> str:
    lines = ["# Generated mutants (mutmut)", "",
             f"Kill rate = killed / (generated - marked equivalent); floor {100 * floor:.0f}% per module.", "",
             "| module | generated | killed | survived | equivalent | kill rate | floor | seconds | commit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rate = "-" if r.rate is None else f"{100 * r.rate:.1f}%"
        ok = "error" if r.error else ("yes" if r.rate is not None and r.rate >= floor else "no")
        commit = r.commit[:12] + ("+modified" if r.commit.endswith("+modified") else "") if r.commit else "-"
        lines.append(f"| `{r.module}` | {len(r.statuses)} | {r.killed} | {len(r.survivors)} | {len(r.equivalent)} | "
                     f"{rate} | {ok} | {r.seconds:g} | {commit} |")
    for r in results:
        if r.error:
            lines += ["", f"**{r.module}**: {r.error}"]
        if r.survivors:
            lines += ["", f"## Survivors of `{r.module}`", ""]
            for s in r.survivors:
                lines += [f"`{s['name']}` ({s['status']}):", "", "```diff", s["diff"].strip(), "```", ""]
        if r.equivalent:
            lines += ["", f"Marked equivalent in `{r.module}`:", ""]
            lines += [f"- `{e['name']}`: {e['why']}" for e in r.equivalent]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutation.generated", description=__doc__.split("\n\n")[0])
    p.add_argument("--module", action="append", choices=sorted(MODULES), metavar="FILE",
                   help="a module to mutate (repeatable; default every listed one, one at a time)")
    p.add_argument("--out", type=Path, default=REPO / ".nox" / "mutation", help="where the report goes")
    p.add_argument("--floor", type=float, default=FLOOR, help="the kill rate each module must reach")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds one module's mutmut run may take")
    p.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                   help="write one report from these runs' mutation.json instead of running mutmut")
    args = p.parse_args(argv)
    if args.merge:
        if args.module:
            p.error("--merge reads finished runs: it takes no --module")
        results = merge(args.merge)
        write_report(args.out, results, args.floor)
        print(f"mutation: {len(results)} modules from {len(args.merge)} runs; report in {args.out / 'mutation.md'}")
        return verdict(results, args.floor)
    equivalent = load_equivalent()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for module in args.module or sorted(MODULES):
        print(f"mutation: {module} ({', '.join(MODULES[module])})", flush=True)
        results.append(run_module(module, MODULES[module], equivalent, args.out, args.timeout))
        r = results[-1]
        rate = "-" if r.rate is None else f"{100 * r.rate:.1f}%"
        print(f"mutation: {module}: {r.killed} of {r.counted} killed ({rate}), {len(r.survivors)} survivors, "
              f"{len(r.equivalent)} marked equivalent, {r.seconds:g} s" + (f"; {r.error}" if r.error else ""),
              flush=True)
        write_report(args.out, results, args.floor)  # after each module
    print(f"mutation: report in {args.out / 'mutation.md'}")
    return verdict(results, args.floor)


def write_report(out: Path, results: list[ModuleResult], floor: float) -> None:
    summary = {"floor": floor, "modules": [x.to_dict() for x in results]}
    atomic_write_text(out / "mutation.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(out / "mutation.md", markdown(results, floor))


def verdict(results: list[ModuleResult], floor: float) -> int:
    if any(r.error for r in results):
        return 2
    return 0 if all(r.rate is not None and r.rate >= floor for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
