"""The plugin's pytest-benchmark hooks, one object per session (registered at configure).

Two jobs, both about trusting the figures a run leaves behind:
- under pytest-xdist the workers measure and the controller merges (``harness.plugin.xdist``);
  a passing benchmark test whose result is missing fails the session, named;
- ``--benchmark-json`` is written atomically and a failed write fails the session with one line
  (``harness.plugin.benchmark_json``).
And one about watching them being made: each benchmark's rounds are reported as they end, at the
rate pytest's verbosity asks for (``harness.plugin.progress``).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest

from harness.plugin.benchmark_json import guard_save_json
from harness.plugin.keys import SESSION_KEY
from harness.plugin.xdist import (
    RESULTS_KEY,
    WORKER_KEY,
    XDIST_DISABLED_WARNING,
    BenchmarkLedger,
    enable_benchmarks,
    export_results,
    is_controller,
    is_worker,
    mark_report,
    user_disabled,
    worker_manifest,
)


class BenchmarkHooks:
    NAME = "carbon-harness-benchmarks"

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.ledger = BenchmarkLedger()
        self.json_failures: list[str] = []
        self.manifest: dict[str, Any] | None = None  # the run manifest, for the JSON's top level
        self.distributed = is_worker(config) or is_controller(config)
        self._filter = None
        self._only = False
        if self.distributed and not user_disabled(config):
            # pytest-benchmark's configure (it runs after the harness's) warns that xdist disables
            # benchmarks, and refuses --benchmark-only with disabled benchmarks; they are
            # re-enabled at session start, so the warning would be false and the refusal wrong:
            # the one is filtered, the other option handed back at session start.
            warnings.filterwarnings("ignore", message=XDIST_DISABLED_WARNING)
            self._filter = warnings.filters[0]
            if config.getoption("benchmark_only", False):
                self._only = True
                config.option.benchmark_only = False

    @property
    def benchmark_session(self) -> Any:
        return getattr(self.config, "_benchmarksession", None)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        if is_controller(config) and not user_disabled(config):
            return ["carbon-harness: pytest-xdist: benchmarks are measured in each worker and merged in one report"]
        return []

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self._filter is not None and self._filter in warnings.filters:
            warnings.filters.remove(self._filter)
            self._filter = None
        bs = self.benchmark_session
        if bs is None:
            return
        if enable_benchmarks(self.config, bs) and self._only:
            bs.only = self.config.option.benchmark_only = True
        if not is_worker(self.config):
            guard_save_json(bs, self.json_failures)
            self.one_line_regressions(bs, session)

    def one_line_regressions(self, bs: Any, session: pytest.Session) -> None:
        """``--benchmark-compare-fail``: pytest-benchmark raises ``PerformanceRegression`` from its
        terminal summary, an 80-line traceback after its own list. Instead: one line per regression
        and a failed session (exit 1); its usage error (no baseline to compare with) is kept."""
        original = bs.check_regressions

        def check_regressions() -> None:
            if not bs.performance_regressions:
                return original()
            # pytest-benchmark may record one benchmark's failure more than once: each is said once
            self.report(list(dict.fromkeys(f"carbon-harness: REGRESSION {name}: {fail}"
                                           for name, fail in bs.performance_regressions)))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

        bs.check_regressions = check_regressions

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        if call.when == "call":
            mark_report(outcome.get_result(), item)
            record_failure(outcome.get_result(), item)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        """A benchmark's rounds show as they end (a worker's output is not shown: its controller's is)."""
        from harness.plugin.progress import instrument, interval_for

        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        if benchmark is not None and not is_worker(self.config):
            instrument(benchmark, item.name, interval_for(self.config.get_verbosity()), self.progress_line)

    def progress_line(self, line: str) -> None:
        """One line on the terminal, past pytest's capture, on a line of its own (``write_line`` ends
        a line of dots first; pytest rewrites the test's name before its outcome, as after live logs)."""
        from contextlib import nullcontext

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capman = self.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else nullcontext():
            reporter.write_line(f"[carbon-harness] {line}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not is_worker(self.config):
            self.ledger.record(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.ledger.receive(node.gateway.id, getattr(node, "workeroutput", None))

    @pytest.hookimpl(optionalhook=True, trylast=True)
    def pytest_benchmark_update_machine_info(self, config: pytest.Config, machine_info: dict) -> None:
        """Last: the run manifest (the plugin's hook put it here) is kept for the JSON's top level,
        and machine_info keeps only its stable identity (``harness.session.manifest``)."""
        from harness.session.manifest import machine_identity

        manifest = machine_info.get("carbon_harness")
        if not isinstance(manifest, dict):
            return
        if self.ledger.workers:
            manifest = {**manifest, **self.ledger.machine_info()}
        self.manifest = manifest
        machine_info["carbon_harness"] = machine_identity(manifest)

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: Any, output_json: dict) -> None:
        """The whole run manifest at the JSON's top level, where pytest-benchmark never diffs it."""
        if self.manifest is not None:
            output_json["carbon_harness"] = self.manifest

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int):
        """Outermost: a worker's results are handed to xdist before its own wrapper sends them,
        the merged results are in place before pytest-benchmark writes its JSON and table, and
        the verdict comes after both."""
        bs = self.benchmark_session
        if bs is not None and is_worker(self.config):
            self.config.workeroutput[RESULTS_KEY] = export_results(bs)
            self.config.workeroutput[WORKER_KEY] = worker_manifest(self.config.stash.get(SESSION_KEY, None))
        produced = None
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED and bs is not None and not is_worker(self.config)
        if interrupted:
            interrupted_line = self.discard_interrupted_run(bs)
        elif bs is not None and is_controller(self.config):
            bs.benchmarks[:] = self.ledger.merged()
            produced = {b.fullname for b in bs.benchmarks}
        yield
        if interrupted:
            self.report([interrupted_line])
            return
        if bs is None or is_worker(self.config):
            return
        problems = list(self.json_failures)
        missing = self.ledger.missing(produced)
        if missing:
            problems.append(f"carbon-harness: {len(missing)} benchmark(s) passed but recorded no result: "
                            + ", ".join(missing))
        if problems:
            self.report(problems)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def discard_interrupted_run(self, bs: Any) -> str:
        """Ctrl-C (or another stop) during the run: pytest-benchmark would still write its JSON and
        saved file from whatever it holds, the interrupted benchmark's cut-short rounds recorded as
        if complete (or fail on ``min()`` of no rounds, cut in its first). Nothing is written, saved
        or compared: the previous files stay as they were. Returns the line that says so."""
        kept = [f"--benchmark-json {bs.json}"] if bs.json else []
        kept += ["--benchmark-save / --benchmark-autosave storage"] if bs.save or bs.autosave else []
        bs.benchmarks[:] = []
        bs.json = bs.save = bs.autosave = bs.compare = None
        return ("carbon-harness: interrupted: no benchmark result written or compared, none of the interrupted "
                "benchmark's rounds recorded or gated" + (f"; {' and '.join(kept)} left as it was" if kept else ""))

    def report(self, lines: list[str]) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True, bold=True)
            else:
                sys.stderr.write(line + "\n")


def failure_reason(report: Any, limit: int = 300) -> str:
    """The first line of why a test failed (the assertion's message, a ``pytest.fail`` text), cut to ``limit``."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = getattr(crash, "message", None) or str(getattr(report, "longrepr", "") or "")
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no message")
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def record_failure(report: Any, item: Any) -> None:
    """A benchmark whose test failed after its rounds were timed keeps its row in the JSON, with
    ``outcome: failed`` and why: the report shows a failed row that says so, never a blank one."""
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    if fixture is None or not report.failed or getattr(fixture, "stats", None) is None:
        return
    fixture.extra_info["outcome"] = "failed"
    fixture.extra_info["failure"] = failure_reason(report)

