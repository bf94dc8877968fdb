"""``python -m harness.release.power analyse --page PAGE`` rewrites the power table where the docs keep it
(docs/release-check.md, between its power-table markers) and nothing else of the page; ``--readme``, the
option's name while the table lived in the README, still works. A few simulated checks per cell (the
table's figures are not what is under test here: its writing is), about 3 s."""

from __future__ import annotations

import pytest

from harness.release.power.__main__ import BEGIN, END, main
from tests.helpers import REPO

pytestmark = pytest.mark.unit

PAGE = REPO / "docs" / "release-check.md"
STREAMS = sorted(str(p) for p in (REPO / "fixtures" / "release").glob("stream-*.json"))


def outside(text: str) -> tuple[str, str]:
    head, rest = text.split(BEGIN)
    return head, rest.split(END, 1)[1]


def test_the_docs_page_holds_one_power_table():
    text = PAGE.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{PAGE} must hold one {BEGIN} ... {END} section"


@pytest.mark.parametrize("option", ["--page", "--readme"])
def test_analyse_rewrites_only_the_table_of_the_page(tmp_path, option, capsys):
    page = tmp_path / "release-check.md"
    page.write_text(PAGE.read_text())
    argv = ["analyse", *STREAMS, "--sims", "3", "--out", str(tmp_path / "power.md"), option, str(page)]
    assert main(argv) == 0
    written = page.read_text()
    assert outside(written) == outside(PAGE.read_text())
    table = written.split(BEGIN)[1].split(END)[0]
    assert f"{option} {page}`" in table.splitlines()[1], "the table's first line names the command that wrote it"
    assert "| family (gated figures) |" in table


def test_a_page_without_the_markers_is_refused_naming_it(tmp_path, capsys):
    page = tmp_path / "other.md"
    page.write_text("# a page with no power table\n")
    with pytest.raises(SystemExit, match=f"{page}: no single"):
        main(["analyse", *STREAMS, "--sims", "3", "--out", str(tmp_path / "power.md"), "--page", str(page)])
    assert page.read_text() == "# a page with no power table\n"
