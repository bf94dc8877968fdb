"""The contract's tolerances as loaded (``harness.analysis.contract.load_tolerances``): every criterion field is
the value its own JSON key holds, per dtype (a field read from another key would load silently: the bf16
padded-row bound 2.7 would become the per-position ratio's 4.6, fp32's per-position near-tie 1.2 the global
2.2), and a missing, unknown or unusable key is refused naming it."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from harness.analysis.contract import CRITERION_KEYS, OPTIONAL_KEYS, TOLERANCES_FILE, ContractError, load_tolerances

pytestmark = pytest.mark.unit

SCALARS = sorted(CRITERION_KEYS - {"tier_factor", "sigma_tokens"})
SHIPPED = {k: v for k, v in json.loads(TOLERANCES_FILE.read_text()).items() if not k.startswith("_")}


def as_json(criterion) -> dict:
    """A loaded criterion in the file's own terms (its dtype is the entry's key, not a field)."""
    out = dataclasses.asdict(criterion)
    out.pop("dtype")
    if out["bias_t"] == math.inf:  # absent from the file: the signed bias shown, not gated (fp32)
        out.pop("bias_t")
    return out


@pytest.mark.parametrize("dtype", sorted(k for k, v in SHIPPED.items() if "same_as" not in v))
def test_every_shipped_field_loads_as_its_own_json_value(dtype):
    loaded = load_tolerances()[dtype]
    assert loaded.dtype == dtype
    assert as_json(loaded) == SHIPPED[dtype]


def test_the_values_the_issue_names_are_where_they_belong():
    loaded = load_tolerances()
    assert loaded["bf16"].pad_factor == 2.7 and loaded["bf16"].position_ratio == 4.6
    assert loaded["fp32"].tie_position_factor == 1.2 and loaded["fp32"].tie_factor == 2.2
    assert loaded["server"] is loaded["bf16"]


def distinct_file(tmp_path, mutate=None) -> tuple:
    """A tolerances file whose every field of every dtype holds a value no other field holds (a swap of two
    keys cannot load equal), ``mutate``d."""
    data, value = {}, 1.0
    for dtype in ("fp32", "bf16"):
        entry = {}
        for key in sorted(CRITERION_KEYS):
            if key == "tier_factor":
                entry[key] = {t: (value := value + 0.125) for t in ("5", "50", "1000", "all")}
            elif key == "sigma_tokens":
                entry[key] = 40 + len(data)
            else:
                entry[key] = (value := value + 0.125)
        data[dtype] = entry
    data["server"] = {"same_as": "fp32"}
    data["_about"] = "ignored: a key that starts with _"
    if mutate:
        mutate(data)
    path = tmp_path / "tolerances.json"
    path.write_text(json.dumps(data))
    return path, data


def test_each_field_of_each_dtype_is_read_from_its_own_key(tmp_path):
    path, data = distinct_file(tmp_path)
    loaded = load_tolerances(path)
    assert set(loaded) == {"fp32", "bf16", "server"} and loaded["server"] is loaded["fp32"]
    for dtype in ("fp32", "bf16"):
        assert as_json(loaded[dtype]) == data[dtype], dtype
        assert isinstance(loaded[dtype].sigma_tokens, int)


def test_sigma_tokens_may_be_left_out_and_is_then_50(tmp_path):
    path, _ = distinct_file(tmp_path, lambda d: d["bf16"].pop("sigma_tokens"))
    assert load_tolerances(path)["bf16"].sigma_tokens == 50


def test_bias_t_may_be_left_out_and_the_signed_bias_is_then_not_gated(tmp_path):
    path, data = distinct_file(tmp_path, lambda d: d["bf16"].pop("bias_t"))
    loaded = load_tolerances(path)
    assert loaded["bf16"].bias_t == math.inf and loaded["fp32"].bias_t == data["fp32"]["bias_t"]


@pytest.mark.parametrize("key", sorted(CRITERION_KEYS - OPTIONAL_KEYS))
def test_a_missing_key_is_refused_naming_it(tmp_path, key):
    path, _ = distinct_file(tmp_path, lambda d: d["bf16"].pop(key))
    with pytest.raises(ContractError, match=rf"'bf16' needs .*; missing \['{key}'\], unknown \[\]"):
        load_tolerances(path)


@pytest.mark.parametrize("key", ["pad_factr", "tie_position", "same_as"])
def test_an_unknown_key_is_refused_naming_it(tmp_path, key):
    path, _ = distinct_file(tmp_path, lambda d: d["fp32"].__setitem__(key, 1.0))
    with pytest.raises(ContractError, match=rf"'fp32' needs .*; missing \[\], unknown \['{key}'\]"):
        load_tolerances(path)


@pytest.mark.parametrize("key", SCALARS + ["sigma_tokens"])
@pytest.mark.parametrize("bad", [0, -1.0, "2.7", True, float("inf")])
def test_a_value_that_is_no_positive_number_is_refused_naming_its_field(tmp_path, key, bad):
    path, _ = distinct_file(tmp_path, lambda d: d["bf16"].__setitem__(key, bad))
    with pytest.raises(ContractError, match=rf"^{re.escape(str(path))}: bf16\.{key} must be a positive number, got "
                                            rf"{repr(bad)[:4]}"):  # the file named first: which of several it is
        load_tolerances(path)


@pytest.mark.parametrize("tier", ["5", "50", "1000", "all"])
def test_a_tier_factor_is_read_per_tier_and_refused_naming_it(tmp_path, tier):
    path, data = distinct_file(tmp_path)
    assert load_tolerances(path)["fp32"].tier_factor[tier] == data["fp32"]["tier_factor"][tier]
    path, _ = distinct_file(tmp_path, lambda d: d["fp32"]["tier_factor"].__setitem__(tier, -2))
    with pytest.raises(ContractError, match=rf"fp32\.tier_factor\.{tier} must be a positive number, got -2"):
        load_tolerances(path)
    path, _ = distinct_file(tmp_path, lambda d: d["fp32"]["tier_factor"].pop(tier))
    with pytest.raises(ContractError, match="'fp32' tier_factor must have exactly the tiers 5, 50, 1000, all"):
        load_tolerances(path)


def test_an_alias_to_a_dtype_without_a_criterion_is_refused(tmp_path):
    path, _ = distinct_file(tmp_path, lambda d: d.__setitem__("server", {"same_as": "fp8"}))
    with pytest.raises(ContractError, match="'server' is the same as 'fp8', which has no criterion"):
        load_tolerances(path)
