"""Where the check itself ran (``harness.release.devices.check_process``): its interpreter is recorded, and one
that is a side's is said under the verdict, since the fp32 reference is then computed in that side's
environment (on a Trn2 runner, ci/scripts/check-venv.sh builds the neutral one)."""

from __future__ import annotations

import sys

import pytest

from harness.release.devices import check_process
from harness.release.plan import CheckPlan, Side

pytestmark = pytest.mark.unit


def test_a_check_sharing_the_baselines_interpreter_says_so(tmp_path):
    plan = CheckPlan(Side("baseline", sys.executable, backend="hf"), Side("candidate", "/venvs/c/bin/python"),
                     tmp_path)
    record = check_process(plan)
    assert record["shared_with"] == ["baseline"] and record["python"] == sys.executable
    assert "ran in the baseline's interpreter" in record["markdown"][0]


def test_a_check_in_its_own_venv_names_it_and_neither_side(tmp_path):
    plan = CheckPlan(Side("baseline", "/venvs/b/bin/python"), Side("candidate", "/venvs/c/bin/python"), tmp_path)
    record = check_process(plan)
    assert record["shared_with"] == [] and "neither side's" in record["markdown"][0]
