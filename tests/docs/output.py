"""Loose matching of the output a page shows against what the command printed.

A page's sample output is a real run's, cut to fit (long lines cut at a width, parts left out as ``...``,
a note in parentheses where a part is summarised) and from another day: its timings, counts and paths
differ from any later run. A page line matches a printed line when, with numbers, paths, runs of
pytest's outcome letters, pytest-benchmark's time unit, rules (``=====``) and runs of spaces made alike and a warnings count and a clock time
dropped, the printed line starts with it; the page's lines must appear in order (other printed lines may come between).
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
OUTCOMES = re.compile(r"(?<=\s)[.sFExX]+(?=\s|$)")  # pytest's progress letters after a test file's name
# an elision, a note about what was left out, or a progress line of outcome letters alone (where other output
# interleaves, its letters and percentage split across lines)
EDITORIAL = re.compile(r"^\s*(\.\.\.|…|\(.*\)|[.sFExX]+\s*\[\s*\d+%\])\s*$")
WARNINGS = re.compile(r", \d+ warnings?\b")  # pytest's summary count of warnings: it varies with the environment
UNIT = re.compile(r"\(time in [mun]?s\)")  # pytest-benchmark's table unit, chosen by the figures' size
CLOCK = re.compile(r"(?<=s) \(\d+:\d\d:\d\d\)")  # pytest's "in 102.08s (0:01:42)", past a minute
RULE = re.compile(r"[=-]{3,}")  # a rule, centred around a summary of any length
# a path (a word with a slash): the checkout's, the cache's, the home's, /tmp's differ from machine to machine
PATH = re.compile(r"[\w.~+-]*(?:/[\w.~+-]*)+")


def normalize(line: str) -> str:
    line = UNIT.sub("(time in <unit>)", PATH.sub("<path>", line))
    line = NUMBER.sub("0", RULE.sub("==", CLOCK.sub("", WARNINGS.sub("", line))))
    line = OUTCOMES.sub("•", " " + line)[1:]
    return re.sub(r"\s+", " ", line).strip()


def shown_lines(block: tuple[str, ...]) -> list[str]:
    """The lines of a page's output block that must match: blank and editorial lines aside."""
    return [line for line in block if line.strip() and not EDITORIAL.match(line)]


def unmatched(shown: list[str], printed: str) -> list[str]:
    """The page lines with no printed line (in order) that starts like them; [] when all match."""
    actual = [normalize(line) for line in printed.splitlines()]
    missing, at = [], 0
    for line in shown:
        want = normalize(line)
        hit = next((k for k in range(at, len(actual)) if actual[k].startswith(want)), None)
        if hit is None:
            missing.append(line)
        else:
            at = hit + 1
    return missing


def pieces_missing(pieces: list[str], printed: str) -> list[str]:
    """``#  ... TEXT ...`` expectations: each piece appears, in order, in the printed text (spaces made alike)."""
    text = re.sub(r"\s+", " ", printed)
    missing, at = [], 0
    for piece in pieces:
        found = text.find(re.sub(r"\s+", " ", piece), at)
        if found < 0:
            missing.append(piece)
        else:
            at = found + len(piece)
    return missing
