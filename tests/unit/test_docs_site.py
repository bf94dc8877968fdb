"""The docs site builds: the real ``mkdocs build --strict`` in a fresh process on this checkout (a broken
link or anchor, a page left out of the nav or a nav entry with no page fails it: mkdocs.yml's
``validation``), and on a copy with a broken link and a broken anchor planted, so the build is shown to
catch what it exists for. README.md stays a landing page (at most 200 lines) whose links into docs/
land on a page and a heading that exist.

mkdocs and mkdocs-material are in the ``test`` extra, which every nox session and CI install: a missing
mkdocs means the test environment is not the one the project declares, so this test fails saying what
to install rather than skipping, which would let a broken link through CI unnoticed. Each build takes
about 3 s on the 2-core CI box."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.release.children import child_env
from tests.helpers import REPO
from tests.pasted_errors import FOUR, pasted

pytestmark = pytest.mark.unit

DOCS = REPO / "docs"
README_MAX_LINES = 200


def require_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "material", "yaml") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: the docs site's check needs the test extra, "
                    f"pip install -e '.[test]'")


def mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    require_mkdocs()
    env = {**child_env(), "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's end-of-life banner: not a finding
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site),
                           "--config-file", str(root / "mkdocs.yml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    r = mkdocs_build(REPO, site)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}{r.stderr}"
    return site


def nav_pages(nav) -> list[str]:
    """Every page a mkdocs nav names, depth first."""
    found = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_the_site_builds_strict(built):
    assert (built / "index.html").is_file()
    assert (built / "release-check" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav_once():
    require_mkdocs()
    import yaml  # PyYAML: mkdocs's own dependency

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs" and config["strict"] is True
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def test_the_readme_is_a_landing_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md is {len(lines)} lines: move sections into docs/"


def test_the_readmes_links_into_the_docs_land(built):
    """README.md is not part of the site, so mkdocs does not check its links: here each docs/ link's page
    and heading must exist in the built site."""
    links = re.findall(r"\]\(docs/([a-z0-9-]+)\.md(?:#([a-z0-9-]+))?\)", (REPO / "README.md").read_text())
    guides = {p.stem for p in DOCS.glob("*.md")} - {"index"}  # the site's home restates the README
    assert {page for page, _ in links} >= guides, f"guides the README does not link: {guides - {p for p, _ in links}}"
    for page, anchor in links:
        html = built / ("" if page == "index" else page) / "index.html"
        assert html.is_file(), f"README links docs/{page}.md, which does not exist"
        if anchor:
            assert f'id="{anchor}"' in html.read_text(), f"README links docs/{page}.md#{anchor}: no such heading"


def test_a_broken_link_and_a_broken_anchor_fail_the_build(tmp_path):
    root = tmp_path / "checkout"
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    (root / "ci").mkdir()
    shutil.copy(REPO / "ci" / "mkdocs_anchors.py", root / "ci")  # mkdocs.yml's hook
    page = root / "docs" / "thresholds.md"
    page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md) and [a section](gpu.md#no-such-heading).\n")
    r = mkdocs_build(root, tmp_path / "site")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "no-such-page.md" in out and "no-such-heading" in out, out


# Material's own search worker (lunr and its query handling) run in node on a built site's index, fed the way the
# page feeds it, through docs/javascripts/search-paste.js: prints, per query, the locations of the best sections.
MATERIAL_SEARCH_JS = r"""
const fs = require("fs"); const path = require("path");
const [site, queriesFile, pasteJs] = process.argv.slice(2);
const dir = path.join(site, "assets/javascripts/workers");
const workerJs = fs.readdirSync(dir).find(f => /^search\..*\.min\.js$/.test(f));
let handler = null; const out = [];
globalThis.self = globalThis;
globalThis.addEventListener = (type, fn) => { handler = fn; };
globalThis.postMessage = (m) => out.push(m);
globalThis.importScripts = () => {};
eval(fs.readFileSync(path.join(dir, workerJs), "utf8"));
globalThis.Worker = class { postMessage(message) { this.sent = handler({ data: message }); } };
eval(fs.readFileSync(pasteJs, "utf8"));
const index = JSON.parse(fs.readFileSync(path.join(site, "search/search_index.json"), "utf8"));
(async () => {
  const w = new Worker();
  w.postMessage({ type: 0, data: { config: index.config, docs: index.docs, options: { suggest: false } } });
  await w.sent;
  const results = [];
  for (const q of JSON.parse(fs.readFileSync(queriesFile, "utf8"))) {
    out.length = 0;
    w.postMessage({ type: 2, data: q });
    await w.sent;
    const items = (out[0] && out[0].data && out[0].data.items) || [];
    results.push(items.flat().sort((a, b) => b.score - a.score).slice(0, 3).map(s => s.location));
  }
  console.log(JSON.stringify(results));
})();
"""


@pytest.mark.parametrize("name", FOUR)
def test_the_search_index_holds_each_pasted_errors_entry(built, name, tmp_path, capsys):
    """Each entry is its own section of the index, at its anchor, titled with the message's fixed words (values
    shown as …) and holding the whole message with its placeholders."""
    whole, _, entry = pasted(name, tmp_path, capsys)
    index = json.loads((built / "search" / "search_index.json").read_text())
    found = [d for d in index["docs"] if d["location"] == f"troubleshooting/{entry.group}/#{entry.id}"]
    assert len(found) == 1, f"no section at troubleshooting/{entry.group}/#{entry.id}"
    title, text = (html.unescape(re.sub(r"<[^>]+>", "", found[0][k])) for k in ("title", "text"))
    assert title == entry.title and entry.message.strip() in text
    fixed = {w for part in entry.fixed for w in re.findall(r"[a-z0-9]+", part.lower())}
    assert fixed and fixed <= set(re.findall(r"[a-z0-9]+", whole.lower()))  # the paste's words are the title's
    assert fixed <= set(re.findall(r"[a-z0-9]+", title.lower()))


def test_site_search_ranks_the_entry_first_for_each_pasted_error(built, tmp_path, capsys):
    """The issue's test, in material's own search code: each of the four errors pasted whole (as printed:
    a prefix, a path ending in ``:``, the anchor the line ends with), and as a fragment, finds its entry first."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: material's search worker is JavaScript (the index is checked above)")
    cases = []
    for name in FOUR:
        (tmp_path / name).mkdir()
        cases.append(pasted(name, tmp_path / name, capsys))
    queries = [q for whole, fragment, _ in cases for q in (whole, fragment)]
    (tmp_path / "queries.json").write_text(json.dumps(queries))
    (tmp_path / "search.js").write_text(MATERIAL_SEARCH_JS)
    r = subprocess.run([node, str(tmp_path / "search.js"), str(built), str(tmp_path / "queries.json"),
                        str(DOCS / "javascripts" / "search-paste.js")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    tops = json.loads(r.stdout.strip().splitlines()[-1])
    want = [f"troubleshooting/{entry.group}/#{entry.id}" for _, _, entry in cases for _ in (0, 1)]
    assert [t[0] if t else None for t in tops] == want, list(zip(queries, tops))


def test_the_site_carries_the_pictures_where_the_pages_show_them(built):
    """The pictures ci/docs_pictures.py draws (tests/unit/test_docs_pictures.py: current) reach the built site,
    and the built pages point at them there: an image or link mkdocs left unresolved would 404 in a browser."""
    shown = {"reports-and-compare": ("img/report-throughput.svg", "img/report.html"),
             "release-check": ("img/power.svg",)}
    for page, pictures in shown.items():
        text = (built / page / "index.html").read_text()
        for picture in pictures:
            assert (built / picture).is_file() and (built / picture).stat().st_size > 10_000, picture
            assert re.search(rf'(?:src|href)="\.\./{re.escape(picture)}"', text), f"{page} does not point at {picture}"
