"""The host-work gate's recorded stream (issue 49): whole ``release-check --neuron-cpu --gate-work 2%`` checks on
NxDI 0.9's CPU mode, run again and again (``python -m harness.release.power work-checks``), A/A and planted host
work alternating, each recorded as it decided. The claim rests on the record of independent checks, never on one
run's subsets: 20 of 20 planted checks fail at the first look naming the planted function, and 20 of 20 A/As read
no work difference. Also how one check's outcome is read (``outcome``)."""

from __future__ import annotations

import json

import pytest

from harness.core.paths import FIXTURES_DIR
from harness.release.power.work_checks import ARMS, outcome, tally

pytestmark = pytest.mark.unit

RECORD = FIXTURES_DIR / "release" / "work-checks-nxdi.json"


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


def test_twenty_of_twenty_planted_checks_fail_at_the_first_look_and_twenty_a_as_read_no_difference(record):
    assert tally(record) == {"aa": (20, 20), "planted": (20, 20)}
    assert record["gate_pct"] == 2.0 and record["rounds"] == 4 and record["stack"] == "neuron-cpu"
    base = {c["calls"][0] for c in record["checks"]}
    assert len(base) == 1  # the same step counted alike in all 40 checks' baselines (fresh processes each)
    for c in record["checks"]:
        if c["arm"] == "aa":
            assert c["calls"][0] == c["calls"][1] and c["work_reasons"] == [] and c["exit"] in (0, 3)
        else:
            assert c["exit"] == 1 and c["rounds"] == 4 and "_planted_host_work" in c["work_reasons"][0]
            assert c["calls"][1] - c["calls"][0] >= record["planted_calls"]
    planted = record["planted_calls"] / next(iter(base))
    assert 0.05 < planted < 0.2  # "~10%" of this NxDI's step, as measured
    assert all(c["loadavg"][0] for c in record["checks"])  # the load each ran under is kept


def verdict(rc_reasons: list[str], calls: list[float], changes: list[str], rounds: int = 4) -> dict:
    return {"verdict": "FAIL" if rc_reasons else "PASS", "rounds": rounds, "reasons": rc_reasons,
            "work": {"benchmarks": [{"benchmark": "tests/perf/test_latency.py::test_tkg[carbon-tiny-smoke]",
                                     "calls": calls, "ops": [144.0, 144.0], "changes": changes}], "notes": []}}


@pytest.mark.parametrize("arm, rc, v, required", [
    ("aa", 0, verdict([], [2587.0, 2587.0], []), True),
    ("aa", 3, verdict([], [2587.0, 2587.0], []), True),  # the timing half open on a busy box: the work read equal
    ("aa", 1, verdict(["host work of `x` grew +1.0% per step (--gate-work 2%): ..."], [2587.0, 2613.0], ["+26"]),
     False),
    ("planted", 1, verdict(["host work of `x` grew +10.1% per step (--gate-work 2%): +260 Python calls/step in "
                            "m._planted_host_work"], [2587.0, 2847.0], ["+260"]), True),
    ("planted", 1, verdict(["host work of `x` grew +10.1% per step (--gate-work 2%): +260 Python calls/step in "
                            "m._planted_host_work"], [2587.0, 2847.0], ["+260"], rounds=8), False),  # not the first look
    ("planted", 1, verdict(["tkg_ms_p50 +30%"], [2587.0, 2847.0], ["+260"]), False),  # failed, but not on work
    ("planted", 2, {}, False),  # no verdict at all
])
def test_a_checks_outcome_is_as_its_arm_requires_or_said_not_to_be(arm, rc, v, required):
    assert outcome(arm, rc, v, 2.0, 4)["as_required"] is required
    assert set(ARMS) == {"aa", "planted"}
