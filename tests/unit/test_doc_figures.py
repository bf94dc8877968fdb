"""Every measured figure a page quotes is held by a file, with its conditions (issue 41, part 5).

``tests/docfigures.py`` finds the figures (numbers with units) in README.md and docs/**/*.md and what
holds each: a fixture, a generated section, or a run of ``fixtures/docs/runs.json``. A figure typed into
a page by hand and held by nothing fails here, named by page and line; so does a run without its date,
machine and load, a run figure quoted nowhere, and a paragraph quoting a run without the run's date."""

from __future__ import annotations

import random
import re
import shutil

import pytest

from tests.docfigures import DATE, LOAD, REGISTRY, Figure, Held, Registry, check, figures_in, matches
from tests.docs.blocks import pages as docs_pages
from tests.helpers import REPO

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def checked():
    return check()


def test_every_measured_figure_in_the_docs_is_held_by_a_fixture_or_a_run(checked):
    figures, _ = checked
    assert len(figures) > 100, f"only {len(figures)} figures found: the scanner lost the pages' figures"
    unheld = [c.figure.where for c in figures if not c.held_by]
    assert not unheld, (f"measured figures no fixture and no run of {REGISTRY.relative_to(REPO)} holds (add the "
                        f"run with its command, date, machine and load, or correct the figure): {unheld}")


def test_every_run_names_what_ran_when_where_and_under_what_load():
    registry = Registry.load()
    ids = [r["id"] for r in registry.runs]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for run in registry.runs:
        for key in ("what", "command", "date", "machine", "load", "commit", "figures"):
            assert run.get(key), f"{REGISTRY.name}: run {run['id']!r} lacks {key!r}"
        assert DATE.fullmatch(run["date"]), f"run {run['id']!r}: date {run['date']!r} is not YYYY-MM-DD"
        assert re.fullmatch(r"[0-9a-f]{7,40}", run["commit"]), f"run {run['id']!r}: commit {run['commit']!r}"


def test_every_run_figure_is_quoted_somewhere(checked):
    """A run's figure that no page quotes any more is stale: remove it with the text that quoted it."""
    figures, registry = checked
    quoted = {h.source for c in figures for h in c.held_by}
    unused = [h.source for h in registry.values if h.source not in quoted]
    assert not unused, f"run figures no page quotes: {unused}"


def test_every_not_measured_entry_is_used_and_says_why(checked):
    _, registry = checked
    printed = {f.text for p in docs_pages(REPO) for f in figures_in(p.read_text(), p.name)}
    for text, why in registry.not_measured.items():
        assert len(why) > 20, f"not_measured {text!r}: say why it is no measurement"
        assert text in printed, f"not_measured {text!r} is no longer printed in any page: remove it"


def test_a_paragraph_quoting_a_run_names_its_date_and_load(checked):
    """A run's figure carries its conditions where it is quoted: the run's date and its load in the same
    paragraph (the machine is this project's box unless the paragraph says otherwise)."""
    figures, registry = checked
    bare = []
    for c in figures:
        runs = {h.run for h in c.held_by if h.run}
        if not runs or any(h.run is None for h in c.held_by):
            continue  # a fixture's figure carries its provenance in the fixture
        dates = {registry.run(r)["date"] for r in runs}
        if not any(d in c.figure.block for d in dates) or not LOAD.search(c.figure.block):
            bare.append(f"{c.figure.where} (runs {sorted(runs)}: {sorted(dates)})")
    assert not bare, f"figures quoted without their run's date or load in the paragraph: {bare}"


def test_a_changed_figure_fails_naming_page_line_and_figure(tmp_path):
    """The gate itself: the getting-started page's CI time typed as 3329 s instead of the measured 3392 s."""
    page = "docs/getting-started.md"
    text = (REPO / page).read_text()
    assert "took 3392 s" in text
    (tmp_path / "README.md").symlink_to(REPO / "README.md")
    for name in ("fixtures", "pyproject.toml", "noxfile.py"):
        (tmp_path / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    (tmp_path / page).write_text(text.replace("took 3392 s", "took 3329 s"))
    figures, _ = check(tmp_path)
    unheld = [c.figure.where for c in figures if not c.held_by]
    line = text[:text.index("took 3392 s")].count("\n") + 1
    assert unheld == [f"{page}:{line}: '3329 s'"], unheld


def _fig(value: float, decimals: int, unit: str) -> Figure:
    return Figure("p.md", 1, f"{value:.{decimals}f} {unit}", value, decimals, unit, True, "")


def test_a_run_figure_matches_in_another_unit_at_the_printed_precision():
    run = Held(3392, "s", "runs.json:ci.total", "ci")
    assert matches(_fig(56.5, 1, "minutes"), run)
    assert not matches(_fig(56.6, 1, "minutes"), run)
    assert matches(_fig(57, 0, "min"), run)
    # a fixture's seconds are never read as minutes: across many, some round to any whole minute
    assert not matches(_fig(57, 0, "min"), Held(3392, "s", "fixtures/x.json"))
    # a bare fixture number is a fraction for a percentage, and never a time
    assert matches(_fig(12.1, 1, "%"), Held(0.121, None, "fixtures/noise.json"))
    assert not matches(_fig(12, 0, "ms"), Held(12.0, None, "fixtures/x.json"))


def test_matching_is_rounding_on_random_draws():
    rng = random.Random(20261126)
    for _ in range(500):
        decimals = rng.randint(0, 3)
        held = rng.uniform(0.01, 5000)
        printed = round(held, decimals)
        run = Held(held, "ms", "runs.json:r.f", "r")
        assert matches(_fig(printed, decimals, "ms"), run), (held, printed)
        off = printed + rng.choice((-1, 1)) * 10 ** -decimals
        assert not matches(_fig(off, decimals, "ms"), run), (held, off)
        assert matches(_fig(round(held / 1000, decimals + 3), decimals + 3, "s"), run)


def test_the_scanner_skips_code_inline_code_and_generated_sections():
    text = ("Measured 2026-11-26: it took 12 s.\n\n```bash\nsleep 99 s\n```\n\nIt took `--timeout 7 s` then.\n\n"
            "<!-- power-table: gen -->\nMeasured 5 s\n<!-- /power-table -->\n\nA table.\n\n| a | b |\n|---|---|\n| 4.5 ms | x |\n")
    found = [(f.line, f.text, f.measured) for f in figures_in(text, "p.md")]
    assert found == [(1, "12 s", True), (17, "4.5 ms", False)], found
