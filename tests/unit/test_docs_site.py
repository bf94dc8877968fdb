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

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.release.children import child_env
from tests.helpers import REPO

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
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))


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
    page = root / "docs" / "thresholds.md"
    page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md) and [a section](gpu.md#no-such-heading).\n")
    r = mkdocs_build(root, tmp_path / "site")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "no-such-page.md" in out and "no-such-heading" in out, out
