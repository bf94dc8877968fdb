"""The docs' pictures are generated from real recorded runs and are current (issue 50): ``ci/docs_pictures.py``
draws the report's plot and HTML page from a recorded main job, the power plot from fixtures/release/noise.json,
and writes a real verdict.md's head into docs/release-check.md; here each must be what it draws from those files
now (a changed run, drawing code or hand edit fails, naming the file), each must say where it came from, and the
pages must show them. The build once (about 2 s), and once more on a copy with four defects planted."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

# ci/ is not a package: load the step itself, as test_troubleshooting loads its generator
_spec = importlib.util.spec_from_file_location("carbon_docs_pictures", REPO / "ci" / "docs_pictures.py")
assert _spec and _spec.loader
dp = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = dp
_spec.loader.exec_module(dp)


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        pytest.fail("matplotlib is not installed: the docs' pictures need the plot extra, which every nox session "
                    "installs: pip install -e '.[plot,test]'")


@pytest.fixture(scope="module")
def built():
    require_matplotlib()
    return dp.build(REPO)


def recorded() -> dict:
    return json.loads((REPO / dp.MANIFEST).read_text())


def test_the_pictures_are_what_the_step_draws_from_the_recorded_runs_now(built):
    problems = dp.check(REPO, built)
    assert not problems, "\n".join(problems)
    files, manifest = built
    pictures = [p["file"] for p in manifest["pictures"] if "sha256" in p]
    assert sorted(pictures) == ["docs/img/power.svg", "docs/img/report-throughput.svg", "docs/img/report.html"]
    assert all(len(files[p]) > 10_000 for p in pictures), {p: len(files[p]) for p in pictures}


def test_each_picture_names_its_run_file_and_the_command():
    """The file itself says where it came from (an SVG's description, the HTML's comment), and its record
    names a tracked source with the run's command and date."""
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.split())
    for pic in recorded()["pictures"]:
        assert pic["sources"] and set(pic["sources"]) <= tracked, pic["sources"]
        assert all((REPO / s).is_file() for s in pic["sources"]), pic
        assert all(dp.COMMAND in line and "(20" in line for line in pic["from"]), pic["from"]
        if "sha256" in pic:
            text = (REPO / pic["file"]).read_text()
            assert all(s in text for s in pic["sources"]) and dp.COMMAND in text, pic["file"]
    run = dp.registry_run(REPO, dp.PERF_RUN)
    assert run["command"].startswith("pytest -m perf") and "--benchmark-json" in run["command"], run
    results = json.loads((REPO / dp.PERF_RUN).read_text())
    assert results["carbon_harness"]["harness_git_sha"].startswith(run["commit"]), run["commit"]
    assert results["datetime"].startswith(run["date"]), (results["datetime"], run["date"])


def test_the_pages_show_the_pictures_where_a_user_needs_them():
    page = (REPO / "docs" / "reports-and-compare.md").read_text()
    assert re.search(r"!\[[^\]]+\]\(img/report-throughput\.svg\)", page), "no image of the report's plot"
    assert re.search(r"\[[^\]]+\]\(img/report\.html\)", page), "no link to the HTML report"
    release = (REPO / "docs" / "release-check.md").read_text()
    assert re.search(r"!\[[^\]]+\]\(img/power\.svg\)", release), "no image of the power plot"
    assert release.count(dp.BEGIN) == 1 and release.count(dp.END) == 1


def test_the_excerpt_is_the_real_verdicts_own_lines_in_order():
    verdict = (REPO / dp.VERDICT).read_text().splitlines()
    section = (REPO / dp.VERDICT_PAGE).read_text().split(dp.BEGIN)[1].split(dp.END)[0]
    shown = section.split("```markdown\n", 1)[1].rsplit("```", 1)[0].splitlines()
    assert any(line.startswith("## Release check: ") for line in shown), shown[:6]
    assert "### Gated figures" in shown and not any(line.startswith("| executable ") for line in shown)
    assert 10 <= len(shown) <= dp.MAX_EXCERPT_LINES + 1, len(shown)
    at = 0
    for line in shown:
        if line == "...":
            continue
        assert line in verdict[at:], f"{line!r} is not a line of {dp.VERDICT} (after line {at})"
        at = verdict.index(line, at) + 1


def test_the_excerpt_leaves_out_whole_sections_and_says_so():
    text = "\n".join(["## Release check: PASS", "", "| | baseline | candidate |", "|---|---|---|", "| a | 1 | 2 |", "",
                      "Mode: x.", "", "### Outcome", "", "- noise", "", "### Gated figures", "", "| g |", "",
                      "<details><summary>Reported</summary>", "", "| r |", "</details>", "", "Each pair's figures."])
    assert dp.verdict_excerpt(text) == ["## Release check: PASS", "", "| | baseline | candidate |", "|---|---|---|",
                                        "| a | 1 | 2 |", "", "Mode: x.", "", "...", "### Gated figures", "", "| g |",
                                        "..."]


def test_planted_staleness_edits_and_a_lost_link_each_fail_naming_the_file(tmp_path):
    """A changed run (the power plot's noise), a hand-edited page (the HTML report), a picture no page shows
    (the report's plot) and a verdict excerpt whose source changed: each is one problem naming its file."""
    require_matplotlib()
    root = tmp_path / "checkout"
    for part in ("docs", "fixtures/docs", "fixtures/release"):
        shutil.copytree(REPO / part, root / part)
    noise = json.loads((root / dp.NOISE).read_text())
    cell = next(c for c in noise["cells"] if c["model"] == "normal" and c["change"].startswith("+15%"))
    cell["fail"] = round(1 - cell["fail"], 4)
    (root / dp.NOISE).write_text(json.dumps(noise, indent=1))
    html = root / "docs/img/report.html"
    html.write_text(html.read_text().replace("Verdict: PASS", "Verdict: FAIL"), encoding="utf-8")
    page = root / "docs/reports-and-compare.md"
    page.write_text(re.sub(r"\]\(img/report-throughput\.svg\)", "](img/other.svg)", page.read_text()))
    verdict = root / dp.VERDICT
    verdict.write_text(verdict.read_text().replace("## Release check: ", "## Release check (edited): ", 1))
    problems = dp.check(root)
    text = "\n".join(problems)
    assert len(problems) == 6, text
    assert "docs/img/power.svg: its source fixtures/release/noise.json changed" in text
    assert "docs/img/power.svg: what it shows differs" in text
    assert "docs/img/report.html: not the file" in text
    assert "docs/img/report-throughput.svg: docs/reports-and-compare.md does not show it" in text
    assert f"its source {dp.VERDICT} changed" in text
    assert f"{dp.VERDICT_PAGE}: its verdict excerpt is not the head of {dp.VERDICT}" in text
