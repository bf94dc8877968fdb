"""--carbon-shape bounds what runs: the fixed-shape suites (the DNA and batch suites, scoring, the
speculative benchmarks on the host and on a server) run by default and when their shape is given;
with other shapes given they are deselected at collection (counted in the summary), never
collected and skipped, so on Trn2 their artifacts are not compiled either."""

from __future__ import annotations

import re

import pytest

from harness.core.spec import get_shape
from tests.unit.conftest import run_pytest

pytestmark = pytest.mark.unit

# node-id fragments of the tests that run at a shape of their own, and that shape
FIXED = {
    "test_suites.py::test_dna_suite[": "dna-suite-bs1",
    "test_suites.py::test_batch_suite[": "a100-style-bs16",
    "test_suites.py::test_e2e_fns[": "a100-style-bs16",
    "test_scoring.py::test_vep[": "vep-bs8",
    "test_scoring.py::test_sweep[": "vep-bs8",
    "test_scoring.py::test_scan[scan-cpu-": "scan-cpu",
    "tests/perf/test_speculative.py::": "dna-suite-bs1",
    "tests/serving/test_speculative_serving.py::": "dna-suite-bs1",
    "test_hook_overhead.py::": "smoke",
}


def collect(tmp_path, *shapes: str) -> tuple[list[str], str]:
    args = [a for s in shapes for a in ("--carbon-shape", s)]
    r = run_pytest("--co", "-q", "-p", "no:randomly", "tests/perf", "tests/serving", *args, cache_dir=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    return ids, r.stdout.strip().splitlines()[-1]


def shape_of(node_id: str) -> str | None:
    return next((shape for fragment, shape in FIXED.items() if fragment in node_id), None)


def test_the_fixed_shapes_exist():
    for shape in set(FIXED.values()):
        assert get_shape(shape).name == shape


def test_selected_shapes_deselect_the_suites_of_other_shapes(tmp_path):
    ids, summary = collect(tmp_path, "smoke")
    other = [i for i in ids if shape_of(i) not in (None, "smoke")]
    assert other == []
    assert any("test_hook_overhead.py::" in i for i in ids)  # its shape is smoke
    assert all(i.endswith("-smoke]") for i in ids if "test_latency.py::" in i)
    deselected = int(re.search(r"(\d+) deselected", summary).group(1))
    assert deselected >= 30, summary  # suites, scoring and speculative items: counted, not skipped

    ids, _ = collect(tmp_path, "smoke", "dna-suite-bs1")
    kept = {shape_of(i) for i in ids} - {None}
    assert kept == {"smoke", "dna-suite-bs1"}, kept
    assert any("test_dna_suite[" in i for i in ids) and not any("test_batch_suite[" in i for i in ids)


def test_without_carbon_shape_every_fixed_shape_suite_runs(tmp_path):
    ids, summary = collect(tmp_path)
    assert "deselected" not in summary
    assert {shape_of(i) for i in ids} - {None} == set(FIXED.values())
