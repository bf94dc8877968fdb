"""Roofline floors use the cores an artifact runs on, not the whole instance (issue 17 item 9).

A tp=8 artifact on a trn2.48xlarge spans 8 of its 64 logical cores (LNC=2: 4 logical cores per
Trainium2 chip, so 2 of its 16 chips); its decode step can read only those chips' HBM. The
expected numbers below are computed by hand from the Carbon-3B spec (3,451,444,224 parameters,
tied embeddings, 30 layers, 4 KV heads of dim 96, hidden 3072) and the profiles' figures.
"""

from __future__ import annotations

import pytest

from harness.core.hardware import get_profile
from harness.core.plan import make_plan
from harness.core.spec import MODELS, SHAPES

pytestmark = pytest.mark.unit

# report-bs1: context 256 + 180 / 2 = 346 positions; KV bytes per position = 2 (K, V) x 30 layers x heads x 96 x 2 B
WEIGHTS = 3_451_444_224 * 2  # bf16, the tied lm head read once
STEP_TP4 = WEIGHTS + 2 * 30 * 4 * 96 * 2 * 346  # 4 KV heads kept: 6,918,832,128 B
# tp=8: KV heads replicated 4 -> 8 (cache and k/v weight rows): + 30 x (2 x 4 x 96 x 3072) x 2 B of weights
STEP_TP8 = WEIGHTS + 2 * 30 * 8 * 96 * 2 * 346 + 30 * 2 * 4 * 96 * 3072 * 2  # 7,076,333,568 B


def test_carbon_3b_tkg_floor_tp8_on_48xlarge_matches_tp4_on_3xlarge():
    small = make_plan(MODELS["carbon-3b"], SHAPES["report-bs1"], get_profile("trn2.3xlarge"), tp_degree=4)
    big_tp8 = make_plan(MODELS["carbon-3b"], SHAPES["report-bs1"], get_profile("trn2.48xlarge"), tp_degree=8)
    big_tp4 = make_plan(MODELS["carbon-3b"], SHAPES["report-bs1"], get_profile("trn2.48xlarge"), tp_degree=4)
    # trn2.3xlarge, tp=4: all 4 logical cores, the chip's 2.9 TB/s
    assert small.tkg_floor_ms == pytest.approx(STEP_TP4 / 2900e9 * 1e3, rel=1e-9)  # 2.3858 ms
    assert small.tkg_floor_ms == pytest.approx(2.3858, abs=1e-4)
    # trn2.48xlarge, tp=8: 8 of 64 logical cores -> 8 x 46,400 / 64 = 5,800 GB/s (not the instance's 46.4 TB/s)
    assert big_tp8.tkg_floor_ms == pytest.approx(STEP_TP8 / 5800e9 * 1e3, rel=1e-9)  # 1.2201 ms
    assert big_tp8.tkg_floor_ms == pytest.approx(1.2201, abs=1e-4)
    # the same tp=4 artifact on one chip of the big instance has the small instance's floor
    assert big_tp4.tkg_floor_ms == pytest.approx(small.tkg_floor_ms, rel=1e-12)
    # twice the chips, half the floor, up to the replicated KV heads' bytes
    assert big_tp8.tkg_floor_ms / small.tkg_floor_ms == pytest.approx(0.5 * STEP_TP8 / STEP_TP4, rel=1e-9)


def test_cte_floor_uses_the_compute_of_the_cores_used():
    small = make_plan(MODELS["carbon-3b"], SHAPES["report-bs1"], get_profile("trn2.3xlarge"), tp_degree=4)
    big_tp8 = make_plan(MODELS["carbon-3b"], SHAPES["report-bs1"], get_profile("trn2.48xlarge"), tp_degree=8)
    # 667 TFLOPS for 4 logical cores; 8 x 10,672 / 64 = 1,334 TFLOPS for 8: the same FLOPs in half the time
    assert big_tp8.cte_floor_ms == pytest.approx(small.cte_floor_ms / 2, rel=1e-9)
    assert small.cte_floor_ms == pytest.approx(2.320, abs=1e-3)


@pytest.mark.parametrize("name,tp,bandwidth,tflops", [
    ("trn2.3xlarge", 4, 2900, 667), ("trn2.3xlarge", 1, 725, 166.75),
    ("trn2.48xlarge", 4, 2900, 667), ("trn2.48xlarge", 8, 5800, 1334), ("trn2.48xlarge", 64, 46400, 10672),
    ("h100-sxm", 4, 3350, 989),  # a GPU profile is one device: tp does not slice it
])
def test_bandwidth_and_compute_of_the_cores_a_tp_degree_uses(name, tp, bandwidth, tflops):
    profile = get_profile(name)
    assert profile.bandwidth_gbps(tp) == pytest.approx(bandwidth)
    assert profile.bf16_tflops(tp) == pytest.approx(tflops)


def test_a_cpu_profile_is_the_whole_machine_whatever_the_tp():
    from dataclasses import replace

    cpu = replace(get_profile("cpu"), logical_cores=2, memory_bandwidth_gbps=10.0)
    assert cpu.bandwidth_gbps(4) == 10.0 and cpu.bandwidth_gbps(None) == 10.0
