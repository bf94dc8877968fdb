"""The output contract every stack keeps (``harness.workloads.contract``): greedy tokens on the DNA
prompt suite that are the model's own teacher-forced top-1, and the same positions scored two ways (after
the prompt, and from the first token) alike. With ``--carbon-contract-out`` the contract is written for
``carbon-harness release-check``, which compares the two sides and the fp32 reference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.analysis.contract import SCORED_FROM as JUDGED_FROM
from harness.analysis.contract import consistency_breaks, load_tolerances, tolerance_of
from harness.carbon.checkpoint import fingerprint
from harness.core.storage import atomic_write_json
from harness.workloads.contract import CONTRACT_SCHEMA, SCORED_FROM, collect, contract_file, new_tokens

pytestmark = [pytest.mark.compat, pytest.mark.contract]


@pytest.fixture(scope="module")
def contract_tolerances() -> dict[str, float]:
    return load_tolerances()


def test_output_contract(pytestconfig, carbon_session, carbon_model, carbon_shape, carbon_generator,
                         carbon_model_tokenizer, contract_tolerances):
    name = contract_file(carbon_model.label, carbon_shape.name)
    reference_dir = pytestconfig.getoption("carbon_contract_reference")
    reference = None
    if reference_dir:
        path = Path(reference_dir) / name
        if not path.is_file():
            pytest.fail(f"--carbon-contract-reference {reference_dir}: no {name} there (the reference run must cover "
                        "the same models and shapes)")
        reference = json.loads(path.read_text())
        if reference.get("schema") != CONTRACT_SCHEMA:
            pytest.fail(f"{path}: schema {reference.get('schema')!r}, expected {CONTRACT_SCHEMA} (a contract written "
                        "by this harness's test_output_contract)")
    checkpoint = carbon_session.checkpoint(carbon_model)
    contract = collect(carbon_generator, carbon_model_tokenizer, carbon_shape, fingerprint(checkpoint), reference)
    out = pytestconfig.getoption("carbon_contract_out")
    if out:
        atomic_write_json(Path(out) / name, contract)
    n = new_tokens(carbon_shape)
    for prompt in contract["prompts"]:
        assert len(prompt["greedy"]) == n and len(prompt["own"]) == n
        assert len(prompt["scored"]) == len(prompt["prompt_ids"]) - SCORED_FROM + len(prompt["scored_greedy"])
        for token, logprob, top in prompt["own"] + prompt["scored"]:
            assert math.isfinite(logprob) and logprob <= 1e-6, (prompt["name"], token, logprob)
            assert [v for _, v in top] == sorted((v for _, v in top), reverse=True) and logprob <= top[0][1] + 1e-6
    assert JUDGED_FROM == SCORED_FROM  # the judge reads positions as the writer wrote them
    bound = tolerance_of(contract["dtype"], contract_tolerances)
    assert consistency_breaks(contract, bound) == []
