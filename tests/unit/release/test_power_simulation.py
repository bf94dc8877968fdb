"""The power simulation's mechanics (``harness.release.power``): a simulated check is the check's own rule
stopped as a check stops, counted as PASS / FAIL / INCONCLUSIVE; its noise models keep the measured
correlations; its record of real rounds reads back. Random draws name their seed."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from harness.core.sequential import Design
from harness.release.power import Family, FigureSpec, MultiNormal, Rounds, leg_check, merged, normal, simulate
from harness.release.power.noise import measure, read_stream
from harness.release.power.streams import write_record
from tests.helpers import REPO

pytestmark = pytest.mark.unit

RECORDS = sorted((REPO / "fixtures" / "release").glob("stream-*.json"))


def seeded() -> tuple[int, np.random.Generator]:
    seed = int.from_bytes(os.urandom(4), "little")
    return seed, np.random.Generator(np.random.PCG64(seed))


def test_the_three_verdicts_are_counted_apart_and_add_up():
    """Noise far too wide for the cap: no FAIL, few PASSes, the rest INCONCLUSIVE, not FAIL."""
    seed = int.from_bytes(os.urandom(4), "little")
    rates = simulate(Design(), normal(1.0), Family.uniform(3), 0.0, "all", 200, seed)
    d = rates.to_dict()
    assert math.isclose(d["pass"] + d["fail"] + d["inconclusive"], 1.0)
    assert d["inconclusive"] > 0.5 and d["fail"] <= 0.05 + 3.09 * math.sqrt(0.05 * 0.95 / 200), (seed, d)
    assert rates.mean_pairs > 12, (seed, d)


def test_a_leg_stops_at_its_first_fail_and_at_the_look_where_none_is_open():
    base = np.full((16, 2), 10.0)
    slow = base * np.array([1.6, 1.0]) * np.exp(np.linspace(-0.01, 0.01, 16))[:, None]
    assert leg_check([FigureSpec("tkg"), FigureSpec("cte")], Design(), base, slow) == ("FAIL", 4)
    same = base * np.exp(np.tile([0.01, -0.01], 8))[:, None]
    assert leg_check([FigureSpec("tkg"), FigureSpec("cte")], Design(), base, same) == ("PASS", 4)


def test_a_figure_under_its_floor_passes_a_large_change():
    """The floor of ``harness.analysis.pairing``: 0.5 s of load never counts, however large a ratio."""
    base = np.full((16, 1), 0.2) * np.exp(np.tile([0.02, -0.02], 8))[:, None]
    assert leg_check([FigureSpec("load_s", 0.25, 0.5)], Design(), base, base * 2.0) == ("PASS", 4)
    assert leg_check([FigureSpec("load_s", 0.25, None)], Design(), base, base * 2.0) == ("FAIL", 4)


def test_a_stretch_shorter_than_the_cap_ends_open_not_unresolved():
    base = np.full((6, 1), 10.0) * np.exp(np.array([0.4, -0.4, 0.3, -0.3, 0.35, -0.35]))[:, None]
    assert leg_check([FigureSpec("tkg")], Design(), base, np.full((6, 1), 10.0)) == ("open", 4)


@pytest.mark.parametrize("verdicts, expected", [(["PASS", "PASS"], "PASS"), (["PASS", "INCONCLUSIVE"], "INCONCLUSIVE"),
                                                (["INCONCLUSIVE", "FAIL"], "FAIL")])
def test_legs_merge_as_the_verdicts_merge(verdicts, expected):
    assert merged(verdicts) == expected


def test_a_change_is_planted_on_the_named_figure_only():
    fam = Family("two", (FigureSpec("a", 0.05), FigureSpec("b", 0.05)))
    seed = int.from_bytes(os.urandom(4), "little")
    on_b = simulate(Design(), normal(0.02), fam, 0.5, "b", 50, seed)
    assert on_b.rate("FAIL") == 1.0
    with pytest.raises(ValueError, match="on='c': give 'all' or one of the family's figures: a, b"):
        simulate(Design(), normal(0.02), fam, 0.5, "c", 10)
    with pytest.raises(ValueError, match="3 shifts for the family's 2 figures"):
        simulate(Design(), normal(0.02), fam, [0.1, 0.1, 0.1], None, 10)


def test_the_normal_model_draws_the_measured_covariance_of_a_pair():
    seed, rng = seeded()
    cov = ((0.01, 0.006), (0.006, 0.04))
    base, new = MultiNormal((10.0, 1.0), cov).draw(rng, 20000, 2)
    measured = np.cov(np.log(new / base), rowvar=False)
    assert np.allclose(measured, cov, atol=0.003), (seed, measured)
    assert np.allclose(np.median(base, axis=0), (10.0, 1.0), rtol=0.01)


def test_a_family_larger_than_the_measured_figures_repeats_them_in_independent_blocks():
    seed, rng = seeded()
    base, new = MultiNormal((1.0, 1.0), ((0.01, 0.0099), (0.0099, 0.01))).draw(rng, 5000, 4)
    c = np.corrcoef(np.log(new / base), rowvar=False)
    assert c[0, 1] > 0.95 and c[2, 3] > 0.95 and abs(c[0, 2]) < 0.06, (seed, c)


def test_whole_rounds_keep_their_figures_together_and_come_in_either_order():
    seed, rng = seeded()
    a = ((1.0, 10.0), (2.0, 20.0), (3.0, 30.0))
    b = ((1.5, 15.0), (2.5, 25.0), (3.5, 35.0))
    base, new = Rounds(a, b).draw(rng, 4000, 2)
    assert np.allclose(base[:, 1], 10 * base[:, 0]) and np.allclose(new[:, 1], 10 * new[:, 0])
    flipped = float(np.mean(base[:, 0] > new[:, 0]))
    assert 0.45 < flipped < 0.55, (seed, flipped)


@pytest.mark.parametrize("record", RECORDS, ids=[r.stem for r in RECORDS])
def test_a_stream_record_reads_back_with_its_gated_figures(record, tmp_path):
    """The committed streams: their gated figures, every arm's values per triple, the load per triple; and
    the compact layout write_record gives them reads back unchanged."""
    stream = read_stream(record)
    data = json.loads(record.read_text())
    assert any(stream.gated) and stream.triples >= 4
    assert all(len(t[arm]) == len(data["figures"]) for t in data["triples"] for arm in ("A", "A2", "B"))
    assert all(t["other_cpus"] is not None for t in data["triples"])
    noise = measure(stream)
    for f in noise["figures"]:
        assert f["sigma_95"][0] <= f["sigma"] <= f["sigma_95"][1]
    copy = tmp_path / "copy.json"
    write_record(copy, data)
    assert json.loads(copy.read_text()) == data


def test_a_cpu_stream_gates_what_a_cpu_check_gates():
    """CTE, TKG, the end-to-end median round and the engine's load seconds (harness.analysis.pairing)."""
    for record in (r for r in RECORDS if "cpu" in r.stem):
        stream = read_stream(record)
        gated = sorted(m for m, g in zip(stream.metrics, stream.gated) if g)
        assert gated == ["cte_ms_p50", "load_s", "median_s", "tkg_ms_p50"], record


def test_a_file_that_is_not_a_stream_is_refused_naming_it(tmp_path):
    bad = tmp_path / "noise.json"
    bad.write_text(json.dumps({"schema": 1, "streams": {}}))
    with pytest.raises(ValueError, match=f"{bad}: not a power stream record of schema 2"):
        read_stream(bad)
