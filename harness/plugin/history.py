"""``--carbon-history URL``: after a ``pytest -m perf`` session has written its ``--benchmark-json``,
judge that run against the recent history of each of its series in the store (``harness.history.gate``)
and fail the session on a figure outside its history's noise. The fixed thresholds gate as before;
a series without history is counted, not judged. The run is not added: ``carbon-harness history add``
records what a team decides to keep (a main-branch run, say)."""

from __future__ import annotations

import pytest

from harness.plugin.xdist import is_worker


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("carbon-harness").addoption(
        "--carbon-history", metavar="URL", default=None,
        help="with --benchmark-json: judge the run against its series' history in this store (sqlite:///PATH, "
             "postgresql://...); fails the session on a regression beyond the history's noise")


def judge_lines(url: str, path) -> tuple[list[str], bool]:
    from harness.history.clocks import summary
    from harness.history.gate import Tally, judge
    from harness.history.records import read_source
    from harness.history.store import connected, points

    source = read_source(path)
    with connected(url) as conn:
        judged = judge(source.runs[0], [p for p in points(conn) if p["source_hash"] != source.content_hash])
    tally = Tally.of(judged)
    lines = [f"carbon-harness: history {j.describe()}" for j in tally.worse]
    lines.append(f"carbon-harness: history: {tally.judged} figures judged against their history, {len(tally.worse)} "
                 f"regressions; {tally.without_history} without history (the fixed thresholds gate them)")
    lines += [f"carbon-harness: history: {line}" for line in summary(tally.not_judged).splitlines()]
    return lines, bool(tally.worse)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """Inside pytest-benchmark's own sessionfinish (which writes the JSON) is done by then."""
    yield
    config = session.config
    url = config.getoption("carbon_history", None)
    if not url or is_worker(config):
        return
    target = config.getoption("benchmark_json", None)
    path = getattr(target, "path", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if path is None or not path.is_file():
        lines, worse = ["carbon-harness: --carbon-history judges the --benchmark-json FILE: none was written"], True
    else:
        try:
            lines, worse = judge_lines(url, path)
        except (ValueError, OSError) as exc:
            lines, worse = [f"carbon-harness: --carbon-history: {exc}"], True
    for line in lines:
        reporter.write_line(line) if reporter else print(line)
    if worse and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
