"""Every trn2 threshold against its source (issue 30, item 8): the reference figures live in the
repository (fixtures/reference/), each with its published value and source, and each threshold's
baseline is its figure and its bound the figure with the file's tolerance. compile_s / load_s are not
gated: the reference predates save_sharded_checkpoint=True."""

from __future__ import annotations

import json
import re

import pytest

from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

REFERENCE = REPO / "fixtures" / "reference" / "trn2.3xlarge-sdk2.29.json"
FILES = ("trn2.3xlarge", "trn2.48xlarge")


def reference() -> dict[tuple[str, str, str], dict]:
    return {(f["model"], f["shape"], f["metric"]): f for f in json.loads(REFERENCE.read_text())["figures"]}


def thresholds(name: str) -> dict:
    return json.loads((REPO / "fixtures" / "thresholds" / f"{name}.json").read_text())


def entries():
    return [(name, t) for name in FILES for t in thresholds(name)["thresholds"]]


@pytest.mark.parametrize(("name", "entry"), entries(),
                         ids=[f"{n}-{t['model']}-{t['shape']}-{t['metric']}" for n, t in entries()])
def test_each_threshold_is_its_reference_figure_with_headroom(name, entry):
    figure = reference().get((entry["model"], entry["shape"], entry["metric"]))
    assert figure is not None, f"{name}: no reference figure for {entry}"
    assert figure.get("gated", True), f"{name} gates a figure the reference says not to: {figure['not_gated_because']}"
    assert entry["baseline"] == pytest.approx(figure["value"], rel=1e-9)
    tolerance = entry["tolerance"]
    if "max" in entry:
        assert entry["max"] == pytest.approx(figure["value"] * (1 + tolerance), abs=6e-4)
    else:
        assert entry["min"] == pytest.approx(figure["value"] / (1 + tolerance), abs=6e-4)


@pytest.mark.parametrize("name", FILES)
def test_the_provenance_points_at_the_reference_and_every_gated_figure_is_used(name):
    data = thresholds(name)
    assert str(REFERENCE.relative_to(REPO)) in data["provenance"]["run"]
    used = {(t["model"], t["shape"], t["metric"]) for t in data["thresholds"]}
    gated = {k for k, f in reference().items() if f.get("gated", True)}
    assert used == gated


def test_each_reference_figure_reads_as_published():
    """The value is the published figure in the metric's unit (s -> ms, % -> fraction)."""
    for f in reference().values():
        number = float(re.match(r"[\d.]+", f["as_published"]).group())
        scale = {"ms_p50": 1000 if " s" in f["as_published"] else 1, "fraction": 0.01}
        factor = next((v for k, v in scale.items() if f["metric"].endswith(k)), 1)
        assert f["value"] == pytest.approx(number * factor, rel=1e-9), f
        assert f["source"]


def test_the_reference_names_what_it_does_not_state():
    versions = json.loads(REFERENCE.read_text())["versions"]
    assert versions["as_published"]["neuronx-distributed-inference"] == "0.9.0"
    assert {"sdk_patch", "neuronx-cc"} <= set(versions["not_stated"])
