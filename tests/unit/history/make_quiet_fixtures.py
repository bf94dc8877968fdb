"""Writes fixtures/history/quiet/ from the quiet series' raw pytest-benchmark JSON (made on this box with nothing
else running, 2026-11-29; fixtures/history/README.md), trimmed as fixtures/history/cpu-time's were: each file keeps
only what ``history add`` reads (the time, commit, manifest's versions, hardware, load and argv, and each
benchmark's name, timer, ``stats`` min, median, mean and rounds, its identity and figures); every figure, time and
version is as the run wrote it, except that a drift file's NxDI version is set to ``0.(8+K).0`` to name its
release K, and ``carbon_harness.planted`` says what was planted.

    python -m tests.unit.history.make_quiet_fixtures RAW_DIR   # RAW_DIR/{aa,step,drift}/*.json
    python -m tests.unit.history.make_quiet_fixtures --aa RAW_AA_DIR NAME   # fixtures/history/NAME/aa: another A/A
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from harness.core.metrics import METRICS
from harness.core.paths import FIXTURES_DIR
from harness.core.storage import atomic_write_text

OUT = FIXTURES_DIR / "history" / "quiet"
STEP_COUNT, STEP_FROM = 30000, 11  # the step's plant, from run 11 of 20
DRIFT_COUNTS = (0, 9500, 19200, 29300, 39600)  # release K's spin: 2.8 ms x 1.03^K over the A/A's fastest round
KEEP_MANIFEST = ("schema", "backend", "hardware", "harness_git_sha", "load", "torch_threads", "versions", "argv")
KEEP_EXTRA = ("hardware", "model", "shape", "backend", "dtype", "torch_threads")
KEEP_STATS = ("min", "median", "mean", "rounds")


def spin(count: int) -> str:
    return f"sum(range({count})) before every Llama forward (harness.release.plant.plant_step_spin)"


def trim(data: dict, planted: str | None = None, release: str | None = None) -> dict:
    manifest = {k: data["carbon_harness"][k] for k in KEEP_MANIFEST if k in data["carbon_harness"]}
    manifest["argv"] = manifest["argv"][1:]  # the interpreter's path to pytest's __main__
    manifest["versions"] = dict(manifest["versions"])
    if release is not None:
        manifest["versions"]["neuronx-distributed-inference"] = release
    if planted is not None:
        manifest["planted"] = planted
    benchmarks = [{"name": b["name"], "fullname": b["fullname"], "group": b["group"],
                   "options": {"timer": b["options"]["timer"]}, "stats": {k: b["stats"][k] for k in KEEP_STATS},
                   "extra_info": {k: v for k, v in b["extra_info"].items() if k in KEEP_EXTRA or k in METRICS}}
                  for b in data["benchmarks"]]
    return {"datetime": data["datetime"], "commit_info": {"id": data["commit_info"]["id"]}, "carbon_harness": manifest,
            "benchmarks": benchmarks}


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def write_aa(raw: Path, name: str) -> None:
    """Another A/A of the same command (no plant), trimmed alike, as ``fixtures/history/NAME/aa/run-NN.json``."""
    for p in sorted(raw.glob("run-*.json")):
        write(OUT.parent / name / "aa" / p.name, trim(json.loads(p.read_text())))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--aa"]:
        write_aa(Path(argv[1]), argv[2])
        return 0
    raw = Path(argv[0])
    for p in sorted((raw / "aa").glob("run-*.json")):
        write(OUT / "aa" / p.name, trim(json.loads(p.read_text())))
    for p in sorted((raw / "step").glob("run-*.json")):
        planted = spin(STEP_COUNT) if int(p.stem[4:]) >= STEP_FROM else None
        write(OUT / "step" / p.name, trim(json.loads(p.read_text()), planted))
    for p in sorted((raw / "drift").glob("rel*-run*.json")):
        k = int(re.match(r"rel(\d+)-", p.name)[1])
        planted = f"release {k}: " + (spin(DRIFT_COUNTS[k]) if DRIFT_COUNTS[k] else "none")
        write(OUT / "drift" / p.name, trim(json.loads(p.read_text()), planted, f"0.{8 + k}.0"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
