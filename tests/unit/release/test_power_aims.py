"""The release check's rule holds the aims the README states, at the noise measured on this machine for
every figure a check gates (fixtures/release/noise.json, from ``python -m harness.release.power``).

Each aim in the fixture is a bound the README prints word for word (its power-table section): A/A checks
end FAIL at most 1 in 20 (FAIL only; INCONCLUSIVE has its own bound), a 30% slowdown is caught at least
so often. The checks are random draws, the seed named in each message; every bound was set by the
analysis with room for the table's estimate (99%) and for this many checks (1 in 1000 either side), so a
correct rule fails this test about 1 time in 1000, and one that drifts past its stated rates fails it."""

from __future__ import annotations

import itertools
import json
import os

import pytest

from harness.core.sequential import Design
from harness.release.power import simulate
from harness.release.power.noise import family_of, key_of, multinormal
from harness.release.power.report import TARGET, aim_line, family_names, trn2_family
from tests.helpers import REPO

pytestmark = pytest.mark.unit

NOISE = json.loads((REPO / "fixtures" / "release" / "noise.json").read_text())
README = (REPO / "README.md").read_text()
STACK = {"cpu": "neuron-cpu", "trn2": "neuron-cpu", "served": "served"}


def family(name: str, noise: dict):
    if name == "trn2":
        return trn2_family(noise)
    return family_of(noise, "CPU check" if name == "cpu" else "served check")


def groups() -> list[tuple[str, str]]:
    return sorted({(a["family"], a["load"]) for a in NOISE["aims"]})


def random_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.mark.parametrize("name, load", groups(), ids=[f"{f}-{ld}" for f, ld in groups()])
def test_the_default_design_meets_the_aims_the_readme_states(name, load):
    """A/A and the aim's slowdown (on the figure the README names), at the measured sigmas and correlations
    of the stream measured under this load; every aim of this family and load in one pass."""
    noise = NOISE["streams"][f"{'served' if name == 'served' else 'cpu'}-{load}"]
    fam = family(name, noise)
    target = key_of(noise, fam, TARGET[STACK[name]])
    checked = []
    for change, aims in itertools.groupby(sorted((a for a in NOISE["aims"] if (a["family"], a["load"]) == (name, load)),
                                                 key=lambda a: a["change"]), key=lambda a: a["change"]):
        aims = list(aims)
        seed = random_seed()
        shift = 0.0 if change == "A/A" else float(change.split("%")[0]) / 100
        rates = simulate(Design(), multinormal(noise), fam, shift, "all" if change == "A/A" else target,
                         aims[0]["sims"], seed).to_dict()
        for aim in aims:
            said = f"{aim_line(aim, family_names())} -- simulated {rates}, seed {seed}"
            if "at_most" in aim:
                assert rates[aim["outcome"]] <= aim["at_most"], said
            else:
                assert rates[aim["outcome"]] >= aim["at_least"], said
            checked.append(aim["outcome"])
    assert "fail" in checked and "inconclusive" in checked


def test_the_readme_states_every_aim_the_fixture_holds():
    """The README's power table is regenerated with the fixture (one command): each aim is there as stated."""
    section = README.split("<!-- power-table:")[1].split("<!-- /power-table -->")[0]
    for aim in NOISE["aims"]:
        assert aim_line(aim, family_names()) in section


def test_the_aa_fail_aim_is_the_designs_own_budget():
    """A/A FAIL is bounded by the design's false-alarm budget itself, not by a rate the analysis measured."""
    budgets = {a["at_most"] for a in NOISE["aims"] if a["change"] == "A/A" and a["outcome"] == "fail"}
    assert budgets == {Design().alpha}


@pytest.mark.parametrize("name", ["cpu", "trn2"])
def test_every_figure_at_its_tolerance_fails_the_family_at_most_alpha(name):
    """The worst case of "within tolerance": every gated figure of every leg exactly at its tolerance, at the
    noise measured on a loaded box. Holm across the family's figures (24 in the Trn2 workflow: 3 legs of
    2 shapes x 4 figures) and Bonferroni across looks keep a FAIL to at most alpha; the bound adds 3.1
    standard deviations of this many checks."""
    noise = NOISE["streams"]["cpu-loaded"]
    fam = family(name, noise)
    sims = {"cpu": 1500, "trn2": 600}[name]
    seed = random_seed()
    alpha = Design().alpha
    rate = simulate(Design(), multinormal(noise), fam, [f.tolerance for f in fam.figures], None, sims, seed).rate("FAIL")
    assert rate <= alpha + 3.09 * (alpha * (1 - alpha) / sims) ** 0.5, f"{name}: {rate:.4f} of {sims}, seed {seed}"
