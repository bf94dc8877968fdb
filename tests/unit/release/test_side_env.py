"""A side's own variables reach every process built from it, however they were written (issue 57: a served
release check stopped after its verdict on "dictionary update sequence element #0 has length 55; 2 is
required", the length of its ``--baseline-env`` as one ``NAME=VALUE`` string): ``harness.release.plan.Side``
holds them as pairs, so each ``dict(side.env)`` (the perf rounds' and probes' ``side_env``, a started server's
``server_env``, the evidence round's added variables) reads them; an entry that is no variable is refused when
the side is made, naming it."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from harness.release.plan import CheckPlan, Side, side_env
from harness.release.served import server_env

pytestmark = pytest.mark.unit

PLUGIN = "/check/main/tests/stand_ins/vllm_neuron_2_32"
WRITTEN = f"PYTHONPATH={PLUGIN}"  # 55 characters, as the check was given it


@pytest.mark.parametrize("env", [(WRITTEN,), (("PYTHONPATH", PLUGIN),)])
def test_a_sides_variables_reach_its_rounds_and_its_server_written_either_way(tmp_path, env):
    assert len(WRITTEN) == 55
    baseline = Side("baseline", sys.executable, backend="openai", serve_script="ci/scripts/vllm-serve.sh", env=env)
    plan = CheckPlan(baseline, Side("candidate", sys.executable), tmp_path)
    assert baseline.env == (("PYTHONPATH", PLUGIN),)
    assert side_env(plan, baseline)["PYTHONPATH"] == PLUGIN
    assert server_env(baseline, None)["PYTHONPATH"] == PLUGIN
    inspected = replace(baseline, env=(*baseline.env, "NEURON_RT_INSPECT_ENABLE=1"))  # the evidence round's way
    assert dict(inspected.env) == {"PYTHONPATH": PLUGIN, "NEURON_RT_INSPECT_ENABLE": "1"}


def test_a_side_given_an_entry_that_is_no_variable_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"environment entry 'PYTHONPATH': give NAME=VALUE or a \(NAME, VALUE\) pair"):
        Side("baseline", sys.executable, env=("PYTHONPATH",))
