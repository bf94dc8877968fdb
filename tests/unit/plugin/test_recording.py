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
