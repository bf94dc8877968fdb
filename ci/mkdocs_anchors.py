"""mkdocs hook (mkdocs.yml ``hooks``): an explicit anchor line before a heading becomes the heading's own id.

The pages carry ``<a id="ID"></a>`` on its own line before a heading whose anchor must not change (each
troubleshooting entry, which every error the harness prints links to): GitHub renders that anchor, where it
shows a heading's ``{#ID}`` as text. On the site the same line would be a second, empty anchor beside the
heading's slug, so the table of contents, the search index's sections and mkdocs's anchor validation would
not know ID: here the line is folded into the heading as ``{#ID}`` (attr_list) before Python-Markdown reads
the page, and a link to ``page.md#ID`` lands on the heading on both. An anchor line that is no heading's (the
troubleshooting index's, one per entry) stays as it is: a raw anchor on both.
"""

from __future__ import annotations

import re

ANCHORED_HEADING = re.compile(r'^<a id="([A-Za-z0-9_-]+)"></a>[ \t]*\n(?:[ \t]*\n)*(#{1,6} .*?)[ \t]*$', re.MULTILINE)


def fold_anchors(markdown: str) -> str:
    """Each ``<a id="ID"></a>`` line directly before a heading (blank lines between allowed) removed, and the
    heading given ``{#ID}``. Fenced code is left as it is (a fence's lines never start a heading match that
    matters: the pages put no anchor lines in code)."""
    return ANCHORED_HEADING.sub(lambda m: f"{m.group(2)} {{#{m.group(1)}}}", markdown)


# Pages the site search leaves out: the troubleshooting index lists every entry's title, linked to its group's
# page, where the entry itself is; indexed, it would rank beside the entry a pasted error should find.
SEARCH_EXCLUDED = {"troubleshooting.md"}


def on_page_markdown(markdown: str, page=None, **_kwargs) -> str:
    if page is not None and page.file.src_uri in SEARCH_EXCLUDED:
        page.meta["search"] = {**(page.meta.get("search") or {}), "exclude": True}
    return fold_anchors(markdown)
