"""The neuron backend's modules keep to the layout's limit of 400 lines each (issue 31, item 12):
engine.py had grown to 461, holding the batch conventions of NxDI's compiled model beside the engine.
Scoped to harness/backends/neuron; the limit for the whole package is the developer guide's."""

from __future__ import annotations

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

LIMIT = 400
MODULES = sorted((REPO / "harness" / "backends" / "neuron").glob("*.py"))


@pytest.mark.parametrize("module", MODULES, ids=[m.name for m in MODULES])
def test_a_neuron_backend_module_keeps_to_the_line_limit(module):
    lines = len(module.read_text().splitlines())
    assert lines <= LIMIT, f"{module.relative_to(REPO)} has {lines} lines (limit {LIMIT}): split it along a seam"
