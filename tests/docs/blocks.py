"""The docs' shell blocks, each with the marker that says how the suite tests it.

Every fenced block in a shell language (``bash``, ``sh``, ``shell``, ``console``) in README.md and
docs/**/*.md carries an HTML comment on the line before its fence (invisible on GitHub and in mkdocs):

- ``<!-- run -->``: the suite runs each command (a real subprocess, in a scratch copy of the checkout) and
  checks what the page shows: a comment line ``#  ... TEXT`` after a command is output that command prints
  (``...`` elides; each piece between them must appear, in order), and a trailing ``# exit N`` its exit status
  (``# exit 0 or 3``, ``# exit 0, 1 or 3``: any of those, for a verdict the host's noise decides; a usage
  error, 2, is never among them unless the page says so).
- ``<!-- run: extended -->``: the same, but long: ``nox -s release-extended`` runs it.
- ``<!-- run: ci -->``: what CI itself runs: each command is a line of ``.ci/run`` (the README's install and
  ``nox``) or ``nox -s SESSION`` for a session ``nox`` runs by default.
- ``<!-- device-only: WHAT THE HOST NEEDS -->``: needs hardware, weights or a network this suite has not; the
  commands of a CLI this checkout has still go through its parser (a renamed option fails), nothing more.

In CI every command of a run block (extended and ci ones too) goes through the real parser of its CLI, its
pytest lines are collected (``--collect-only``: known options and markers, something selected), nox sessions
and pip extras must exist, and the repository paths a command names must be there. The ``<!-- check -->`` of
earlier pages (parsed, never run) is refused: every CPU command of the docs runs.

A fenced block that is not a shell block may carry ``<!-- output: COMMAND -->`` (or ``<!-- output: extended:
COMMAND -->``): the suite runs COMMAND and matches the block's lines, loosely, against what it prints. A shell
block without a marker fails the suite, naming the markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
KINDS = ("run", "device-only", "output")
RETIRED = "check"  # parsed, never run: refused with what to write instead
MARKER = re.compile(r"^<!--\s*(run|check|device-only|output)\b\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
EXTENDED = "extended"
CI = "ci"
EXIT = re.compile(r"exit (\d+(?:(?:,\s*|\s+or\s+)\d+)*)(?::|\s|$)")  # exit 1 / exit 0 or 3 / exit 0, 1 or 3
MARKER_HELP = ("<!-- run -->, <!-- run: extended -->, <!-- run: ci --> or <!-- device-only: WHAT THE HOST NEEDS --> "
               "on the line before its fence (tests/docs/blocks.py says what each one does)")


@dataclass(frozen=True)
class Command:
    """One command of a block: its text with continuations joined and comments removed."""

    page: str
    line: int  # 1-based, the command's first line
    text: str
    expect: tuple[str, ...] = ()  # output the page shows it printing (``#  ... TEXT`` lines)
    exit_statuses: tuple[int, ...] = (0,)  # a trailing ``# exit N`` (``# exit N or M``: either)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    kind: str | None  # one of KINDS, None when unmarked
    detail: str  # the marker's text after the colon: device-only's reason, output's command, run's "extended"
    body: tuple[str, ...]
    commands: tuple[Command, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.language in SHELL_LANGUAGES

    @property
    def extended(self) -> bool:
        return self.detail.split(":")[0].strip() == EXTENDED

    @property
    def output_command(self) -> str:
        """An output block's command (its marker's text, less a leading ``extended:``)."""
        return self.detail.split(":", 1)[1].strip() if self.extended else self.detail


def pages(root: Path) -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    found = [root / "README.md"] if (root / "README.md").is_file() else []
    return found + (sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else [])


def blocks(path: Path, root: Path) -> list[Block]:
    """The fenced blocks of one page, each with the marker before it (if any) and its commands."""
    page = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, language = opening.group(2), opening.group(3).lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                    and not lines[j].strip()[len(fence):].strip()), len(lines))
        kind, detail = marker_before(lines, i)
        body = tuple(lines[i + 1:end])
        block = Block(page, i + 1, language, kind, detail, body)
        if block.shell:
            block = Block(page, i + 1, language, kind, detail, body, tuple(commands(page, i + 2, body, language)))
        found.append(block)
        i = end + 1
    return found


def marker_before(lines: list[str], fence: int) -> tuple[str | None, str]:
    """The marker on the last non-blank line before the fence: (kind, detail), or (None, '')."""
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    found = MARKER.match(lines[j].strip()) if j >= 0 else None
    return (found.group(1), (found.group(2) or "").strip()) if found else (None, "")


def split_comment(line: str, quote: str | None) -> tuple[str, str, str | None]:
    """(code, comment, the quote still open at the line's end): a ``#`` starts a comment at the line's start
    or after whitespace, outside quotes; a quote may stay open across lines (a JSON argument)."""
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip(), line[k + 1:].strip(), None
    return line.rstrip(), "", quote


def commands(page: str, first_line: int, body: tuple[str, ...], language: str) -> list[Command]:
    """A block's commands: ``\\`` continuations and lines inside an open quote joined, comments removed, a
    ``console`` block's ``$ `` prompts stripped (its other lines are output)."""
    found: list[Command] = []
    parts: list[str] = []
    start, quote, status = 0, None, (0,)
    for offset, raw in enumerate(body):
        line = raw
        if language == "console" and not parts:
            if not raw.lstrip().startswith("$ "):
                continue
            line = raw.lstrip()[2:]
        code, comment, quote = split_comment(line, quote)
        if not parts:
            start, status = first_line + offset, (0,)
        exit_comment = EXIT.match(comment)
        if exit_comment:
            status = tuple(int(n) for n in re.findall(r"\d+", exit_comment.group(1)))
        if not code.strip():
            if comment.startswith("...") and found and not parts:
                last = found[-1]
                found[-1] = Command(last.page, last.line, last.text, (*last.expect, comment), last.exit_statuses)
            continue
        continued = code.endswith("\\")
        parts.append(code[:-1].strip() if continued else code.strip())
        if not continued and not quote:
            found.append(Command(page, start, " ".join(parts), exit_statuses=status))
            parts = []
        elif quote:
            parts[-1] += "\n"
    if parts:
        found.append(Command(page, start, " ".join(parts), exit_statuses=status))
    return found


def expected_pieces(expect: str) -> list[str]:
    """``... TEXT ...`` as the pieces that must appear in order (the ``...`` are elisions)."""
    return [piece.strip() for piece in expect.split("...") if piece.strip()]
