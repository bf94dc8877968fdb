"""pytest-benchmark under pytest-xdist: measure in the workers, merge in the controller.

pytest-benchmark turns itself off when xdist is active (its warning says so, every timed test then
skips, no ``--benchmark-json`` is written, and the session exits 0). The harness's scale-out is
one model per worker, each on its own cores (``--carbon-cores-per-worker`` on Trn2), so the
workers measure; each one ships its results to the controller in xdist's ``workeroutput``, in
pytest-benchmark's own ``as_dict`` form (every round's data included). The controller rebuilds
them as pytest-benchmark ``Metadata`` objects, so its JSON, ``--benchmark-save``,
``--benchmark-compare`` and result table run on the merged set unchanged.

Every passing test that used the ``benchmark`` fixture must arrive with a result: one that did
not (never measured, or its worker's output was lost) fails the session, named.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from pytest_benchmark.stats import Metadata, Stats
from pytest_benchmark.utils import safe_dumps

RESULTS_KEY = "carbon_benchmarks"
WORKER_KEY = "carbon_worker"
REPORT_ATTR = "carbon_benchmark"
XDIST_DISABLED_WARNING = "Benchmarks are automatically disabled because xdist plugin is active"


def is_worker(config: Any) -> bool:
    return hasattr(config, "workerinput")


def is_controller(config: Any) -> bool:
    """The xdist controller (tests run in its workers), by the same test pytest-benchmark uses."""
    return not is_worker(config) and config.getoption("dist", "no") != "no"


def user_disabled(config: Any) -> bool:
    """Benchmarks the user turned off (--benchmark-disable, --benchmark-skip): left off."""
    disabled = config.getoption("benchmark_disable", False) and not config.getoption("benchmark_enable", False)
    return bool(disabled or config.getoption("benchmark_skip", False))


def enable_benchmarks(config: Any, benchmark_session: Any) -> bool:
    """Undo pytest-benchmark's automatic disabling (xdist, or a PYTEST_XDIST_WORKER inherited
    from an outer run); True when it was undone. A worker keeps no JSON, storage or compare of its
    own: the controller does those once, on the merged results."""
    if is_worker(config):
        benchmark_session.json = None
        benchmark_session.save = None
        benchmark_session.autosave = None
        benchmark_session.compare = None
        benchmark_session.compare_fail = None
        benchmark_session.compared_mapping = {}
    if user_disabled(config):
        return False
    # pytest-benchmark >= 5.3 keeps its "disabled because xdist" warning for the end of the run
    benchmark_session.xdist_warning = False
    if not benchmark_session.disabled:
        return False
    benchmark_session.disabled = False
    return True


def export_results(benchmark_session: Any) -> str:
    """A worker's results, serialised the way pytest-benchmark writes them into its JSON."""
    cprofile = (benchmark_session.cprofile_sort_by, benchmark_session.cprofile_top)
    return safe_dumps([bench.as_dict(include_data=True, cprofile=cprofile)
                       for bench in benchmark_session.benchmarks if not bench.has_error])


class WorkerBenchmark(Metadata):
    """A benchmark measured in a worker, rebuilt from its ``as_dict`` form. Its statistics are
    recomputed from the shipped rounds, so they equal the ones the worker would have written."""

    has_error = False

    def __init__(self, record: dict[str, Any]) -> None:
        stats = record["stats"]
        self.name = record["name"]
        self.fullname = record["fullname"]
        self.group = record.get("group")
        self.param = record.get("param")
        self.params = record.get("params")
        self.extra_info = record.get("extra_info") or {}
        self.cprofile_stats = None
        self.cprofile = record.get("cprofile")
        self.iterations = stats["iterations"]
        self.stats = Stats()
        self.stats.data = list(stats["data"])
        self.options = record.get("options") or {}
        self.fixture = None

    def as_dict(self, include_data=True, flat=False, stats=True, cprofile=None):
        result = super().as_dict(include_data=include_data, flat=flat, stats=stats, cprofile=cprofile)
        if self.cprofile is not None:
            result["cprofile"] = self.cprofile
        return result


def import_results(payload: str) -> list[WorkerBenchmark]:
    return [WorkerBenchmark(record) for record in json.loads(payload)]


def worker_manifest(session: Any) -> str:
    """What differs between workers: their NeuronCores, their CPU threads and the engines they built."""
    from harness.session.manifest import torch_threads

    return json.dumps({"neuron_rt_visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                       "torch_threads": torch_threads(),
                       "engines": session.load_log if session is not None else []})


def mark_report(report: Any, item: Any) -> None:
    """On the call report of a test with an enabled ``benchmark`` fixture: whether it measured
    (the attribute travels from an xdist worker to the controller with the report)."""
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    if fixture is None or getattr(fixture, "disabled", True):
        return
    setattr(report, REPORT_ATTR, "measured" if fixture.stats is not None else "none")


@dataclass
class BenchmarkLedger:
    """The benchmarks a session expected (passing tests that used the fixture) and received."""

    expected: list[str] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)
    received: list[WorkerBenchmark] = field(default_factory=list)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, report: Any) -> None:
        mark = getattr(report, REPORT_ATTR, None)
        if report.when != "call" or not report.passed or mark is None:
            return
        (self.expected if mark == "measured" else self.unmeasured).append(report.nodeid)

    def receive(self, worker: str, workeroutput: dict[str, Any] | None) -> None:
        if not workeroutput or RESULTS_KEY not in workeroutput:
            return  # a crashed worker: xdist fails its test, missing() names its lost benchmarks
        self.received.extend(import_results(workeroutput[RESULTS_KEY]))
        self.workers[worker] = json.loads(workeroutput.get(WORKER_KEY) or "{}")

    def merged(self) -> list[WorkerBenchmark]:
        """The received benchmarks in the order their tests finished (unknown ones last)."""
        order = {nodeid: i for i, nodeid in enumerate(self.expected)}
        return sorted(self.received, key=lambda b: order.get(b.fullname, len(order)))

    def missing(self, produced: set[str] | None = None) -> list[str]:
        """Tests that passed with an enabled benchmark fixture but whose result is not here:
        never measured, or (under xdist: ``produced`` is the received names) lost on the way."""
        lost = [] if produced is None else [n for n in self.expected if n not in produced]
        return self.unmeasured + lost

    def machine_info(self) -> dict[str, Any]:
        """The workers' part of the run manifest: the controller builds no engine itself."""
        engines = [{"worker": w, **e} for w, info in sorted(self.workers.items()) for e in info.get("engines", [])]
        return {"xdist_workers": dict(sorted(self.workers.items())), "engines": engines}
