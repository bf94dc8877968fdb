"""The output contract's legs (issue 56): planned from the sides (``harness.release.legs``: both by default where
the candidate is not fp32, the fp32 leg in each stack's CPU mode on a Trn2 host, not run against a team's server),
and reported per leg in one verdict (``harness.analysis.contract_legs``): each leg's dtypes, where it ran and its
outcome, FAIL if either leg failed, and the bf16-only caveat exactly where no fp32 leg judged the candidate."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.analysis.contract import ContractResult, judge_contract, load_tolerances
from harness.analysis.contract_legs import fp32_leg_ran, leg_records, with_fp32_leg
from harness.analysis.pairing import SideReport
from harness.analysis.verdict import decide
from harness.core.paths import REPO_ROOT
from harness.release.errors import ReleaseCheckError
from harness.release.legs import (CPU_MODE, check_legs, default_legs, fp32_leg, parse_legs, side_dtype, split_legs,
                                  reusable, unrunnable, where)
from harness.release.legs_run import FP32_SUFFIX, NOT_RUN, contract_command, copy_reference, judge_legs, own_sides
from harness.release.plan import CONTRACT_TEST, CheckPlan, Side, contract_dir
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

CAVEAT = "bf16 leg only: defects below bf16 rounding not excluded"


def plan(backend: str = "hf", dtype: str | None = None, cpu: bool = False, **side: object) -> CheckPlan:
    source = Path("/nxdi") if cpu else None
    sides = [Side(name, sys.executable, source, backend, dtype=dtype, **side)  # type: ignore[arg-type]
             for name in ("baseline", "candidate")]
    return CheckPlan(sides[0], sides[1], Path("/out"), cpu=cpu)


@pytest.mark.parametrize("value, parsed", [("bf16", ("bf16",)), ("bf16,fp32", ("bf16", "fp32")),
                                           ("fp32, bf16,fp32", ("fp32", "bf16")), ("3", 3), ("1", 1)])
def test_legs_takes_the_contracts_legs_or_the_count_of_merged_checks(value, parsed):
    assert parse_legs(value) == parsed


@pytest.mark.parametrize("value", ["0", "fp8", "bf16,", "", "-1"])
def test_a_leg_that_is_neither_is_refused_naming_both_forms(value):
    with pytest.raises(argparse.ArgumentTypeError, match="bf16|at least 1"):
        parse_legs(value)


def test_repeated_legs_split_into_the_merged_count_and_the_contracts_legs():
    assert split_legs(None) == (1, None)
    assert split_legs([3]) == (3, None)  # release-leg.sh's --legs "${LEGS:-1}": unchanged
    assert split_legs([3, ("bf16",)]) == (3, ("bf16",))
    assert split_legs([("bf16",), ("fp32",)]) == (1, ("bf16", "fp32"))


@pytest.mark.parametrize("made, environ, dtypes, legs", [
    (plan("hf", "bf16"), {}, ("bf16", "bf16"), ("bf16", "fp32")),
    (plan("hf"), {}, ("fp32", "fp32"), ("fp32",)),  # transformers on the CPU: fp32, nothing added
    (plan("neuron", cpu=True), {}, ("fp32", "fp32"), ("fp32",)),  # CI's NxDI CPU-mode checks: no leg added
    (plan("neuron", "bf16", cpu=True), {}, ("bf16", "bf16"), ("bf16", "fp32")),
    (plan("neuron"), {}, ("bf16", "bf16"), ("bf16", "fp32")),  # a device: bf16 unless told
    (plan("openai"), {}, ("fp32", "fp32"), ("fp32",)),  # a server the check starts directly: fp32
    (plan("openai", serve_script="ci/scripts/vllm-serve.sh"), {"VLLM_DEVICE": "cpu"}, ("fp32", "fp32"), ("fp32",)),
    (plan("openai", serve_script="ci/scripts/vllm-serve.sh"), {}, ("bf16", "bf16"), ("bf16", "fp32")),
    (plan("openai", endpoint="http://team:8000"), {}, ("bf16", "bf16"), ("bf16", "fp32")),  # judged as bf16
])
def test_both_legs_by_default_where_the_candidate_is_not_fp32(monkeypatch, made, environ, dtypes, legs):
    monkeypatch.delenv("VLLM_DEVICE", raising=False)
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    assert (side_dtype(made, made.baseline), side_dtype(made, made.candidate)) == dtypes
    assert default_legs(made) == legs == check_legs(made, None)


def test_the_leg_is_the_candidates_dtype_an_fp32_baseline_adds_no_fp32_leg():
    made = plan("hf")
    made = replace(made, candidate=replace(made.candidate, dtype="bf16"))
    assert default_legs(made) == ("bf16", "fp32")
    made = replace(made, baseline=replace(made.baseline, dtype="bf16"), candidate=replace(made.candidate, dtype="fp32"))
    assert default_legs(made) == ("fp32",)


def test_legs_bf16_opts_out_and_a_list_without_the_checks_own_leg_is_refused():
    assert check_legs(plan("hf", "bf16"), ("bf16",)) == ("bf16",)
    assert check_legs(plan("hf", "bf16"), ("fp32", "bf16")) == ("bf16", "fp32")
    assert check_legs(plan("hf"), ("fp32",)) == ("fp32",)  # an fp32 check's own leg is the fp32 leg: once
    with pytest.raises(ReleaseCheckError, match=r"--legs bf16: the candidate computes in fp32 here.*give --legs fp32"):
        check_legs(plan("hf"), ("bf16",))
    with pytest.raises(ReleaseCheckError, match=r"--legs fp32: the candidate computes in bf16.*bf16 or bf16,fp32"):
        check_legs(plan("hf", "bf16"), ("fp32",))


def test_the_fp32_leg_on_a_trn2_host_runs_each_stacks_cpu_mode_with_the_installed_release(tmp_path):
    """NxDI on the device: its CPU mode from the installed package (no source tree), fp32, the contract alone;
    a served side: a server of its own in fp32 under VLLM_NEURON_CPU_MODE=1, holding no NeuronCores."""
    base = Side("baseline", sys.executable, None, "neuron", cores="0-3")
    cand = Side("candidate", sys.executable, None, "openai", serve_script="ci/scripts/vllm-serve.sh",
                endpoint="http://127.0.0.1:8001", started=True, cores="4-7", env=(("A", "1"),))
    made = CheckPlan(base, cand, tmp_path, core_plan=object(), conformance_markers="compat or neuron or dna",
                     legs=("bf16", "fp32"))
    leg = fp32_leg(made)
    assert leg.plan.out == tmp_path / "fp32-leg" and leg.plan.perf is False and leg.plan.core_plan is None
    assert leg.plan.conformance_markers == "contract" and leg.neuron_cpu == ("baseline",)
    assert leg.plan.baseline.dtype == leg.plan.candidate.dtype == "fp32"
    assert leg.plan.baseline.cores is None and leg.plan.candidate.cores is None
    assert leg.plan.candidate.endpoint is None and not leg.plan.candidate.started  # the leg starts its own
    assert dict(leg.plan.candidate.env) == {"A": "1", CPU_MODE[0]: CPU_MODE[1]}
    assert "on_cpu" in leg.where["baseline"] and "VLLM_NEURON_CPU_MODE=1" in leg.where["candidate"]
    cmd = contract_command(leg, leg.plan.baseline, tmp_path / "j.xml")
    assert cmd[cmd.index("pytest") + 1:cmd.index("pytest") + 4] == [CONTRACT_TEST, "-m", "contract"]
    assert "--carbon-neuron-cpu" in cmd and cmd[cmd.index("--carbon-dtype") + 1] == "fp32"
    assert f"--carbon-contract-reference={contract_dir(leg.plan, 'reference')}" in cmd
    assert not any(a.startswith("--carbon-nxdi-source") for a in cmd)  # the installed release, not a tree
    assert "--carbon-neuron-cpu" not in contract_command(leg, leg.plan.candidate, tmp_path / "j.xml")


def test_the_fp32_leg_against_a_teams_server_is_not_run_and_says_how_to_run_it():
    made = plan("openai", endpoint="http://team:8000")
    assert "the team's server at http://team:8000, which the check cannot restart in fp32: give " \
           "--baseline-python" in str(unrunnable(made))
    assert unrunnable(plan("hf", "bf16")) is None and unrunnable(plan("openai")) is None


def test_the_fp32_leg_is_judged_against_the_checks_own_reference(tmp_path):
    made = replace(plan("hf", "bf16"), out=tmp_path)
    (contract_dir(made, "reference")).mkdir(parents=True)
    (contract_dir(made, "reference") / "contract-carbon-tiny-smoke.json").write_text("{}")
    (contract_dir(made, "reference") / "notes.txt").write_text("not a contract")
    assert copy_reference(made, fp32_leg(made).plan) == 1
    assert [p.name for p in contract_dir(fp32_leg(made).plan, "reference").iterdir()] == [
        "contract-carbon-tiny-smoke.json"]


def _fixture(name: str) -> dict:
    return json.loads((REPO_ROOT / "fixtures" / "contract" / f"threeway-{name}.json").read_text())


def judged(dtype: str, leg: str) -> ContractResult:
    """The bf16 fixture judged as a ``dtype`` candidate (and baseline), labelled with its leg."""
    side, ref, yard = _fixture("side"), _fixture("reference"), _fixture("yardstick")
    tolerances = load_tolerances()
    tolerances["fp32"] = tolerances["bf16"]  # the bf16 fixture, labelled fp32: judged as it would pass
    sides = {who: {**side, "dtype": dtype} for who in ("baseline", "candidate")}
    result = judge_contract(sides, {who: {"reference": ref, "yardstick": yard} for who in sides}, tolerances)
    assert result.reasons == []
    result.leg, result.where = leg, {"baseline": "here", "candidate": f"{leg} place"}
    return result


def test_both_legs_are_reported_in_one_verdict_each_with_where_it_ran_and_its_outcome():
    bf16 = with_fp32_leg(judged("bf16", "bf16"))
    fp32 = judged("fp32", "fp32")
    verdict = decide(SideReport("baseline"), SideReport("candidate"),
                     contract={"carbon-tiny-smoke": bf16, "carbon-tiny-smoke (fp32 leg)": fp32})
    assert verdict.word == "PASS" and verdict.summary() == "PASS"  # the fp32 leg ran: no bf16-only caveat
    records = verdict.to_dict()["output_contract_legs"]
    assert [(r["leg"], r["dtypes"], r["where"]["candidate"], r["outcome"]) for r in records] == [
        ("bf16", {"baseline": "bf16", "candidate": "bf16"}, "bf16 place", "PASS"),
        ("fp32", {"baseline": "fp32", "candidate": "fp32"}, "fp32 place", "PASS")]
    text = verdict.markdown()
    assert "| bf16 | bf16, here | bf16, bf16 place | PASS |" in text
    assert "| fp32 | fp32, here | fp32, fp32 place | PASS |" in text
    assert "### Output contract, fp32 leg" in text and "### Output contract, bf16 leg" in text
    assert CAVEAT not in text and "no fp32 leg ran" not in text and "the fp32 leg beside it" in text


def test_a_failed_fp32_leg_fails_the_verdict_naming_the_leg():
    fp32 = judged("fp32", "fp32")
    fp32.reasons.append("the candidate (hf, fp32) breaks the output contract: σ ratio 3.1 > 1.5")
    verdict = decide(SideReport("baseline"), SideReport("candidate"),
                     contract={"carbon-tiny-smoke": judged("bf16", "bf16"), "carbon-tiny-smoke (fp32 leg)": fp32})
    assert verdict.word == "FAIL"
    assert verdict.reasons[0].startswith("output contract (carbon-tiny-smoke (fp32 leg)): the candidate (hf, fp32)")
    assert [r["outcome"] for r in leg_records(verdict.contract)] == ["PASS", "FAIL"]


@pytest.mark.parametrize("fp32", ["opted out", "not run"])
def test_a_bf16_only_check_says_what_it_cannot_see(fp32):
    """``--legs bf16``, or an fp32 leg that could not run (a team's server): the PASS carries the bf16 caveat,
    and a leg that did not run is in the legs table with why."""
    contract = {"carbon-tiny-smoke": judged("bf16", "bf16")}
    if fp32 == "not run":
        contract["fp32 leg"] = ContractResult(leg="fp32", notes=["fp32 leg not run: the team's server"])
    verdict = decide(SideReport("baseline"), SideReport("candidate"), contract=contract)
    assert verdict.summary() == f"PASS ({CAVEAT})" and not fp32_leg_ran(contract)
    assert any("no fp32 leg ran" in n for n in contract["carbon-tiny-smoke"].notes)
    records = verdict.to_dict()["output_contract_legs"]
    assert [r["outcome"] for r in records] == ["PASS"] + (["not run"] if fp32 == "not run" else [])
    if fp32 == "not run":
        assert records[1]["why"] == "fp32 leg not run: the team's server"
        assert "| fp32 | -, ? | -, ? | not run: fp32 leg not run: the team's server |" in verdict.markdown()


@pytest.mark.parametrize("legs, message", [
    ("fp8", "argument --legs: 'fp8': give the contract's legs (bf16 or bf16,fp32 for a bf16 candidate, fp32"),
    ("bf16", "--legs bf16: the candidate computes in fp32 here, so its own leg is the fp32 leg: give --legs fp32"),
])
def test_release_check_refuses_legs_it_cannot_run_before_running(tmp_path, legs, message):
    r = run_cli("release-check", "--out", str(tmp_path / "o"), "--backend", "hf", "--dtype", "fp32",
                "--baseline-python", sys.executable, "--candidate-python", sys.executable, "--legs", legs)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_each_sides_dtype_in_the_side_table_is_its_own_legs_not_the_fp32_legs():
    """run_check labels each side with what its engines computed in: the own leg's contracts only."""
    own, fp32 = judged("bf16", "bf16"), judged("fp32", "fp32")
    contracts = {"carbon-tiny-smoke": own, "carbon-tiny-smoke" + FP32_SUFFIX: fp32,
                 NOT_RUN: ContractResult(leg="fp32", sides=fp32.sides)}
    assert [(s.who, s.dtype) for s in own_sides(contracts)] == [("baseline", "bf16"), ("candidate", "bf16")]


@pytest.mark.parametrize("made, keys", [
    (replace(plan("hf", "bf16"), legs=("bf16",)), ["carbon-tiny-smoke"]),  # --legs bf16: its own leg alone
    (replace(plan("hf"), legs=("fp32",)), ["carbon-tiny-smoke"]),  # an fp32 check is the fp32 leg
    (replace(plan("openai", endpoint="http://team:8000"), legs=("bf16", "fp32")), ["carbon-tiny-smoke", NOT_RUN]),
    (replace(plan("hf", "bf16"), legs=("bf16", "fp32")), ["carbon-tiny-smoke"]),  # its contract not measured
])
def test_judge_legs_adds_the_fp32_leg_only_where_planned_and_says_why_it_could_not_run(made, keys):
    def judge(p, reports, timeout, progress):
        measured = made.legs != ("bf16", "fp32") or made.baseline.backend == "openai"
        return {"carbon-tiny-smoke": judged("bf16", "bf16") if measured else ContractResult(notes=["not measured"])}

    def start(*a):
        raise AssertionError("no server is started for a leg that does not run")

    said: list[str] = []
    out = judge_legs(made, {}, 1.0, said.append, judge, start)
    assert list(out) == keys and out["carbon-tiny-smoke"].leg == made.legs[0]
    assert out["carbon-tiny-smoke"].where["candidate"] == where(made, made.candidate)
    if NOT_RUN in out:
        assert out[NOT_RUN].leg == "fp32" and "cannot restart in fp32" in out[NOT_RUN].notes[0]
        assert said and said[0].startswith("the output contract's fp32 leg cannot run: the baseline is the team's")


def test_a_side_already_fp32_in_process_lends_its_contract_to_the_fp32_leg_a_served_one_does_not(tmp_path):
    """The migration's fp32 baseline beside a bf16 candidate: its fp32 leg is the contract it already wrote."""
    made = replace(plan("hf", "bf16"), out=tmp_path)
    made = replace(made, baseline=replace(made.baseline, dtype="fp32"))
    assert reusable(made) == ("baseline",)
    assert reusable(plan("neuron", cpu=True)) == ("baseline", "candidate")
    assert reusable(plan("openai")) == () and reusable(plan("neuron")) == () and reusable(plan("hf", "bf16")) == ()
    (contract_dir(made, "baseline")).mkdir(parents=True)
    (contract_dir(made, "baseline") / "contract-carbon-tiny-smoke.json").write_text('{"dtype": "fp32"}')
    leg = fp32_leg(made).plan
    assert copy_reference(made, leg, "baseline") == 1
    assert (contract_dir(leg, "baseline") / "contract-carbon-tiny-smoke.json").read_text() == '{"dtype": "fp32"}'


def test_a_bad_legs_value_names_every_leg_a_check_accepts():
    """The fix a user follows from this line must work on a CPU check too, whose sides compute in fp32."""
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse_legs("fp33")
    assert "'fp33'" in str(raised.value)
    assert "bf16 or bf16,fp32 for a bf16 candidate, fp32 for an fp32 one" in str(raised.value)
