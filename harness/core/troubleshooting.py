"""Which troubleshooting entry an error is: the lookup behind ``carbon-harness explain`` and the pointer that
ends every error line the harness prints (``(carbon-harness explain: docs/troubleshooting/<group>.md#<id>)``).

It reads ``harness/data/troubleshooting.json``, which ``ci/troubleshooting.py --write`` writes beside
the troubleshooting pages (one per group) from the same scan of the source (tests/unit/test_troubleshooting.py fails when either
is stale). A data file inside the package, rather than the page read through ``harness.core.paths.REPO_ROOT``:
it ships with the package (``[tool.setuptools.package-data]``), so an installed harness without its docs/
still explains its errors; it holds each message's fixed text as fields, where the page would have to be
parsed back out of markdown; and the package never imports ``ci/`` (which is no package, and outside every
import-linter layer).

How a pasted text finds its entry (``find``): an anchor or id in it (``troubleshooting/<group>.md#<id>``, what the
printed pointer names; the index's ``troubleshooting.md#<id>`` and the site's ``troubleshooting/<group>/#<id>``) is that entry. Otherwise each entry is scored by the words of its fixed text (the
message without its run-time values) that the paste holds in the same order (``difflib``'s matching blocks),
each word weighted by how rare it is among the messages, so that ``unknown model`` outweighs ``must be``, and
a word with a digit in it (``trn2``, ``bf16``: most often a value) counts a quarter. Within the best run of
matched words, words that one side has where the other has neither the same words nor a value count against
it; before and after the run the paste may hold anything (a ``carbon-harness plan: error:`` prefix, a log).
The paste's first and last word may be cut (a fragment). The highest score wins; ties go to the entry the
whole paste matches (its fixed text in order, the values anywhere), then to one that states the error rather
than wrapping another's (``carbon-harness plan: error: <exc>``), then to the more specific. An entry matches
only with at least two words of weight ``MIN_WEIGHT`` and mismatches costing under half of that: a message
from outside the harness (Python's, the OS's) is not forced onto an entry.

At print time (``explain_pointer``) the whole message is at hand, so the lookup is stricter (``find_whole``):
an entry whose fixed text the message holds, in order.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Any

PAGE = "docs/troubleshooting.md"  # the index: every group's page, every entry's anchor
WORD = re.compile(r"[a-z0-9]+")
ANCHOR = re.compile(r"troubleshooting(?:/[a-z0-9]+)?(?:\.md|/)?#([a-z0-9-]+)")
MIN_WORDS = 2  # an entry explains at least two of the pasted words,
MIN_WEIGHT = 6.0  # ... as much as two rare words or four common ones (``is not a`` is not enough),
MIN_SHARE = 0.5  # ... and mismatches cost it at most half of that
DIGIT_WEIGHT = 0.25  # a word with a digit in it


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


@dataclass(frozen=True)
class Entry:
    """One entry of the troubleshooting pages (its group's, docs/troubleshooting/<group>.md)."""

    id: str
    title: str
    group: str
    message: str  # the message as the page shows it: ``<name>`` where a value goes
    fixed: tuple[str, ...]  # its literal text between the values
    placeholder_only: bool
    wraps: bool  # it embeds a caught error's text: a more specific entry explains that
    sites: tuple[str, ...]
    causes: tuple[dict[str, Any], ...]  # {"where": [module:line], "cause": str, "fix": str}

    @property
    def link(self) -> str:
        """Its page and anchor: ``docs/troubleshooting/<group>.md#<id>`` (ci/troubleshooting.py ``link``)."""
        return f"docs/troubleshooting/{self.group}.md#{self.id}"

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile("(?:.*?)".join(re.escape(p) for p in self.fixed), re.DOTALL)

    @functools.cached_property
    def tokens(self) -> list[str | None]:
        """The fixed text's words, None where a value goes (no pasted word equals it)."""
        out: list[str | None] = []
        for i, part in enumerate(self.fixed):
            if i:
                out.append(None)
            out += words(part)
        return out


@dataclass(frozen=True)
class Index:
    entries: tuple[Entry, ...]
    groups: dict[str, str]
    weight: dict[str, float]  # word -> rarity among the messages (inverse document frequency)

    def by_id(self, anchor: str) -> Entry | None:
        return next((e for e in self.entries if e.id == anchor), None)


@functools.lru_cache(maxsize=1)
def index() -> Index:
    data = json.loads(resources.files("harness").joinpath("data", "troubleshooting.json").read_text(encoding="utf-8"))
    entries = tuple(Entry(e["id"], e["title"], e["group"], e["message"], tuple(e["fixed"]), e["placeholder_only"],
                          e["wraps"], tuple(e["sites"]), tuple(e["causes"])) for e in data["entries"])
    searchable = [e for e in entries if not e.placeholder_only]
    df = Counter(w for e in searchable for w in {t for t in e.tokens if t})
    # a word with a digit in it (trn2, 3xlarge, bf16, 0) is more often a run-time value than the message's own
    weight = {w: math.log(1 + len(searchable) / n) * (DIGIT_WEIGHT if re.search(r"\d", w) else 1.0)
              for w, n in df.items()}
    return Index(entries, data["groups"], weight)


def score(entry: Entry, pasted: list[str], weight: dict[str, float]) -> tuple[float, float, int]:
    """How well ``entry`` explains the pasted words: (matched weight less the mismatches', matched weight,
    matched count), over the best run of ``entry``'s words found in the paste in order. Between two matched
    runs, pasted words where the message has a value cost nothing; anywhere else the words either side has and
    the other lacks cost their weight (the paste is not this message there). Before the first and after the
    last matched word the paste may hold anything: a prefix (``carbon-harness plan: error:``), a log."""
    vocab = [t for t in entry.tokens if t]
    known = set(vocab)
    pasted = list(pasted)
    if pasted and pasted[0] not in known and len(pasted[0]) >= 2:  # a fragment's first word: the end of one
        pasted[0] = next((w for w in vocab if w.endswith(pasted[0])), pasted[0])
    if pasted and pasted[-1] not in known and len(pasted[-1]) >= 2:  # ... its last: the start of one
        pasted[-1] = next((w for w in vocab if w.startswith(pasted[-1])), pasted[-1])
    blocks = [b for b in difflib.SequenceMatcher(None, pasted, entry.tokens, autojunk=False).get_matching_blocks()
              if b.size]
    best = run = (0.0, 0.0, 0)  # (value, matched weight, matched count) of the best run, and of the current one
    for i, b in enumerate(blocks):
        got = sum(weight.get(w, 0.0) for w in pasted[b.a:b.a + b.size])
        fresh = (got, got, b.size)
        if i:
            prev = blocks[i - 1]
            between = entry.tokens[prev.b + prev.size:b.b]
            cost = sum(weight.get(w, 0.0) for w in between if w)  # the message's words the paste lacks
            if None not in between:  # ... and, where the message has no value, the paste's words it lacks
                cost += sum(weight.get(w, 0.0) for w in pasted[prev.a + prev.size:b.a])
            joined = (run[0] - cost + got, run[1] + got, run[2] + b.size)
            run = joined if joined[0] >= fresh[0] else fresh
        else:
            run = fresh
        best = max(best, run)
    return best


def find_whole(message: str) -> Entry | None:
    """The entry of a whole message (an error as raised, at print time): of those whose fixed text it holds in
    order, the one that states the error rather than wrapping another's, then the most specific. Stricter
    than ``find``: a message the harness did not write (``[Errno 2] No such file or directory``) gets none."""
    found = [e for e in index().entries if not e.placeholder_only and e.regex.search(message)]
    return max(found, key=lambda e: (not e.wraps, len("".join(e.fixed))), default=None)


def find(text: str) -> Entry | None:
    """The entry ``text`` (a pasted error, any fragment of one, or an entry's anchor) is; None if none."""
    idx = index()
    named = ANCHOR.search(text)
    for anchor in ([named.group(1)] if named else []) + [text.strip()]:
        if (entry := idx.by_id(anchor)) is not None:
            return entry
    pasted = words(text)
    best, rank = None, None
    for entry in idx.entries:
        if entry.placeholder_only:
            continue
        value, got, count = score(entry, pasted, idx.weight)
        if count < MIN_WORDS or got < MIN_WEIGHT or value < MIN_SHARE * got:
            continue
        size = sum(idx.weight.get(t, 0.0) for t in entry.tokens if t)
        key = (round(value, 6), bool(entry.regex.search(text)), not entry.wraps, got / size if size else 0.0)
        if rank is None or key > rank:
            best, rank = entry, key
    return best


def explain_pointer(error: object, *, quiet: bool = False) -> str:
    """What ends a printed error: `` (carbon-harness explain: docs/troubleshooting/<group>.md#<id>)``, its entry's
    anchor, or where to look when no entry matches (an error from Python or the OS, not the harness's own).
    Found at print time from the message itself (``find_whole``), so no raise site names its entry. ``quiet``:
    nothing when no entry matches (argparse's own usage lines, which say all there is to say)."""
    try:
        entry = find_whole(str(error))
    except Exception:  # a missing or broken data file must never hide the error it would explain
        return ""
    if entry is None:
        return "" if quiet else f" (no entry in {PAGE}; CARBON_HARNESS_TRACEBACK=1 shows where it came from)"
    pointer = f" (carbon-harness explain: {entry.link})"
    # a wrapper's message may carry its inner error's line, pointer and all: that entry once is enough
    return "" if pointer in str(error) else pointer


class PointingParser(argparse.ArgumentParser):
    """argparse's parser, whose usage error ends with its entry's pointer where it has one (a bad option value
    that a ``parse_*`` function refused); its sub-parsers are of its class."""

    def error(self, message: str):  # type: ignore[override]
        super().error(message + explain_pointer(message, quiet=True))


def describe(entry: Entry) -> str:
    """The entry as ``carbon-harness explain`` prints it: its title, message, cause, what to do, anchor."""
    group = index().groups.get(entry.group, entry.group)
    lines = [entry.title, f"  {entry.link}  ({group})", ""]
    if entry.title != entry.message:
        lines += ["message:", *(f"  {line}" for line in entry.message.splitlines()), ""]
    for cause in entry.causes:
        where = f" (raised at {', '.join(cause['where'])})" if len(entry.causes) > 1 else ""
        lines += [f"cause{where}: {cause['cause']}", f"what to do: {cause['fix']}", ""]
    lines.append(f"raised at: {'; '.join(entry.sites)}")
    return "\n".join(lines)
