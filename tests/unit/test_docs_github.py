"""The pages read right where users open them: on GitHub, which renders each Markdown file with GFM, as well
as on the mkdocs site.

Rendered here by markdown-it-py (CommonMark with GFM's tables and strikethrough; in the ``test`` extra), as
GitHub renders a file, each page must show: no syntax only the site understands as literal text (a content
tab's ``=== "..."``, an admonition's ``!!!``, a heading's ``{#id}``), no HTML comment as text (a block marker
indented under a tab becomes a code block that shows it), and every anchor link (``#id`` in the page,
``page.md#id`` to another) landing on an anchor GitHub gives that page: a heading's slug or an explicit
``<a id="..."></a>``. The migration's commands fit 100 columns, one flag a line (the site clips a wider line).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import pytest

from tests.docs.blocks import blocks
from tests.helpers import REPO

pytestmark = pytest.mark.unit

DOCS = REPO / "docs"
SITE_ONLY = re.compile(r'^\s*(?:===|!!!|\?\?\?)\s*\S|\{#[A-Za-z0-9_-]+\}')
EXPLICIT_ID = re.compile(r'\bid="([^"]+)"')
COLUMNS = 100


def renderer():
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is in the test extra: "
                                                            "pip install -e '.[test]'")
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def plain(inline) -> str:
    """The text an inline token shows (markup removed, code spans' text kept)."""
    return "".join(c.content for c in (inline.children or []) if c.type in ("text", "code_inline"))


def rendered(path: Path, md=None) -> dict:
    """What GitHub shows of a page: its visible text lines, its anchors, its links, its indented code."""
    tokens = (md or renderer()).parse(path.read_text(encoding="utf-8"))
    shown, anchors, links, indented, counts = [], set(), [], [], {}
    for i, t in enumerate(tokens):
        if t.type == "html_block" or t.type == "inline":
            anchors.update(EXPLICIT_ID.findall(t.content))
        if t.type == "inline":
            for c in t.children or []:
                if c.type == "html_inline":
                    anchors.update(EXPLICIT_ID.findall(c.content))
                if c.type == "link_open":
                    links.append(c.attrs.get("href", ""))
                if c.type == "text":
                    shown.append(c.content)
            if tokens[i - 1].type == "heading_open":
                slug = github_slug(plain(t))
                n = counts.get(slug, 0)
                counts[slug] = n + 1
                anchors.add(slug if n == 0 else f"{slug}-{n}")
        if t.type == "code_block":  # indented code: on these pages, a tab's or admonition's body gone wrong
            indented.append(t.content)
    return {"shown": shown, "anchors": anchors, "links": links, "indented": indented}


@pytest.fixture(scope="module")
def site() -> dict[Path, dict]:
    md = renderer()
    return {p: rendered(p, md) for p in pages()}


def test_no_site_only_syntax_or_comment_shows_as_text(site):
    bad = [f"{p.relative_to(REPO)}: shows {line.strip()[:80]!r}" for p, r in site.items() for text in r["shown"]
           for line in text.splitlines() if SITE_ONLY.search(line) or "<!--" in line or "-->" in line]
    bad += [f"{p.relative_to(REPO)}: an indented block shows {code.strip().splitlines()[0][:80]!r}"
            for p, r in site.items() for code in r["indented"]]
    assert not bad, "\n".join(bad)


def test_every_anchor_link_resolves_on_github(site):
    bad = []
    for page, r in site.items():
        for href in r["links"]:
            if re.match(r"[a-z]+:", href) or "#" not in href:
                continue
            target, _, fragment = href.partition("#")
            dest = page if not target else (page.parent / target).resolve()
            if dest.suffix != ".md" or dest not in site:
                if dest.suffix == ".md":
                    bad.append(f"{page.relative_to(REPO)}: {href}: no such page")
                continue
            if fragment not in site[dest]["anchors"]:
                bad.append(f"{page.relative_to(REPO)}: {href}: no anchor {fragment!r} on GitHub")
    assert not bad, "\n".join(bad)


def test_a_troubleshooting_entry_has_its_anchor_on_github(site):
    """Every error prints ``docs/troubleshooting...md#<id>``: the id is an explicit anchor GitHub keeps."""
    data = (REPO / "harness" / "data" / "troubleshooting.json").read_text(encoding="utf-8")
    ids = re.findall(r'^\{"id": "([^"]+)"', data, re.MULTILINE)
    assert len(ids) > 400
    held = set().union(*(r["anchors"] for p, r in site.items() if "troubleshooting" in p.as_posix()))
    assert not [i for i in ids if i not in held][:5]


@pytest.mark.parametrize("page", ["migration.md", "stacks-and-migration.md", "trn2.md"])
def test_the_trn2_pages_commands_fit_100_columns(page):
    """The Trn2 pages' commands: the site clipped a wider line (hiding the one flag two commands differ in)."""
    found = [f"docs/{page}:{n}: {len(line)} columns" for b in blocks(DOCS / page, REPO) if b.shell
             for n, line in enumerate(b.body, start=b.line + 1) if len(line) > COLUMNS]
    assert not found, "\n".join(found)


def test_the_migrations_commands_take_one_flag_a_line():
    found = [f"docs/migration.md:{n}: more than one flag: {line.strip()}"
             for b in blocks(DOCS / "migration.md", REPO) if b.shell
             for n, line in enumerate(b.body, start=b.line + 1) if len(re.findall(r"(?:^|\s)--[a-z]", line)) > 1]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("text, shown", [
    ('=== "trn2.3xlarge"\n\n    text\n', True),
    ("!!! warning \"x\"\n    text\n", True),
    ("### A heading {#its-id}\n", True),
    ("    <!-- run -->\n    ```bash\n    nox\n    ```\n", True),
    ("<!-- run: ci -->\n```bash\nnox\n```\n", False),
    ('<a id="its-id"></a>\n\n### A heading\n', False),
])
def test_the_check_sees_what_github_would_show(tmp_path, text, shown):
    page = tmp_path / "page.md"
    page.write_text(text)
    r = rendered(page)
    seen = any(SITE_ONLY.search(s) or "<!--" in s for s in r["shown"]) or bool(r["indented"])
    assert seen is shown


def test_github_slugs_and_explicit_anchors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('# 5. Read the verdict\n\n## What the check\'s server runs\n\n## Dup\n\n## Dup\n\n'
                    '<a id="pinned-1a2b"></a>\n\n### x\n')
    assert rendered(page)["anchors"] == {"5-read-the-verdict", "what-the-checks-server-runs", "dup", "dup-1",
                                         "pinned-1a2b", "x"}


def test_the_site_hook_folds_an_anchor_line_into_its_heading():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mkdocs_anchors", REPO / "ci" / "mkdocs_anchors.py")
    assert spec and spec.loader
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    text = 'intro\n\n<a id="vllm-not-ready-1a2b"></a>\n\n### vLLM server not ready\n\nbody\n'
    assert hook.on_page_markdown(text) == "intro\n\n### vLLM server not ready {#vllm-not-ready-1a2b}\n\nbody\n"
    assert hook.on_page_markdown('<a id="x"></a> and text\n\n### h\n') == '<a id="x"></a> and text\n\n### h\n'
    assert PurePosixPath("ci/mkdocs_anchors.py").as_posix() in (REPO / "mkdocs.yml").read_text()


def words_shown(text: str) -> int:
    return len(re.findall(r"\S+", re.sub(r"<!--.*?-->", "", text, flags=re.S)))


def test_the_readme_reaches_the_trn2_48xlarge_commands_in_one_click_and_800_words():
    """The README links the migration page, first under "Qualify a release"; a reader gets from the README's
    top to the trn2.48xlarge command through that one link, reading at most 800 words on the way."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    page = (DOCS / "migration.md").read_text(encoding="utf-8")
    assert "(docs/migration.md)" in readme
    before = readme[:readme.index("(docs/migration.md)")] + page[:page.index("--neuron-instance trn2.48xlarge")]
    assert words_shown(before) <= 800, words_shown(before)
    assert page.index("device path is unrun") < page.index("## 1.")  # the caveat before any step
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"- Qualify a release:\n\s+- migration\.md\n", nav)
