"""Both output-contract legs in one real release check (issue 56): transformers bf16 against itself, the candidate
carrying the zoo's attention x1.01 at decode positions >= 40 (``harness.release.defects``: below bf16 rounding, so
the bf16 leg misses it). With no leg option the check runs the fp32 leg too, and fails naming it; ``--legs bf16``
passes, saying what it cannot see. Each check takes ~3-6 minutes on 2 busy cores: ``extended`` (CI's checks are
fp32 candidates, whose default adds no leg)."""

from __future__ import annotations

import json
import os

import pytest

from harness.release.defects import plant_hook
from tests.helpers import run_cli

pytestmark = [pytest.mark.release, pytest.mark.slow, pytest.mark.extended]

CHECK = ("release-check", "--conformance-only", "--conformance-markers", "contract", "--backend", "hf", "--dtype",
         "bf16", "--model", "carbon-tiny", "--shape", "smoke")


def planted(tmp_path) -> list[str]:
    hook = plant_hook("attn-scale-late", tmp_path / "hook")
    paths = [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]
    return ["--candidate-env", "PYTHONPATH=" + os.pathsep.join(paths)]


def test_attention_x1_01_late_in_decode_fails_the_default_check_in_its_fp32_leg(tmp_path):
    r = run_cli(*CHECK, "--out", str(tmp_path / "check"), *planted(tmp_path), timeout=1500)
    verdict = json.loads((tmp_path / "check" / "verdict.json").read_text())
    assert r.returncode == 1 and verdict["verdict"] == "FAIL", r.stderr[-2000:]
    legs = verdict["output_contract_legs"]
    assert [(leg["leg"], leg["outcome"]) for leg in legs] == [("bf16", "PASS"), ("fp32", "FAIL")]
    assert legs[1]["dtypes"] == {"baseline": "fp32", "candidate": "fp32"}
    assert legs[1]["where"]["candidate"] == "transformers on this host's CPU"
    assert all(r.startswith("output contract (carbon-tiny-smoke (fp32 leg)): the candidate (hf, fp32)")
               for r in verdict["reasons"]), verdict["reasons"]
    first = verdict["reasons"][0]  # measured: sigma ratio (scored) 344 > 1.5, largest at position 42
    assert "sigma ratio (scored)" in first and "position 4" in first, first
    assert verdict["contract_legs"] == []  # the fp32 leg ran: no bf16-only caveat
    assert (tmp_path / "check" / "fp32-leg" / "candidate" / "contract.log").is_file()


def test_legs_bf16_opts_out_and_its_pass_says_what_it_cannot_see(tmp_path):
    r = run_cli(*CHECK, "--legs", "bf16", "--out", str(tmp_path / "check"), *planted(tmp_path), timeout=1500)
    verdict = json.loads((tmp_path / "check" / "verdict.json").read_text())
    assert r.returncode == 0 and verdict["verdict"] == "PASS", r.stderr[-2000:]
    assert "PASS (bf16 leg only: defects below bf16 rounding not excluded)" in r.stderr
    assert [leg["leg"] for leg in verdict["output_contract_legs"]] == ["bf16"]
    assert not (tmp_path / "check" / "fp32-leg").exists()
