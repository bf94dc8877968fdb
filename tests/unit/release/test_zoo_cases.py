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
