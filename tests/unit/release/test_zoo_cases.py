"""Which cases the contract zoo plants on which stack (``harness.release.zoo.on_stack``) and where each plant
lands in a case's command: the near-threshold attention scale reaches NxDI's CPU mode as an edit in a copy of the
candidate's NxDI tree, and a served vLLM candidate as a sitecustomize on its server's PYTHONPATH (issue 56)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.release.defects import NXDI_EDITS, SERVED_HOOKS
from harness.release.zoo import CORRECT, NEAR, Case, cases, command

pytestmark = pytest.mark.unit


def names(stack: str) -> list[str]:
    return [c.case for c in cases([stack], ["carbon-tiny"], [*CORRECT, *NEAR])]


def test_each_stack_runs_its_correct_cases_and_the_near_threshold_defects_it_has_a_plant_for():
    assert names("vllm") == ["correct-bf16", "correct-fp32", *(n for n in NEAR if n.removesuffix("-fp32") in
                                                                SERVED_HOOKS)]
    assert names("nxdi") == ["correct-bf16", "correct-fp32", *(n for n in NEAR if n.removesuffix("-fp32") in
                                                                NXDI_EDITS)]
    assert names("hf") == [*CORRECT, *NEAR]
    assert {"attn-scale-late", "attn-scale-late-fp32"} <= set(names("vllm")) & set(names("nxdi"))


def option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_a_served_case_plants_the_candidates_vllm_only(tmp_path):
    cmd, _ = command(Case("vllm", "carbon-tiny", "attn-scale-late-fp32"), tmp_path, Path("/nxdi"), "py",
                     "/venv/bin/python")
    assert option(cmd, "--candidate-env").split("=", 1)[1].split(":")[0] == str(tmp_path / "hook")
    assert "vllm.v1.attention.backends.cpu_attn" in (tmp_path / "hook" / "sitecustomize.py").read_text()
    assert option(cmd, "--candidate-python") == "/venv/bin/python" and option(cmd, "--baseline-backend") == "hf"
    assert option(cmd, "--legs") == "fp32" and cmd.count("--candidate-env") == 1


def test_a_correct_served_case_has_no_plant(tmp_path):
    cmd, _ = command(Case("vllm", "carbon-tiny", "correct-fp32"), tmp_path, Path("/nxdi"), "py", "/venv/bin/python")
    assert "--candidate-env" not in cmd and not (tmp_path / "hook").exists()


def test_an_nxdi_case_plants_a_copy_of_the_candidates_tree_and_no_hook(tmp_path, nxdi_source):
    cmd, _ = command(Case("nxdi", "carbon-tiny", "attn-scale-late-fp32"), tmp_path, nxdi_source, "py")
    planted = Path(option(cmd, "--candidate-nxdi-source"))
    assert planted == tmp_path / "nxdi-planted" and option(cmd, "--baseline-nxdi-source") == str(nxdi_source)
    name = NXDI_EDITS["attn-scale-late"][0]
    text = (planted / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / name).read_text()
    assert "planted: attention scale x1.01" in text and "--candidate-env" not in cmd


def zoo_cli(*argv: str) -> int:
    import argparse

    from harness.release.zoo import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["contract-zoo", *argv])
    return args.func(args)


def test_plant_writes_a_served_plant_and_prints_the_option_that_gives_it_to_the_candidate(tmp_path, capsys):
    assert zoo_cli("plant", "--out", str(tmp_path), "--stack", "vllm", "--case", "attn-scale-late-fp32") == 0
    printed = capsys.readouterr().out.split()
    assert printed[0] == "--candidate-env" and printed[1].split("=", 1)[1].split(":")[0] == str(tmp_path / "hook")
    assert "vllm.v1.attention.backends.cpu_attn" in (tmp_path / "hook" / "sitecustomize.py").read_text()


def test_plant_on_nxdi_prints_the_planted_tree_as_the_candidates_source(tmp_path, capsys, nxdi_source):
    assert zoo_cli("plant", "--out", str(tmp_path), "--stack", "nxdi", "--case", "attn-scale-late",
                   "--nxdi-source", str(nxdi_source)) == 0
    assert capsys.readouterr().out.split() == ["--candidate-nxdi-source", str(tmp_path / "nxdi-planted")]


@pytest.mark.parametrize("argv, message", [
    (["--stack", "vllm", "--case", "rope-theta"], "--case rope-theta: no defect the zoo plants on vllm; those are "
                                                  "attn-scale-late"),
    (["--stack", "vllm", "--case", "correct-fp32"], "--case correct-fp32: no defect the zoo plants on vllm"),
    (["--stack", "nxdi", "--case", "attn-scale-late"], "attn-scale-late on nxdi is an edit of NxDI's own code: give "
                                                       "--nxdi-source DIR"),
    (["--stack", "vllm", "--stack", "nxdi", "--case", "attn-scale-late"],
     "needs --out DIR, one --stack and one --case"),
])
def test_plant_refuses_what_the_zoo_does_not_plant_naming_what_it_does(tmp_path, argv, message):
    from harness.release.errors import ReleaseCheckError

    with pytest.raises(ReleaseCheckError) as caught:
        zoo_cli("plant", "--out", str(tmp_path), *argv)
    assert message in str(caught.value)
