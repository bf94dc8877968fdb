"""The docs' pictures, generated from real recorded runs (issue 50): never drawn by hand, and checked.

Usage (from the repository root)::

    python ci/docs_pictures.py --write      # (re)write docs/img/* and the verdict excerpt of docs/release-check.md
    python ci/docs_pictures.py --check      # exit 1, naming each, where a picture is stale, edited or unreferenced

What it draws, and from what (each source a file in the repository, each run in fixtures/docs/runs.json with
its command, date, machine and load):

- ``docs/img/report-throughput.svg``: ``carbon-harness report RUN --plot`` of a real main job, its pytest-
  benchmark JSON kept as ``fixtures/docs/recorded/perf-main.json`` (``harness.analysis.report``'s own figure);
- ``docs/img/report.html``: ``carbon-harness report RUN --html`` of the same run (the same page, the plot
  embedded), with a comment naming its source;
- ``docs/img/power.svg``: the power plot, from ``fixtures/release/noise.json`` (what ``python -m
  harness.release.power analyse --fixture`` wrote from the recorded streams; ``harness.release.power.plot``);
- the verdict excerpt of docs/release-check.md (between its ``verdict-excerpt`` markers): the head of a real
  ``verdict.md``, kept as ``fixtures/docs/recorded/release-check-hf-457-524/verdict.md``: its warnings, verdict,
  the sides' versions, mode line, reasons and gated figures, the rows about where that machine keeps things
  (interpreter and checkout paths, start hooks) and the later sections left out, each cut marked ``...``.

``docs/img/pictures.json`` records, for each picture, its source files (path and sha256), the run's command and
date, what drew it, the sha256 of the file written and of the figure's content. The content is what the figure
shows read from matplotlib's objects (texts, bars, lines, limits, colours: no pixels, no fonts), so a newer
matplotlib that renders the same figure differently does not make a picture stale, while a changed run file or
drawing code does. ``--check`` (and tests/unit/test_docs_pictures.py) fails where a source's hash, a file's
hash, or the content regenerated now differs from the record, where the page's excerpt differs from what the
recorded verdict gives, where a page no longer shows a picture, and, where the installed matplotlib is the one
that wrote them, where the bytes regenerated now differ. Files are written atomically.

To refresh a picture after a new run: replace its source file (and its entry in fixtures/docs/runs.json), then
``--write``; ``git diff docs/img`` shows what moved.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python ci/docs_pictures.py --write"
MANIFEST = "docs/img/pictures.json"
REGISTRY = "fixtures/docs/runs.json"
PERF_RUN = "fixtures/docs/recorded/perf-main.json"
NOISE = "fixtures/release/noise.json"
VERDICT = "fixtures/docs/recorded/release-check-hf-457-524/verdict.md"
VERDICT_PAGE = "docs/release-check.md"
BEGIN = "<!-- verdict-excerpt: python ci/docs_pictures.py --write -->"
END = "<!-- /verdict-excerpt -->"
# matplotlib's svg settings: ids salted alike from one run to the next, text kept as text (searchable, about a
# third of the size of glyph outlines; the browser's sans-serif where DejaVu Sans is not installed)
SVG_RC = {"svg.hashsalt": "carbon-harness-docs", "svg.fonttype": "none"}
MAX_EXCERPT_LINES = 45


@dataclass(frozen=True)
class Picture:
    file: str  # under the repository root
    sources: tuple[str, ...]  # the files it is drawn from
    drawn_by: str
    equivalent: str  # the user's command that makes the same picture
    pages: tuple[str, ...]  # the pages that must show (or link) it
    make: Callable[[Path], tuple[bytes, str]]  # root -> (the file's bytes, the sha256 of its content)


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def _colour(c: Any) -> str:
    from matplotlib.colors import to_hex

    try:
        return to_hex(c, keep_alpha=True)
    except (TypeError, ValueError):
        return str(c)


def figure_content(fig: Any) -> dict[str, Any]:
    """What a matplotlib figure shows, from its objects, not its pixels: the titles, labels, scales, limits,
    fixed ticks, each bar, line, line collection and text (floats to 6 significant digits, colours as hex).
    The same for the same figure on any matplotlib a picture is likely to be made with."""
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FixedLocator

    def ticks(axis: Any) -> dict[str, Any]:
        """Ticks the code placed (a FixedLocator) and their labels; automatic ones follow from the limits."""
        if not isinstance(axis.get_major_locator(), FixedLocator):
            return {}
        return {"at": [_r(x) for x in axis.get_major_locator().locs],
                "labels": [t.get_text() for t in axis.get_majorticklabels()]}

    axes = []
    for ax in fig.axes:
        legend = ax.get_legend()
        axes.append({
            "title": [ax.get_title(loc=loc) for loc in ("left", "center", "right")],
            "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "scale": [ax.get_xscale(), ax.get_yscale()],
            "xlim": [_r(x) for x in ax.get_xlim()], "ylim": [_r(y) for y in ax.get_ylim()],
            "xticks": ticks(ax.xaxis), "yticks": ticks(ax.yaxis),
            "bars": [[_r(p.get_x()), _r(p.get_y()), _r(p.get_width()), _r(p.get_height()), _colour(p.get_facecolor())]
                     for p in ax.patches if isinstance(p, Rectangle)],
            "lines": [[ln.get_label() if not ln.get_label().startswith("_") else "",
                       [[_r(float(x)), _r(float(y))] for x, y in ln.get_xydata()], _colour(ln.get_color()),
                       ln.get_linestyle()] for ln in ax.get_lines()],
            "segments": [[[[_r(float(v)) for v in point] for point in seg] for seg in c.get_segments()]
                         + [_colour(c.get_edgecolor()[0]) if len(c.get_edgecolor()) else ""]
                         for c in ax.collections if isinstance(c, LineCollection)],
            "texts": [[t.get_text(), [_r(float(v)) for v in t.get_position()], _colour(t.get_color())]
                      for t in ax.texts],
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        })
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    return {"size": [_r(x) for x in fig.get_size_inches()], "suptitle": suptitle, "axes": axes}


def content_hash(fig: Any) -> str:
    return sha256(json.dumps(figure_content(fig), sort_keys=True))


def registry_run(root: Path, source: str) -> dict[str, Any]:
    """The run of fixtures/docs/runs.json whose ``files`` hold ``source``: its command, date, machine, load."""
    runs = json.loads((root / REGISTRY).read_text())["runs"]
    found = [r for r in runs if source in r.get("files", ())]
    if len(found) != 1:
        raise SystemExit(f"{REGISTRY}: {len(found)} runs list {source} under 'files' (want 1: the run that "
                         f"recorded it, with its command, date, machine and load)")
    return found[0]


def provenance(root: Path, source: str) -> str:
    """One line: where a picture's data comes from (the file, its run's command, date and machine)."""
    if source == NOISE:
        noise = json.loads((root / NOISE).read_text())
        return (f"{NOISE}, written by `{noise['command']}` ({noise['measured']}, {noise['machine']}); "
                f"drawn by `{COMMAND}`")
    run = registry_run(root, source)
    return (f"{source}, from `{run['command']}` ({run['date']}, {run['machine']}; load: {run['load']}); drawn by "
            f"`{COMMAND}`")


def _svg(fig: Any, title: str, about: str) -> bytes:
    import matplotlib
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        with matplotlib.rc_context(SVG_RC):
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Title": title, "Description": about})
    finally:
        plt.close(fig)
    return buffer.getvalue()


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("the docs' pictures need matplotlib: pip install -e '.[plot]'") from None


def _perf(root: Path) -> tuple[list, dict]:
    from harness.analysis.results import load_results

    return load_results(root / PERF_RUN)


def make_report_plot(root: Path) -> tuple[bytes, str]:
    from harness.analysis.report import throughput_figure

    results, manifest = _perf(root)
    fig = throughput_figure(results, manifest)
    digest = content_hash(fig)
    return _svg(fig, "Carbon throughput (bp/s) of a real main job", provenance(root, PERF_RUN)), digest


def make_report_html(root: Path) -> tuple[bytes, str]:
    """``carbon-harness report RUN --html``'s page (cmd_report's own calls), a comment naming its source; its
    content hash reads the embedded plot as the plot's content, not its pixels."""
    import matplotlib.pyplot as plt

    from harness.analysis.report import html_page, throughput_figure

    results, manifest = _perf(root)
    fig = throughput_figure(results, manifest)
    digest = content_hash(fig)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=110, format="png")  # as report.plot(results, None, manifest, fmt="png")
    finally:
        plt.close(fig)
    page = html_page(results, manifest, buffer.getvalue())
    doctype, rest = page.split("\n", 1)
    comment = f"<!-- generated from {provenance(root, PERF_RUN)}; not edited by hand -->"
    page = f"{doctype}\n{comment}\n{rest}"
    embedded = base64.b64encode(buffer.getvalue()).decode()
    assert embedded in page, "html_page no longer embeds the plot it is given"
    return page.encode(), sha256(page.replace(embedded, digest))


def make_power_plot(root: Path) -> tuple[bytes, str]:
    from harness.release.power.plot import power_figure

    fig = power_figure(json.loads((root / NOISE).read_text()))
    digest = content_hash(fig)
    return _svg(fig, "Gate power at the measured noise", provenance(root, NOISE)), digest


PICTURES = (
    Picture("docs/img/report-throughput.svg", (PERF_RUN,), "harness.analysis.report.throughput_figure",
            f"carbon-harness report {PERF_RUN} --plot throughput.svg", ("docs/reports-and-compare.md",),
            make_report_plot),
    Picture("docs/img/report.html", (PERF_RUN,), "harness.analysis.report.html_page",
            f"carbon-harness report {PERF_RUN} --html report.html", ("docs/reports-and-compare.md",),
            make_report_html),
    Picture("docs/img/power.svg", (NOISE,), "harness.release.power.plot.power_figure",
            f"{COMMAND} (from {NOISE})", ("docs/release-check.md",), make_power_plot),
)


# What a reader of a verdict needs first; the rest of the file (the output contract, configuration drift, work per
# step, the runtime layer, the figures reported but not gated) is named in the page's sentence, not shown.
KEPT_SECTIONS = ("### Reasons", "### Still open", "### Gated figures")
# Rows of the side table about where the machine that ran it keeps things (the interpreters' and the checkout's
# paths, the module path, start hooks, variables): real, and noise to a reader.
MACHINE_ROWS = re.compile(r"^\| (?:executable|harness_root|sys\.path|(?:pth|hook|env) \S+|neuron driver) \|")


def verdict_excerpt(text: str) -> list[str]:
    """A verdict.md's lines a reader needs first, in order: the warnings, the verdict, the sides' versions, the
    mode line, the reasons, any figure still open and the gated figures; each run of lines left out (a later
    section, a machine's row) is one ``...`` line, and so is the tail of an excerpt longer than the page takes."""
    lines = text.rstrip("\n").split("\n")
    keep: list[str] = []
    section, last = "", -1
    for i, line in enumerate(lines):
        if line.startswith("### "):
            section = line
        elif line.startswith(("<details", "<!--")):
            section = "left out"
        if (section and not section.startswith(KEPT_SECTIONS)) or MACHINE_ROWS.match(line):
            if keep and keep[-1] != "...":
                keep.append("...")
            continue
        keep.append(line)
        last = i
    while keep and keep[-1] in ("", "..."):
        keep.pop()
    if len(keep) > MAX_EXCERPT_LINES:
        keep, last = keep[:MAX_EXCERPT_LINES - 1], len(lines)
    return keep + (["..."] if any(line.strip() for line in lines[last + 1:]) else [])


def left_out_sections(text: str) -> list[str]:
    """The headings of the sections the excerpt leaves out, without their parenthetical notes."""
    found = [re.sub(r"\s*\(.*\)$", "", line[4:]) for line in text.split("\n")
             if line.startswith("### ") and not line.startswith(KEPT_SECTIONS)]
    if re.search(r"^<details><summary>Reported, not gated", text, re.M):
        found.append("the figures reported but not gated")
    return found


def verdict_section(root: Path) -> str:
    text = (root / VERDICT).read_text()
    run = registry_run(root, VERDICT)
    shown = verdict_excerpt(text)
    return "\n".join([
        BEGIN,
        f"From a real `verdict.md` ({len(text.splitlines())} lines in all, kept as `{VERDICT}`): "
        f"`{run['command']}` ({run['date']}, {run['machine']}; load: {run['load']}). `{COMMAND}` writes this excerpt "
        f"from that file, `...` where it leaves lines out: the rows about where that machine keeps things and the "
        f"sections after the gated figures ({', '.join(left_out_sections(text))}).",
        "",
        "```markdown",
        *shown,
        "```",
        END])


def page_with_section(page: str, section: str, where: str) -> str:
    if page.count(BEGIN) != 1 or page.count(END) != 1:
        raise SystemExit(f"{where}: no single {BEGIN} ... {END} section to replace")
    head, rest = page.split(BEGIN, 1)
    return head + section + rest.split(END, 1)[1]


def matplotlib_version() -> str:
    import matplotlib

    return matplotlib.__version__


def build(root: Path) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file the step writes (path -> bytes) and the manifest (itself among the files)."""
    _require_matplotlib()
    files: dict[str, bytes] = {}
    record = []
    for pic in PICTURES:
        data, digest = pic.make(root)
        files[pic.file] = data
        record.append({"file": pic.file, "sources": {s: sha256((root / s).read_bytes()) for s in pic.sources},
                       "from": [provenance(root, s) for s in pic.sources], "drawn_by": pic.drawn_by,
                       "equivalent": pic.equivalent, "pages": list(pic.pages), "content_sha256": digest,
                       "sha256": sha256(data)})
    page = (root / VERDICT_PAGE).read_text()
    files[VERDICT_PAGE] = page_with_section(page, verdict_section(root), VERDICT_PAGE).encode()
    record.append({"file": f"{VERDICT_PAGE} (its verdict-excerpt section)", "sources": {VERDICT: sha256(
        (root / VERDICT).read_bytes())}, "from": [provenance(root, VERDICT)], "drawn_by": "ci/docs_pictures.py "
        "verdict_excerpt", "equivalent": f"head of {VERDICT}", "pages": [VERDICT_PAGE]})
    manifest = {"_about": "What each docs picture was generated from and the hashes that tell it is current: "
                          "ci/docs_pictures.py writes this, tests/unit/test_docs_pictures.py checks it. Do not edit.",
                "generated_by": COMMAND, "matplotlib": matplotlib_version(), "pictures": record}
    files[MANIFEST] = (json.dumps(manifest, indent=1) + "\n").encode()
    return files, manifest


def referenced(root: Path, picture: str, page: str) -> bool:
    """Whether ``page`` shows or links ``picture`` (a markdown image or link to its path relative to docs/)."""
    target = Path(picture).relative_to("docs").as_posix()
    return re.search(r"\]\(" + re.escape(target) + r"(?:#[^)]*)?\)", (root / page).read_text()) is not None


def check(root: Path, built: tuple[dict[str, bytes], dict[str, Any]] | None = None) -> list[str]:
    """What is stale, edited or unreferenced: one line each, naming the file and the fix; [] when current
    (``built``: what ``build(root)`` returned, where the caller has it already)."""
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        return [f"{MANIFEST} is missing: run {COMMAND}"]
    recorded = {p["file"]: p for p in json.loads(manifest_path.read_text())["pictures"]}
    files, manifest = built or build(root)
    problems = []
    same_matplotlib = json.loads(manifest_path.read_text()).get("matplotlib") == manifest["matplotlib"]
    for now in manifest["pictures"]:
        name, was = now["file"], recorded.get(now["file"])
        if was is None:
            problems.append(f"{name}: not in {MANIFEST}: run {COMMAND}")
            continue
        for source, digest in now["sources"].items():
            if was["sources"].get(source) != digest:
                problems.append(f"{name}: its source {source} changed since it was drawn: run {COMMAND}")
        for page in now["pages"]:
            if "sha256" in now and not referenced(root, name, page):
                problems.append(f"{name}: {page} does not show it (no ]({Path(name).relative_to('docs')}) link)")
        if "sha256" not in now:
            continue
        path = root / name
        if not path.is_file():
            problems.append(f"{name}: missing: run {COMMAND}")
            continue
        as_written = sha256(path.read_bytes()) == was["sha256"]
        if not as_written:
            problems.append(f"{name}: not the file {COMMAND} wrote (edited by hand, or written half): run it")
        if was.get("content_sha256") != now["content_sha256"]:
            problems.append(f"{name}: what it shows differs from what its source draws now (the drawing code or "
                            f"the data changed): run {COMMAND}")
        elif as_written and same_matplotlib and path.read_bytes() != files[name]:
            # the same content drawn otherwise (a colour the content leaves out, the file's own comment)
            problems.append(f"{name}: matplotlib {manifest['matplotlib']} draws it differently now: run {COMMAND}")
    if (root / VERDICT_PAGE).read_bytes() != files[VERDICT_PAGE]:
        problems.append(f"{VERDICT_PAGE}: its verdict excerpt is not the head of {VERDICT}: run {COMMAND}")
    return problems


def write(root: Path) -> list[str]:
    """Write what changed (atomically); the paths written."""
    from harness.core.storage import atomic_write_bytes

    files, _ = build(root)
    written = []
    for name, data in files.items():
        path = root / name
        if not path.is_file() or path.read_bytes() != data:
            atomic_write_bytes(path, data)
            written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python ci/docs_pictures.py", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the pictures, their record and the excerpt")
    mode.add_argument("--check", action="store_true", help="exit 1 if any is stale, edited or unreferenced")
    args = parser.parse_args(argv)
    if args.write:
        written = write(ROOT)
        print("\n".join(f"wrote {name}" for name in written) or "docs pictures: all current")
        return 0
    problems = check(ROOT)
    for line in problems:
        print(line, file=sys.stderr)
    print("docs pictures: " + (f"{len(problems)} problem(s)" if problems else "all current"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
