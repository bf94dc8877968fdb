"""Pairing both sides' rounds by index (``harness.analysis.pairing``): whose gap a missing benchmark
is, which missing figure is a reason, and how a compile time (one per side) is judged."""

from __future__ import annotations

import pytest

from harness.analysis.compare import Tolerances
from harness.analysis.pairing import ENGINE_TOLERANCE, pair_rounds
from harness.core.sequential import FAIL, PASS
from tests.unit.analysis.test_verdict import TKG, bench, side

pytestmark = pytest.mark.unit

TOL = Tolerances(default=0.05)
CTE = "tests/perf/test_latency.py::test_cte[carbon-tiny-smoke]"


def cte_and_tkg(cte_ms: float, tkg_ms: float) -> list:
    return [bench(CTE, cte_ms / 1000.0, cte_ms_p50=cte_ms), bench(TKG, tkg_ms / 1000.0, tkg_ms_p50=tkg_ms)]


def test_a_benchmark_both_sides_lack_in_a_round_leaves_that_pair_out_and_is_no_reason():
    """Round 3 produced CTE only, on both sides: the baseline's gap leaves TKG's pair 3 out; the
    candidate did all the baseline did, so nothing is held against it."""
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0] * 4)
    for s in (base, cand):
        s.rounds = {k: cte_and_tkg(20.0, 17.0) for k in (1, 2, 4)}
        s.rounds[3] = [bench(CTE, 0.02, cte_ms_p50=20.0)]
    pairing = pair_rounds(base, cand, TOL, 0.95)
    assert pairing.reasons == []
    assert len(pairing.left_out) == 1 and pairing.left_out[0].startswith(f"baseline perf round 3 did not produce {TKG}")
    tkg = next(f for f in pairing.figures if f.metric == "tkg_ms_p50")
    assert tkg.rounds == (1, 2, 4)


def test_a_reported_figure_missing_on_the_candidate_is_no_reason_and_a_gated_one_is():
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0] * 4)
    del cand.rounds[2][0].figures["tkg_roofline_fraction"]  # reported: derived from the same p50
    pairing = pair_rounds(base, cand, TOL, 0.95)
    assert pairing.reasons == []
    roofline = next(f for f in pairing.figures if f.metric == "tkg_roofline_fraction")
    assert roofline.rounds == (1, 3, 4) and not roofline.gated
    del cand.rounds[3][0].figures["tkg_ms_p50"]  # gated
    assert pair_rounds(base, cand, TOL, 0.95).reasons == [f"{TKG} tkg_ms_p50: missing on the candidate in round(s) 3"]


def compiled(seconds: dict[int, float]) -> dict[int, dict]:
    return {k: {"carbon-tiny/smoke": {"load_s": 0.3, "compile": "compiled", "compile_s": s}}
            for k, s in seconds.items()}


@pytest.mark.parametrize("base_s, new_s, state", [
    ({1: 600.0, 2: 600.0}, {1: 900.0, 2: 900.0}, FAIL),  # every compiled pair beyond 25%
    ({1: 600.0, 2: 600.0}, {1: 900.0, 2: 610.0}, PASS),  # one pair is not: no failure
    ({1: 100.0, 2: 100.0}, {1: 125.0, 2: 125.0}, PASS),  # exactly at the tolerance: within it
])
def test_compile_time_fails_only_when_every_pair_is_beyond_the_tolerance(base_s, new_s, state):
    base, cand = side("baseline", [17.0] * 2), side("candidate", [17.0] * 2)
    base.engines, cand.engines = compiled(base_s), compiled(new_s)
    figure = next(f for f in pair_rounds(base, cand, TOL, 0.95).figures if f.metric == "compile_s")
    assert ENGINE_TOLERANCE == 0.25 and figure.rounds == (1, 2) and figure.state == state
