"""When speed gates apply, and the CPU-time speedup measurement."""

from __future__ import annotations

import pytest

from harness.speedup import cpu_speedup, speed_gates_apply

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("markexpr,gated", [
    ("perf", True), ("perf and not slow", True), ("compat or perf", True), ("(perf)", True),
    ("", False), ("  ", False), ("not perf", False), ("not unit", False), ("compat", False), ("perf or not perf", False),
])
def test_speed_gates_apply_only_when_m_selects_perf(markexpr, gated):
    assert speed_gates_apply(markexpr) is gated


def test_cpu_speedup_keeps_each_sides_fastest_round_and_results():
    calls = {"reference": 0, "candidate": 0}

    def run(side, n):
        calls[side] += 1
        return sorted(range(n, 0, -1))

    speed = cpu_speedup(lambda: run("reference", 200_000), lambda: run("candidate", 20_000), rounds=2,
                        candidate_per_round=3)
    assert calls == {"reference": 2, "candidate": 6}  # interleaved: 3 candidate calls after each reference call
    assert speed.ratio == speed.reference_s / speed.candidate_s and speed.candidate_s > 0
    assert speed.reference_result[:2] == [1, 2] and len(speed.candidate_result) == 20_000


def test_cpu_speedup_rejects_no_rounds():
    with pytest.raises(ValueError, match="rounds=0 and candidate_per_round=3 must be at least 1"):
        cpu_speedup(lambda: None, lambda: None, rounds=0)
