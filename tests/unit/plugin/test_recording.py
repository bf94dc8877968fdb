"""When a speed gate applies: only when ``-m`` selects perf (a plain ``pytest`` records speed ungated)."""

from __future__ import annotations

import pytest

from harness.plugin.recording import speed_gates_apply

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("markexpr,gated", [
    ("perf", True), ("perf and not slow", True), ("compat or perf", True), ("(perf)", True),
    ("", False), ("  ", False), ("not perf", False), ("not unit", False), ("compat", False), ("perf or not perf", False),
])
def test_speed_gates_apply_only_when_m_selects_perf(markexpr, gated):
    assert speed_gates_apply(markexpr) is gated


@pytest.mark.parametrize("markexpr, selected", [
    ("release", True), ("release and not extended", True), ("release and extended", True),
    ("release or compat", True), ("not release", False), ("extended", False), ("", False), ("not unit", False),
])
def test_a_marker_is_selected_by_any_expression_that_needs_it(markexpr, selected):
    from harness.plugin.recording import marker_selected

    assert marker_selected(markexpr, "release") is selected
