"""The output contract every stack keeps (``harness.workloads.contract``): well-formed rows of every
sequence, greedy tokens that are the model's own teacher-forced top-1 beyond a near-tie, EOS honoured,
no pad id generated and a padded row that generates what it does unpadded. With ``--carbon-contract-out``
the contract is written for ``carbon-harness release-check``, which judges each side three ways against
the fp32 reference and a yardstick in its dtype (``harness.analysis.contract``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.analysis import side_checks
from harness.analysis.contract import criterion_of, load_tolerances
from harness.carbon.checkpoint import fingerprint
from harness.core.contract_format import CONTRACT_SCHEMA, KINDS, write_contract
from harness.workloads.contract import LONG_PROMPT, collect, contract_file, new_tokens

pytestmark = [pytest.mark.compat, pytest.mark.contract]


@pytest.fixture(scope="module")
def contract_tolerances() -> dict:
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
    contract = collect(carbon_generator, carbon_model_tokenizer, carbon_shape, fingerprint(checkpoint), reference,
                       checkpoint)
    out = pytestconfig.getoption("carbon_contract_out")
    if out:
        write_contract(Path(out) / name, contract)
    n = new_tokens(carbon_shape)
    for prompt in contract["prompts"]:
        if prompt["name"] == LONG_PROMPT:  # filling the context, decoded to the last position of the sequence
            assert carbon_shape.long_prompt and set(prompt["sequences"]) == {"own"}
            assert len(prompt["prompt_ids"]) + len(prompt["greedy"]) == carbon_shape.seq_len
            assert len(prompt["prompt_ids"]) > carbon_shape.max_context_length - 6  # within one 6-mer of the limit
        else:
            assert len(prompt["greedy"]) == n and set(prompt["sequences"]) == set(KINDS)
            assert ("batched" in prompt) is (carbon_shape.batch_size >= 2)
        for seq in prompt["sequences"].values():
            assert len(seq["rows"]) == len(seq["tokens"]) - seq["from"]
            for token, logprob, top, *_ in seq["rows"]:
                assert math.isfinite(logprob) and logprob <= 1e-6, (prompt["name"], token, logprob)
                assert [v for _, v in top] == sorted((v for _, v in top), reverse=True) and logprob <= top[0][1] + 1e-6
    # a side alone has no yardstick: its near-tie allowance is its dtype's floor (the least margin noise
    # the calibration measured in that dtype) times the criterion's factor
    crit = criterion_of(contract["dtype"], contract_tolerances)
    tie = crit.tie_factor * crit.margin_floor
    broken = side_checks.self_consistency(contract, tie) + side_checks.padded_row(contract, contract, tie)
    found, _ = side_checks.pad_and_eos(contract, contract, tie)
    assert [f.describe() for f in broken + found] == []
