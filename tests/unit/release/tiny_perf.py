"""A tiny real perf command for the rounds' tests (tests/unit/release/test_rounds.py): a release check
runs ``PYTHON -m pytest -m perf ... --benchmark-json=FILE --junitxml=FILE``, and this script, standing in
for that interpreter, writes what such a round writes: pytest-benchmark-shaped JSON with one TKG
benchmark (its rounds in ``stats.data``, ``tkg_ms_p50`` their median; a second, the long shape's, where the spec
says ``long``) and JUnit XML, then exits.

What each round does comes from the JSON file named by ``TINY_PERF_SPEC`` (one per side): per round
``k`` (from the benchmark file's name, ``perf-round-{k}.json``) the TKG milliseconds, an exit code,
whether it writes results; every run appends ``SIDE k`` to ``TINY_PERF_LOG``, so the order the check
ran the sides in can be read back.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

TKG = "tests/perf/test_latency.py::test_tkg[carbon-tiny-smoke]"


def main(argv: list[str]) -> int:
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    bench, junit = Path(opts["benchmark-json"]), Path(opts["junitxml"])
    k = re.search(r"perf-round-(\d+)\.json$", bench.name).group(1)
    spec = json.loads(Path(os.environ["TINY_PERF_SPEC"]).read_text())
    with open(os.environ["TINY_PERF_LOG"], "a") as log:
        log.write(f"{spec['side']} {k}\n")
    ms = spec.get("tkg_ms", {}).get(k, spec.get("default_ms", 17.0))
    rc = spec.get("exit", {}).get(k, 0)
    if spec.get("results", {}).get(k, True):
        rounds = [ms * (1.0 + 0.001 * i) for i in (-1, 0, 1)]
        entry = {"name": "test_tkg[carbon-tiny-smoke]", "fullname": TKG, "group": "tkg-smoke",
                 "stats": {"median": rounds[1] / 1000.0, "rounds": 3, "data": [r / 1000.0 for r in rounds]},
                 "extra_info": {"tkg_ms_p50": rounds[1]}}
        if not spec.get("gated", True):  # a benchmark with no timed median: nothing of it is gated
            entry = {"name": "test_tkg[carbon-tiny-smoke]", "fullname": TKG, "extra_info": {"tokens_per_s": 1e3 / ms}}
        entries = [entry]
        if spec.get("long"):  # a second benchmark, the long shape's, timed alike: two figures to gate
            entries.append({**entry, "name": "test_tkg[carbon-tiny-long]", "fullname": TKG.replace("smoke", "long"),
                            "group": "tkg-long"})
        bench.write_text(json.dumps({"machine_info": {}, "benchmarks": entries}))
    outcome = "" if rc == 0 else '<failure message="AssertionError: planted">tb</failure>'
    junit.write_text('<testsuites><testsuite><testcase classname="tests.perf.test_latency" '
                     f'name="test_tkg[carbon-tiny-smoke]">{outcome}</testcase></testsuite></testsuites>')
    if rc:
        print("AssertionError: planted failure of this round", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
