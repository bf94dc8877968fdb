"""Generate the troubleshooting pages (docs/troubleshooting.md, docs/troubleshooting/<group>.md), and the data
``carbon-harness explain`` reads, from the harness's source: one entry per error message it can print.

Usage (from the repository root)::

    python ci/troubleshooting.py --write      # rewrite docs/troubleshooting*.md and harness/data/troubleshooting.json
    python ci/troubleshooting.py --check      # exit 1 if either is stale or an entry lacks its cause
    python ci/troubleshooting.py --missing    # print YAML stubs for the raise sites without a cause

To look a pasted error up: ``carbon-harness explain '<the error>'`` (``harness.core.troubleshooting``, which
reads the data file this writes: the lookup is the installed package's, not this script's).

Why generated: the messages live in the code and change with it; a page copied by hand goes stale the day a
message is reworded. The scan reads source text with ``ast`` only (it imports nothing from ``harness``), so
it sits outside the package and climbs no layer. What it finds:

- ``raise X(<message>)`` and ``return XError(<message>)`` (an error built for a caller to raise);
- usage lines: ``parser.error(...)``, ``sys.exit("...")``, ``pytest.exit(...)``, ``raise SystemExit(...)``,
  ``raise pytest.UsageError(...)``, ``raise argparse.ArgumentTypeError(...)`` (argparse prints these);
- ``print(..., file=sys.stderr)`` directly followed by ``return N`` with N nonzero (a CLI's exit path).

A message is a string, an f-string, a ``+`` / ``%`` of those, or a name assigned one of them in the same
function; its f-string fields become ``<name>`` placeholders. A call to ``explain_pointer`` in a message is
the pointer to its entry that the printing code adds, not message text: it is left out. What causes an error
and what to do cannot be read from the code: that is data, ``ci/troubleshooting_causes.yaml``, keyed by module
and by the message's pattern (``Class: pattern``), written by a person who read the code around the raise. A
message that is reworded, added or removed makes tests/unit/test_troubleshooting.py fail until the data follows.

The page has one entry per message a user can see:

- The same message raised in several places (the same text with the placeholders anonymised) is one entry
  listing its raise sites, with each site's cause where they differ.
- A message that is only placeholders (``<value>``: another error's text passed on) has no words to show,
  so its heading is its cause's first clause (or the cause's ``title``).
- Each entry's heading carries a short id as its anchor, ``<first words of the message>-<4 hex digits>``, the
  digits a hash of the message's fixed text (of module, class and message where the message is all
  placeholders): the same message keeps its anchor across regenerations whatever moves around it. A cause may
  pin an ``id`` of its own (to keep an anchor through a rewording).
- Entries are grouped by what the user was doing (``GROUPS``), found from the raising module (``MODULE_GROUPS``;
  a cause may name its ``group`` instead), one page per group (``docs/troubleshooting/<group>.md``); the index,
  docs/troubleshooting.md, keeps every entry's anchor with a link to its page, so a link from before the split
  still lands. Each anchor is an ``<a id>`` line before its heading: GitHub keeps it, and the site's build
  makes it the heading's id (ci/mkdocs_anchors.py).
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"  # the index: each group's page, and every old anchor's new place
PAGES = ROOT / "docs" / "troubleshooting"  # one page per group: docs/troubleshooting/<group>.md
DATA = ROOT / "harness" / "data" / "troubleshooting.json"
CAUSES = ROOT / "ci" / "troubleshooting_causes.yaml"
COMMAND = "python ci/troubleshooting.py --write"
USAGE = "usage"  # the class shown for parser.error / sys.exit / stderr-and-return lines
MESSAGE = "message"  # text returned by a *_message / *_problem / *_error / *_unavailable_reason function
MESSAGE_FUNCTIONS = re.compile(r"(_message|_problem|_error|unavailable_reason)$")
POINTER_FUNCTIONS = {"explain_pointer"}  # harness.core.troubleshooting: the entry's pointer, not message text
CAUSE_KEYS = {"cause", "fix", "title", "group", "id"}

# What the user was doing, in the page's order: (anchor, heading, one line on what is in it).
GROUPS = [
    ("install", "Installing: dependencies, extras and NxDI source trees",
     "A package, an extra or an NxDI checkout that the command needs is not there."),
    ("run", "Running the tests: pytest and its --carbon-* options",
     "`pytest -m perf / compat / dna` and the plugin's options, the engines and workloads they drive."),
    ("models", "Models, shapes, hardware profiles and plans",
     "The names every command and option takes, and `carbon-harness plan` / `cost`."),
    ("checkpoints", "Checkpoints, the cache, the tokenizer and DNA inputs",
     "`carbon-harness checkpoint` / `golden`, the checkpoint cache, the Carbon tokenizer, variant and DNA inputs."),
    ("reports", "Thresholds, reports and compare",
     "Thresholds files and `carbon-harness thresholds`, `report`, `compare`."),
    ("release", "The release check",
     "`carbon-harness release-check`, `contract-zoo` and the gate-power tools."),
    ("serving", "Serving: vLLM and OpenAI endpoints",
     "`--carbon-serve vllm`, `--carbon-endpoint`, `carbon-harness vllm-serve` and the serving benchmarks."),
    ("trn2", "Trainium2 and NxDI: NeuronCores, neuron-ls, compiled models",
     "On a Trn2 host: the NxDI engine, its compiled artifacts, NeuronCore plans and what neuron-ls reports."),
]
GROUP_IDS = [g for g, _, _ in GROUPS]
# The raising module's group: the first prefix that the module's path starts with.
MODULE_GROUPS = [
    ("harness/backends/neuron/sources.py", "install"),
    ("harness/backends/neuron/stubs.py", "install"),
    ("harness/backends/neuron/stub_allowlist.py", "install"),
    ("harness/backends/neuron/", "trn2"),
    ("harness/core/neuron_", "trn2"),
    ("harness/core/device_context.py", "trn2"),
    ("harness/release/cores.py", "trn2"),
    ("harness/release/devices.py", "trn2"),
    ("harness/release/device_options.py", "trn2"),
    ("harness/release/", "release"),
    ("harness/workloads/threeway.py", "release"),
    ("harness/serving/", "serving"),
    ("harness/backends/openai.py", "serving"),
    ("harness/core/vllm_neuron.py", "serving"),
    ("harness/core/ports.py", "serving"),
    ("harness/session/servers.py", "serving"),
    ("harness/analysis/speculation_plan.py", "models"),
    ("harness/analysis/", "reports"),
    ("harness/carbon/", "checkpoints"),
    ("harness/core/vocab.py", "checkpoints"),
    ("harness/core/storage.py", "checkpoints"),
    ("harness/cli.py", "models"),
    ("harness/core/spec.py", "models"),
    ("harness/core/hardware.py", "models"),
    ("harness/core/plan.py", "models"),
    ("harness/core/cost.py", "models"),
    ("harness/core/speculation.py", "models"),
    ("harness/", "run"),
]


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


def is_pointer(node: ast.expr) -> bool:
    """``explain_pointer(...)``: the entry's pointer that the printing code appends, not the message."""
    return isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) \
        in POINTER_FUNCTIONS


def message_parts(node: ast.expr, assigned: dict[str, ast.expr], depth: int = 0) -> list[Part]:
    """The message an expression builds, literal text and holes; an unreadable expression is one hole."""
    if is_pointer(node):
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts: list[Part] = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(v.value)
            elif not is_pointer(v.value):  # type: ignore[attr-defined]
                parts.append(Hole(hole_name(v.value)))  # type: ignore[attr-defined]
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


def load_causes(path: Path = CAUSES) -> dict[tuple[str, str], dict[str, str]]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {(module, key): value for module, items in data.items() for key, value in (items or {}).items()}


def problems(entries: dict[tuple[str, str], Entry], causes: dict[tuple[str, str], dict[str, str]]) -> list[str]:
    """What keeps the page and its data in step: a site without a cause, a cause without a site, a cause that
    is not a cause and a fix, or that names a key or group the page does not know."""
    out = [f"{m}:{entries[(m, k)].lines[0]}: no cause/fix in {CAUSES.name} for {k!r}"
           for m, k in entries if (m, k) not in causes]
    out += [f"{CAUSES.name}: {m}: {k!r} is raised nowhere any more (reworded or removed): update or delete it"
            for m, k in causes if (m, k) not in entries]
    out += [f"{CAUSES.name}: {m}: {k!r} needs both a non-empty 'cause' and 'fix'"
            for (m, k), v in causes.items()
            if not isinstance(v, dict) or not str(v.get("cause", "")).strip() or not str(v.get("fix", "")).strip()]
    out += [f"{CAUSES.name}: {m}: {k!r}: unknown key(s) {sorted(set(v) - CAUSE_KEYS)}; keys: {sorted(CAUSE_KEYS)}"
            for (m, k), v in causes.items() if isinstance(v, dict) and set(v) - CAUSE_KEYS]
    out += [f"{CAUSES.name}: {m}: {k!r}: group {v['group']!r}; groups: {', '.join(GROUP_IDS)}"
            for (m, k), v in causes.items() if isinstance(v, dict) and "group" in v and v["group"] not in GROUP_IDS]
    return out


def group_of(module: str) -> str:
    return next(g for prefix, g in MODULE_GROUPS if module.startswith(prefix))


def fixed_text(parts: tuple[Part, ...]) -> tuple[str, ...]:
    """The message's literal text between its placeholders, adjacent placeholders counted as one: what tells
    two messages apart on a user's screen (``<field><value>`` and ``<value>`` print alike)."""
    out, hole = [""], False
    for p in parts:
        if isinstance(p, str):
            out[-1] += p
            hole = False
        elif not hole:
            out.append("")
            hole = True
    return tuple(out)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def only_placeholders(fixed: tuple[str, ...]) -> bool:
    """Fewer than two words of fixed text (``<value>``, ``<path>: <exc>``, ``--headroom <exc>``): nothing a
    user could recognise or search for."""
    return len(re.findall(r"[A-Za-z]{2,}", "".join(fixed))) < 2


def one_line(text: str) -> str:
    return " ".join(text.split())


def shorten(text: str, limit: int = 100) -> str:
    """A heading's worth of ``text``: all of it when short, else up to its first clause break, else words."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    for sep in ("; ", ". ", ": ", " ("):
        i = text.find(sep, 30)
        if 0 < i <= limit:
            return text[:i] + " …"
    return text[:text.rfind(" ", 0, limit)] + " …"


def first_clause(cause: str) -> str:
    return shorten(re.split(r"(?<=[\w`')])(?:; |\. )", one_line(cause))[0].rstrip("."), 110)


@dataclass
class Item:
    """One entry of the page: a message as a user sees it, with every site that raises it."""

    id: str
    title: str  # markdown when it comes from a cause, else the message (plain text)
    group: str
    sites: list[Entry]
    fixed: tuple[str, ...]
    placeholder_only: bool
    causes: list[tuple[list[str], str, str]]  # (where, cause, fix), one per distinct cause

    @property
    def message(self) -> str:
        """The message as a user reads it: a value's placeholder named by its last part (``<log_path>``, not the
        code's ``<self.log_path>``); the causes file keys on the code's names (``Entry.key``)."""
        return re.sub(r"<(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)>", r"<\1>", self.sites[0].pattern)

    @property
    def wraps(self) -> bool:
        return all(e.wraps for e in self.sites)


def items(entries: dict[tuple[str, str], Entry], causes: dict[tuple[str, str], dict[str, str]]) -> list[Item]:
    """The page's entries, in its order: the scan's sites merged by the message a user sees."""
    merged: dict[tuple, list[Entry]] = {}
    for e in sorted(entries.values(), key=lambda e: (e.module, e.lines[0])):
        fixed = fixed_text(e.parts)
        merged.setdefault(("only", e.module, e.key) if only_placeholders(fixed) else ("text", fixed), []).append(e)
    out = []
    for key, sites in merged.items():
        data = [causes.get((e.module, e.key), {}) for e in sites]
        pinned = {k: next((str(d[k]) for d in data if d.get(k)), "") for k in ("title", "group", "id")}
        distinct: dict[tuple[str, str], list[str]] = {}
        for e, d in zip(sites, data):
            pair = (one_line(str(d.get("cause", "MISSING"))), one_line(str(d.get("fix", "MISSING"))))
            distinct.setdefault(pair, []).append(f"{e.module}:{e.lines[0]}")
        only = key[0] == "only"
        fixed = fixed_text(sites[0].parts)
        if only:
            stem = f"{Path(sites[0].module).stem} {sites[0].cls}"
            digest = hashlib.sha1(f"{sites[0].module}\0{sites[0].key}".encode()).hexdigest()
            title = pinned["title"] or first_clause(str(data[0].get("cause") or "no cause written yet"))
        else:
            stem = "".join(fixed)
            digest = hashlib.sha1("\0".join(fixed).encode()).hexdigest()
            title = pinned["title"] or shorten("…".join(fixed))  # values as …: the words a search matches
        anchor = pinned["id"] or "-".join(words(stem)[:4] + [digest[:4]])
        out.append(Item(anchor, title, pinned["group"] or group_of(sites[0].module), sites, fixed, only,
                        [(where, cause, fix) for (cause, fix), where in distinct.items()]))
    return sorted(out, key=lambda i: (GROUP_IDS.index(i.group), i.sites[0].module, i.sites[0].lines[0]))


def id_problems(built: list[Item]) -> list[str]:
    seen: dict[str, Item] = {}
    out = []
    for item in built:
        if item.id in seen:
            out.append(f"two entries have the anchor {item.id!r} ({seen[item.id].sites[0].key!r} and "
                       f"{item.sites[0].key!r}): pin an 'id' for one in {CAUSES.name}")
        seen[item.id] = item
    return out


def fence(text: str) -> str:
    ticks = "`" * max(3, 1 + max((len(t) for t in re.findall(r"`+", text)), default=0))
    return f"{ticks}text\n{text}\n{ticks}"


def escape(text: str) -> str:
    """Plain text as markdown that shows it as is (a message in a heading: ``<name>``, ``*``, ``_``)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_{}\[\]#|!])", r"\\\1", text)


def anchor(name: str) -> str:
    """The explicit anchor before a heading: GitHub renders it (``{#id}`` it shows as text), and the site's build
    makes it the heading's own id (ci/mkdocs_anchors.py), so ``page.md#id`` lands on the heading in both."""
    return f'<a id="{name}"></a>'


def kind(cls: str) -> str:
    return {USAGE: "a usage line", MESSAGE: "a reason another error carries"}.get(cls, f"`{cls}`")


GENERATED = [f"<!-- Generated by `{COMMAND}` from the harness's source and ci/troubleshooting_causes.yaml. -->",
             "<!-- Do not edit: change the message in the code or its cause/fix in the YAML, then regenerate. -->"]


def group_page(group: str) -> Path:
    return PAGES / f"{group}.md"


def link(item: Item) -> str:
    """Where an entry lives, as every error line names it (``harness.core.troubleshooting.Entry.link``)."""
    return f"{group_page(item.group).relative_to(ROOT).as_posix()}#{item.id}"


def render_index(built: list[Item]) -> str:
    """docs/troubleshooting.md: how to find an entry, the groups' pages, and each entry's anchor with a link to
    its page (a link to ``troubleshooting.md#<id>``, from before the split, lands on it)."""
    counts = {g: sum(1 for i in built if i.group == g) for g in GROUP_IDS}
    out = [*GENERATED, "", "# Troubleshooting", "",
           f"Every error message the harness can print, {len(built)} of them, found in its source, each under its "
           "own heading on the page of what you were doing. A `<name>` in a message stands for a value filled "
           "in at run time (a path, a model name, a number).", "",
           "**From an error you have:** `carbon-harness explain '<the error, or any part of it>'` prints its entry "
           "(what causes it, what to do, its page and anchor); the site search finds it from the message's words "
           "too. Every error `carbon-harness` prints ends with its entry's page and anchor, as in "
           "`(carbon-harness explain: docs/troubleshooting/serving.md#vllm-server-not-ready-...)`; so do the "
           "plugin's `ERROR: carbon-harness: ...` lines under pytest. Under the command an error prints as "
           "`carbon-harness <command>: error: <message>`, exit status 2. With `CARBON_HARNESS_TRACEBACK=1` set, "
           "`carbon-harness` prints where an error came from (its traceback) before that line, for a report.", "",
           "| What you were doing | Messages |", "| --- | --- |"]
    out += [f"| [{title}](troubleshooting/{g}.md) | {counts[g]} |" for g, title, _ in GROUPS if counts[g]]
    out.append("")
    for g, title, about in GROUPS:
        if not counts[g]:
            continue
        out += [anchor(g), "", f"## {escape(title)}", "", f"{about} [All of them, with causes and fixes]"
                f"(troubleshooting/{g}.md).", ""]
        out += [f'- <a id="{i.id}"></a>[{i.title if i.placeholder_only else escape(i.title)}]'
                f"(troubleshooting/{g}.md#{i.id})" for i in built if i.group == g]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_group(built: list[Item], group: str) -> str:
    """One group's page: each of its entries under its own heading, with its anchor."""
    title, about = next((t, a) for g, t, a in GROUPS if g == group)
    entries = [i for i in built if i.group == group]
    out = [*GENERATED, "", f"# Troubleshooting: {escape(title)}", "",
           f"{about} {len(entries)} messages; the others, and how to find an entry from an error you have: "
           "[Troubleshooting](../troubleshooting.md).", ""]
    for item in entries:
        heading = item.title if item.placeholder_only else escape(item.title)
        out += [anchor(item.id), "", f"## {heading}", "", fence(item.message), ""]
        if item.placeholder_only:
            out += ["The message has no fixed words: all of it is made at run time (another error's text "
                    "passed on, or a report's own lines). The heading is its cause.", ""]
        if len(item.causes) == 1:
            _, cause, fix = item.causes[0]
            out += [f"**Cause:** {cause}", "", f"**What to do:** {fix}", ""]
        else:
            out += ["**Cause and what to do**, by where it is raised:", ""]
            out += [f"- `{', '.join(where)}`: {cause} *What to do:* {fix}" for where, cause, fix in item.causes]
            out.append("")
        sites = "; ".join(f"`{e.module}:{', '.join(map(str, e.lines))}` ({kind(e.cls)})" for e in item.sites)
        out += [f"Raised at {sites}.", ""]
    return "\n".join(out).rstrip() + "\n"


def render(built: list[Item]) -> dict[Path, str]:
    """The index and one page per group that has entries."""
    return {PAGE: render_index(built),
            **{group_page(g): render_group(built, g) for g in GROUP_IDS if any(i.group == g for i in built)}}


def data(built: list[Item]) -> str:
    """What ``carbon-harness explain`` reads (``harness.core.troubleshooting``): one entry a line."""
    rows = [json.dumps({"id": i.id, "title": one_line(i.title), "group": i.group, "message": i.message,
                        "fixed": list(i.fixed), "placeholder_only": i.placeholder_only, "wraps": i.wraps,
                        "sites": [f"{e.module}:{e.lines[0]} ({e.cls})" for e in i.sites],
                        "causes": [{"where": where, "cause": cause, "fix": fix} for where, cause, fix in i.causes]},
                       ensure_ascii=False) for i in built]
    head = {"generated_by": COMMAND, "page": PAGE.relative_to(ROOT).as_posix(),
            "pages": {g: group_page(g).relative_to(ROOT).as_posix() for g, _, _ in GROUPS},
            "groups": {g: title for g, title, _ in GROUPS}}
    return ("{\n" + "\n".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in head.items())
            + '\n"entries": [\n' + ",\n".join(rows) + "\n]\n}\n")


def stubs(missing: list[Entry]) -> str:
    import yaml

    data: dict[str, dict[str, dict[str, str]]] = {}
    for e in missing:
        data.setdefault(e.module, {})[e.key] = {"cause": "", "fix": ""}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def outputs(root: Path = ROOT) -> tuple[list[str], dict[Path, str]]:
    """The problems of the data, and the page and data file as they must be."""
    entries, causes = scan(root), load_causes(root / CAUSES.relative_to(ROOT))
    built = items(entries, causes)
    pages = render(built)
    stray = [f"{p.relative_to(root)} is no group's page any more: delete it (`{COMMAND}` does)"
             for p in sorted((root / PAGES.relative_to(ROOT)).glob("*.md")) if ROOT / p.relative_to(root) not in pages]
    return problems(entries, causes) + id_problems(built) + stray, {**pages, DATA: data(built)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help=f"rewrite {PAGE.relative_to(ROOT)}, {PAGES.relative_to(ROOT)}/ and {DATA.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 if they are stale or the data incomplete")
    parser.add_argument("--missing", action="store_true", help="print YAML stubs for sites without a cause")
    args = parser.parse_args(argv)
    if args.missing:
        entries, causes = scan(), load_causes()
        print(stubs([e for k, e in entries.items() if k not in causes]), end="")
        return 0
    bad, files = outputs()
    if args.write:
        for path in sorted(PAGES.glob("*.md")):
            if path not in files:  # a group with no entries left
                path.unlink()
                print(f"removed {path.relative_to(ROOT)}", file=sys.stderr)
        bad = [b for b in bad if "is no group's page any more" not in b]
    for path, text in files.items():
        if args.write:
            tmp = path.with_suffix(path.suffix + ".tmp")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
        elif not path.is_file() or path.read_text(encoding="utf-8") != text:
            bad.append(f"{path.relative_to(ROOT)} is stale: run `{COMMAND}`")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
