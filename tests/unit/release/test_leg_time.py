"""Time (issue 55, item 9): a plan's time on a Trn2 host, estimated from its design (weight loads, server starts,
cold compiles, perf rounds at the design's most pairs), and a plan that cannot fit the job's timeout (ci/trn2.yml's
leg: 240 min) refused before anything starts, in one line naming what to change."""

from __future__ import annotations

import random
import re
import sys
from dataclasses import replace

import pytest

from harness.core.sequential import Design
from harness.release import leg_time
from harness.release.device_options import with_device_options
from harness.release.errors import ReleaseCheckError
from harness.release.leg_time import Costs, Leg, estimate, refusal
from harness.release.plan import CheckPlan, Side
from tests.unit.conftest import REPO
from tests.unit.release.test_device_options import options

pytestmark = pytest.mark.unit

COSTS = Costs(compile_s={"carbon-8b": 100.0}, load_s={"carbon-8b": 10.0}, e2e_s={"carbon-8b": 2.0},
              server_start_s=200.0, process_s=20.0)
VLLM_PAIR = Leg(("carbon-8b",), ("report-bs1",), 16, 5, ("server", "server"), "exclusive")


def test_a_3xlarge_vllm_pair_restarts_both_servers_for_each_turn():
    """2 sides x (1 conformance + 16 rounds) starts, each a load; two cold compiles; 32 rounds."""
    e = estimate(VLLM_PAIR, COSTS)
    assert (e.server_starts, e.weight_loads) == (34, 34)
    assert (e.starts_s, e.loads_s, e.compiles_s) == (34 * 200.0, 34 * 10.0, 2 * 100.0)
    assert e.rounds_s == 32 * (20.0 + 6 * 2.0)
    assert e.total_s == e.starts_s + e.loads_s + e.compiles_s + e.rounds_s


def test_disjoint_halves_start_each_server_once():
    e = estimate(replace(VLLM_PAIR, scheme="disjoint"), COSTS)
    assert (e.server_starts, e.weight_loads, e.starts_s) == (2, 2, 400.0)


def test_an_nxdi_side_loads_in_every_process_and_a_teams_server_costs_only_its_rounds():
    e = estimate(replace(VLLM_PAIR, sides=("process", "endpoint")), COSTS)
    assert (e.server_starts, e.weight_loads, e.compiles_s) == (0, 17, 100.0)
    assert e.rounds_s == 32 * (20.0 + 6 * 2.0)


def test_conformance_only_has_no_rounds():
    e = estimate(replace(VLLM_PAIR, perf=False), COSTS)
    assert e.rounds_s == 0 and e.server_starts == 2


def test_a_model_without_reference_costs_is_named_not_estimated():
    e = estimate(replace(VLLM_PAIR, models=("carbon-tiny",)), COSTS)
    assert e.unknown == ("carbon-tiny",) and e.total_s == 0
    assert estimate(replace(VLLM_PAIR, models=("/opt/models/carbon/Carbon-8B",)), COSTS).total_s > 0


@pytest.mark.parametrize("seed", range(10))
def test_more_pairs_never_take_less_time(seed):
    rng = random.Random(seed)
    leg = Leg(("carbon-8b",), ("report-bs1",) * rng.randint(1, 3), rng.randint(3, 30), rng.randint(1, 9),
              (rng.choice(["process", "server", "endpoint"]), rng.choice(["process", "server", "endpoint"])),
              rng.choice(["exclusive", "disjoint", "sequential"]))
    assert estimate(replace(leg, max_pairs=leg.max_pairs + 1), COSTS).total_s > estimate(leg, COSTS).total_s


def test_a_leg_that_fits_is_not_refused():
    assert refusal(VLLM_PAIR, COSTS, estimate(VLLM_PAIR, COSTS).total_s / 60) is None


def test_a_leg_that_cannot_fit_is_refused_naming_the_rounds_that_fit_and_the_disjoint_halves():
    total_min = estimate(VLLM_PAIR, COSTS).total_s / 60
    timeout = total_min - 20  # 20 min short
    line = refusal(VLLM_PAIR, COSTS, timeout)
    assert line is not None and "\n" not in line
    assert f"{round(total_min)} min" in line and f"{timeout:g} min timeout" in line and "34 server starts" in line
    k = int(re.search(r"--max-rounds (\d+)", line).group(1))
    assert estimate(replace(VLLM_PAIR, max_pairs=k), COSTS).total_s <= timeout * 60
    assert estimate(replace(VLLM_PAIR, max_pairs=k + 1), COSTS).total_s > timeout * 60  # the most that fit
    assert "trn2.48xlarge, whose disjoint halves keep both servers up" in line and "fits" in line


def test_a_disjoint_leg_is_not_sent_to_the_disjoint_halves():
    leg = replace(VLLM_PAIR, scheme="disjoint")
    line = refusal(leg, COSTS, 1)
    assert line is not None and "trn2.48xlarge" not in line


def test_the_costs_are_the_reference_runs():
    costs = leg_time.load_costs()
    assert (costs.compile_s["carbon-8b"], costs.load_s["carbon-8b"]) == (144.33, 10.25)
    assert costs.e2e_s["carbon-3b"] == pytest.approx(1.2991)
    assert costs.server_start_s > 0 and costs.process_s > 0


def test_a_costs_file_that_cannot_be_read_is_one_error(tmp_path):
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(leg_time.LegTimeError, match="cannot read the leg-time costs"):
        leg_time.load_costs(tmp_path / "c.json")


def vllm_pair(tmp_path, max_pairs: int) -> CheckPlan:
    sides = [Side(name, sys.executable, backend="openai") for name in ("baseline", "candidate")]
    return CheckPlan(*sides, tmp_path, models=("carbon-8b",), shapes=("report-bs1",),
                     design=Design(min_pairs=4, max_pairs=max_pairs))


def test_release_check_refuses_the_plan_before_anything_starts(tmp_path):
    script = str(REPO / "ci" / "scripts" / "vllm-serve.sh")
    argv = ("--baseline-serve-script", script, "--candidate-serve-script", script, "--neuron-instance",
            "trn2.3xlarge", "--leg-timeout", "120")
    with pytest.raises(ReleaseCheckError, match=r"^--leg-timeout 120: this plan needs about \d+ min .* --max-rounds \d+"):
        with_device_options(options(*argv), vllm_pair(tmp_path, 16), {})
    plan = with_device_options(options(*argv[:-1], "100000"), vllm_pair(tmp_path, 16), {})
    assert plan.core_plan.exclusive  # fits: planned as before
    with pytest.raises(ReleaseCheckError, match="above 0"):
        with_device_options(options(*argv[:-1], "0"), vllm_pair(tmp_path, 16), {})


def test_the_workflow_passes_its_own_timeout():
    workflow = (REPO / "ci" / "trn2.yml").read_text()
    timeout = re.search(r"^  leg:.*?timeout-minutes: (\d+)", workflow, re.S | re.M).group(1)
    assert re.search(rf"^\s+LEG_TIMEOUT_MIN: {timeout}\b", workflow, re.M)
    script = (REPO / "ci" / "scripts" / "release-leg.sh").read_text()
    assert 'args+=(--leg-timeout "$LEG_TIMEOUT_MIN")' in script


def test_a_plan_that_fits_says_its_estimate(tmp_path, capsys):
    script = str(REPO / "ci" / "scripts" / "vllm-serve.sh")
    with_device_options(options("--baseline-serve-script", script, "--candidate-serve-script", script,
                                "--neuron-instance", "trn2.48xlarge", "--leg-timeout", "240"), vllm_pair(tmp_path, 16), {})
    line, = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(r"release-check: this plan needs about \d+ min \(2 weight loads .*\) at 16 pairs, within "
                        r"the leg's 240 min", line), line


def test_rounds_below_the_first_look_are_offered_as_a_fixed_count():
    """--max-rounds below --min-rounds is refused by release-check: a count below the first look is --rounds K."""
    leg = replace(VLLM_PAIR, min_pairs=10)
    at = {k: estimate(replace(leg, max_pairs=k), COSTS).total_s / 60 for k in (5, 6)}
    line = refusal(leg, COSTS, (at[5] + at[6]) / 2)
    assert "--rounds 5 (ROUNDS=5) fits" in line and "--max-rounds" not in line
    line = refusal(replace(leg, min_pairs=4), COSTS, (at[5] + at[6]) / 2)
    assert "--max-rounds 5 (MAX_ROUNDS=5) fits" in line
