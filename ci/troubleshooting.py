"""Generate docs/troubleshooting.md from the harness's source: one entry per error message it can print.

Usage (from the repository root)::

    python ci/troubleshooting.py --write      # rewrite docs/troubleshooting.md
    python ci/troubleshooting.py --check      # exit 1 if the page is stale or an entry lacks its cause
    python ci/troubleshooting.py --missing    # print YAML stubs for the raise sites without a cause
    python ci/troubleshooting.py --find 'carbon-harness plan: error: ...'   # which entry a pasted error is

Why generated: the messages live in the code and change with it; a page copied by hand goes stale the day a
message is reworded. The scan reads source text with ``ast`` only (it imports nothing from ``harness``), so
it sits outside the package and climbs no layer. What it finds:

- ``raise X(<message>)`` and ``return XError(<message>)`` (an error built for a caller to raise);
- usage lines: ``parser.error(...)``, ``sys.exit("...")``, ``pytest.exit(...)``, ``raise SystemExit(...)``,
  ``raise pytest.UsageError(...)``, ``raise argparse.ArgumentTypeError(...)`` (argparse prints these);
- ``print(..., file=sys.stderr)`` directly followed by ``return N`` with N nonzero (a CLI's exit path).

A message is a string, an f-string, a ``+`` / ``%`` of those, or a name assigned one of them in the same
function; its f-string fields become ``<name>`` placeholders. What causes an error and what to do cannot be
read from the code: that is data, ``ci/troubleshooting_causes.yaml``, keyed by module and by the message's
pattern (``Class: pattern``), written by a person who read the code around the raise. A message that is
reworded, added or removed makes tests/unit/test_troubleshooting.py fail until the data follows.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"
CAUSES = ROOT / "ci" / "troubleshooting_causes.yaml"
COMMAND = "python ci/troubleshooting.py --write"
USAGE = "usage"  # the class shown for parser.error / sys.exit / stderr-and-return lines
MESSAGE = "message"  # text returned by a *_message / *_problem / *_error / *_unavailable_reason function
MESSAGE_FUNCTIONS = re.compile(r"(_message|_problem|_error|unavailable_reason)$")


@dataclass(frozen=True)
class Hole:
    """An f-string field: the value the user sees in its place is only known at run time."""

    name: str


Part = str | Hole


@dataclass
class Entry:
    """One message as a user sees it, at every line of one module that raises it."""

    module: str
    cls: str
    parts: tuple[Part, ...]
    lines: list[int] = field(default_factory=list)
    wraps: bool = False  # the message embeds a caught exception's text: a more specific entry explains it

    @property
    def pattern(self) -> str:
        return "".join(p if isinstance(p, str) else f"<{p.name}>" for p in self.parts)

    @property
    def key(self) -> str:
        return f"{self.cls}: {self.pattern}"

    @property
    def literal(self) -> int:
        return sum(len(p) for p in self.parts if isinstance(p, str))

    def regex(self) -> re.Pattern[str]:
        return re.compile("".join(re.escape(p) if isinstance(p, str) else "(.*?)" for p in self.parts), re.DOTALL)


def hole_name(node: ast.expr) -> str:
    if isinstance(node, (ast.Name, ast.Attribute)):
        text = ast.unparse(node)
        return text if len(text) <= 32 else "value"
    if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
        return hole_name(node.value)
    return "value"


def merge(parts: list[Part]) -> list[Part]:
    out: list[Part] = []
    for p in parts:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    return out


def message_parts(node: ast.expr, assigned: dict[str, ast.expr], depth: int = 0) -> list[Part]:
    """The message an expression builds, literal text and holes; an unreadable expression is one hole."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts: list[Part] = []
        for v in node.values:
            parts += [v.value] if isinstance(v, ast.Constant) else [Hole(hole_name(v.value))]  # type: ignore[attr-defined]
        return merge(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return merge(message_parts(node.left, assigned, depth) + message_parts(node.right, assigned, depth))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        pieces = re.split(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfgx]", str(node.left.value))
        return merge([x for i, s in enumerate(pieces) for x in ([Hole("value")] if i else []) + [s]])
    if isinstance(node, ast.Name) and node.id in assigned and depth < 3:
        return message_parts(assigned[node.id], assigned, depth + 1)
    return [Hole(hole_name(node))]


def is_message(node: ast.expr) -> bool:
    return (isinstance(node, (ast.JoinedStr, ast.BinOp, ast.Name, ast.IfExp))
            or isinstance(node, ast.Constant) and isinstance(node.value, str))


class Scanner(ast.NodeVisitor):
    """Collects the message sites of one module; tracks the enclosing function's simple string assignments
    (``msg = f"..."``), its parameters' defaults (``error: type = ValueError``) and ``except ... as exc``."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.found: list[tuple[int, str, list[Part], bool]] = []
        self.assigned: dict[str, ast.expr] = {}
        self.defaults: dict[str, str] = {}
        self.caught: set[str] = set()
        self.function = ""

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = self.assigned, self.defaults, self.caught, self.function
        self.function = node.name
        self.assigned = {t.id: n.value for n in ast.walk(node) if isinstance(n, ast.Assign) and len(n.targets) == 1
                         for t in n.targets if isinstance(t, ast.Name) and is_message(n.value)}
        args = node.args.args + node.args.kwonlyargs
        defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults + node.args.kw_defaults
        self.defaults = {a.arg: d.id for a, d in zip(args, defaults) if isinstance(d, ast.Name)}
        self.caught = set()
        self.generic_visit(node)
        self.assigned, self.defaults, self.caught, self.function = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        had = node.name in self.caught if node.name else True
        if node.name:
            self.caught.add(node.name)
        self.generic_visit(node)
        if node.name and not had:
            self.caught.discard(node.name)

    def add(self, node: ast.AST, cls: str, message: ast.expr | None) -> None:
        if isinstance(message, ast.IfExp):  # parser.error("a" if x else "b"): two messages
            for branch in (message.body, message.orelse):
                if is_message(branch):
                    self.add(branch, cls, branch)
            return
        parts = message_parts(message, self.assigned) if message is not None else [Hole("no message")]
        used = {n.id for n in ast.walk(message) if isinstance(n, ast.Name)} if message is not None else set()
        self.found.append((node.lineno, cls, parts, bool(used & self.caught)))  # type: ignore[attr-defined]

    def error_call(self, call: ast.expr, constructed: bool) -> None:
        if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Name, ast.Attribute)):
            return
        name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
        name = self.defaults.get(name, name)
        if constructed and not re.search(r"(Error|Exit)$", name):
            return
        if not name[:1].isupper():
            return  # raise self.died(): the message is built where the error is constructed (a return)
        if name == "SystemExit" and call.args and not is_message(call.args[0]):
            return  # an exit status
        self.add(call, USAGE if name == "SystemExit" else name, call.args[0] if call.args else None)

    def visit_Raise(self, node: ast.Raise) -> None:
        if node.exc is not None:
            self.error_call(node.exc, constructed=False)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.error_call(node.value, constructed=True)
            if MESSAGE_FUNCTIONS.search(self.function) and is_message(node.value) and not (
                    isinstance(node.value, ast.Name) and node.value.id not in self.assigned):
                self.add(node, MESSAGE, node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = ast.unparse(node.func)
        if (f.endswith("parser.error") or f in ("sys.exit", "pytest.exit")) and node.args and is_message(node.args[0]):
            self.add(node, USAGE, node.args[0])
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                self.stderr_exits(block)
        super().generic_visit(node)

    def stderr_exits(self, block: list[ast.stmt]) -> None:
        """``print(msg, file=sys.stderr)`` then ``return N`` (N != 0): a CLI's error line and its exit."""
        for stmt, nxt in zip(block, block[1:]):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                    and ast.unparse(stmt.value.func) == "print" and stmt.value.args):
                continue
            to_stderr = any(k.arg == "file" and ast.unparse(k.value) == "sys.stderr" for k in stmt.value.keywords)
            exits = (isinstance(nxt, ast.Return) and isinstance(nxt.value, ast.Constant)
                     and isinstance(nxt.value.value, int) and nxt.value.value != 0)
            if to_stderr and exits:
                self.add(stmt, USAGE, stmt.value.args[0])


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> tuple[str, ast.Module]:
    """A module's tree, parsed once per process (the scan and the class list both read every module)."""
    text = path.read_text(encoding="utf-8")
    return text, ast.parse(text, filename=str(path))


def scan(root: Path = ROOT) -> dict[tuple[str, str], Entry]:
    """(module, key) -> entry, for every module under ``harness/``."""
    entries: dict[tuple[str, str], Entry] = {}
    for path in sorted((root / "harness").rglob("*.py")):
        module = path.relative_to(root).as_posix()
        scanner = Scanner(module)
        scanner.visit(parsed(path)[1])
        for line, cls, parts, wraps in sorted(scanner.found, key=lambda f: f[0]):
            e = Entry(module, cls, tuple(parts), wraps=wraps)
            entry = entries.setdefault((module, e.key), e)
            entry.lines.append(line)
    return entries


def error_classes(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """Class name -> (its bases, the first line of its docstring), for the harness's own errors."""
    out: dict[str, tuple[str, str]] = {}
    for path in sorted((root / "harness").rglob("*.py")):
        for node in ast.walk(parsed(path)[1]):
            if isinstance(node, ast.ClassDef) and re.search(r"(Error|Cannot|Missing|Called|Honoured|Rewritten|"
                                                            r"Logprobs)$", node.name):
                doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
                out[node.name] = (", ".join(ast.unparse(b) for b in node.bases), doc)
    return out


def load_causes(path: Path = CAUSES) -> dict[tuple[str, str], dict[str, str]]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {(module, key): value for module, items in data.items() for key, value in (items or {}).items()}


def problems(entries: dict[tuple[str, str], Entry], causes: dict[tuple[str, str], dict[str, str]]) -> list[str]:
    """What keeps the page and its data in step: a site without a cause, a cause without a site."""
    out = [f"{m}:{entries[(m, k)].lines[0]}: no cause/fix in {CAUSES.name} for {k!r}"
           for m, k in entries if (m, k) not in causes]
    out += [f"{CAUSES.name}: {m}: {k!r} is raised nowhere any more (reworded or removed): update or delete it"
            for m, k in causes if (m, k) not in entries]
    out += [f"{CAUSES.name}: {m}: {k!r} needs both a non-empty 'cause' and 'fix'"
            for (m, k), v in causes.items()
            if not isinstance(v, dict) or not str(v.get("cause", "")).strip() or not str(v.get("fix", "")).strip()]
    return out


def fence(text: str) -> str:
    ticks = "`" * max(3, 1 + max((len(t) for t in re.findall(r"`+", text)), default=0))
    return f"{ticks}text\n{text}\n{ticks}"


def title(cls: str) -> str:
    return {USAGE: "Usage lines (argparse, exits, stderr)",
            MESSAGE: "Reasons other errors carry (a backend, server or artifact that cannot be used)"}.get(cls, cls)


def render(entries: dict[tuple[str, str], Entry], causes: dict[tuple[str, str], dict[str, str]],
           classes: dict[str, tuple[str, str]]) -> str:
    by_class: dict[str, list[Entry]] = {}
    for e in entries.values():
        by_class.setdefault(e.cls, []).append(e)
    order = sorted(by_class, key=lambda c: (c != USAGE, c == MESSAGE, c.lower()))
    out = [f"<!-- Generated by `{COMMAND}` from the harness's source and ci/troubleshooting_causes.yaml. -->",
           "<!-- Do not edit: change the message in the code or its cause/fix in the YAML, then regenerate. -->",
           "", "# Troubleshooting", "",
           f"Every error message the harness can print, {len(entries)} of them, found in its source: paste the "
           "fixed words of your error into the browser's find or the site search. A `<name>` in a message "
           "stands for a value filled in at run time (a path, a model name, a number). Under pytest the "
           "harness's configuration errors print as `ERROR: carbon-harness: <message>`; under the "
           "`carbon-harness` command as `carbon-harness <command>: error: <message>`, exit status 2.", "",
           "To look a pasted error up from a checkout: `python ci/troubleshooting.py --find '<the error>'`. "
           "With `CARBON_HARNESS_TRACEBACK=1` set, `carbon-harness` prints where an error came from (its traceback) "
           "before the one line, for a report.", ""]
    for cls in order:
        bases, doc = classes.get(cls, ("", ""))
        out += [f"## {title(cls)}", ""]
        if bases or doc:
            out += [" ".join(x for x in (f"A subclass of `{bases}`." if bases else "", doc) if x), ""]
        for e in sorted(by_class[cls], key=lambda e: (e.module, e.lines[0])):
            c = causes.get((e.module, e.key), {})
            where = ", ".join(f"{e.module}:{n}" for n in e.lines)
            out += [fence(e.pattern), "", f"Source: `{where}`.", "",
                    f"- **Cause:** {str(c.get('cause', 'MISSING')).strip()}",
                    f"- **Fix:** {str(c.get('fix', 'MISSING')).strip()}", ""]
    return "\n".join(out).rstrip() + "\n"


def find(message: str, entries: dict[tuple[str, str], Entry]) -> Entry | None:
    """The entry a pasted error is: the matching pattern with the most fixed text, preferring an entry that
    states the error over one that only wraps another's message (``carbon-harness plan: error: <exc>``).
    A pattern that is all placeholder matches anything and is never chosen."""
    text = message.strip()
    best = [e for e in entries.values() if e.literal >= 8 and e.regex().search(text)]
    return max(best, key=lambda e: (not e.wraps, e.literal), default=None)


def stubs(missing: list[Entry]) -> str:
    import yaml

    data: dict[str, dict[str, dict[str, str]]] = {}
    for e in missing:
        data.setdefault(e.module, {})[e.key] = {"cause": "", "fix": ""}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {PAGE.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale or the data incomplete")
    parser.add_argument("--missing", action="store_true", help="print YAML stubs for sites without a cause")
    parser.add_argument("--find", metavar="MESSAGE", help="print the entry a pasted error message matches")
    args = parser.parse_args(argv)
    entries, causes = scan(), load_causes()
    if args.find is not None:
        e = find(args.find, entries)
        if e is None:
            print("no entry matches; search docs/troubleshooting.md for a few fixed words of it", file=sys.stderr)
            return 1
        c = causes.get((e.module, e.key), {})
        print(f"{e.key}\n  at {e.module}:{e.lines[0]}\n  cause: {c.get('cause')}\n  fix: {c.get('fix')}")
        return 0
    if args.missing:
        print(stubs([e for k, e in entries.items() if k not in causes]), end="")
        return 0
    bad = problems(entries, causes)
    page = render(entries, causes, error_classes())
    if args.write:
        tmp = PAGE.with_suffix(".md.tmp")
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(PAGE)
        print(f"wrote {PAGE.relative_to(ROOT)}: {len(entries)} entries", file=sys.stderr)
    elif not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != page:
        bad.append(f"{PAGE.relative_to(ROOT)} is stale: run `{COMMAND}`")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
