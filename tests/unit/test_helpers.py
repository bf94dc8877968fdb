"""The shared test helpers (tests/helpers.py) hold what they promise: the option values are the ones
the plugin hands ``make_config``, a second checkout's tests refuse to run against this harness, and the
scoring comparison fails a backend that drops a sequence."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

from harness.core.paths import REPO_ROOT
from harness.plugin import hooks
from harness.workloads.scoring import SequenceScore
from tests.helpers import REPO, assert_same_sequence_scores, checkout_under_test, plugin_options

pytestmark = pytest.mark.unit


def test_plugin_options_have_the_keys_pytest_configure_passes():
    tree = ast.parse(inspect.getsource(hooks.pytest_configure))
    dicts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
             and any(isinstance(t, ast.Name) and t.id == "options" for t in n.targets)]
    assert len(dicts) == 1
    assert sorted(plugin_options()) == sorted(k.value for k in dicts[0].keys)


def test_an_unknown_option_is_named():
    with pytest.raises(KeyError, match="not a plugin option: carbon_backend"):
        plugin_options(carbon_backend="hf")


def test_tests_refuse_another_checkouts_harness(tmp_path):
    assert REPO == REPO_ROOT == checkout_under_test(REPO_ROOT / "tests", REPO_ROOT)
    with pytest.raises(RuntimeError, match=f"the tests in {tmp_path / 'fresh'} import the harness package of "
                                           f"{REPO_ROOT}: run `python -m pytest` from"):
        checkout_under_test(tmp_path / "fresh" / "tests", REPO_ROOT)


def test_a_backend_that_drops_a_sequence_fails_the_scores_comparison():
    """The served and neuron scoring tests compare each backend's bp-level scores with transformers' through
    this helper: a backend that returns one sequence fewer must fail it, whichever one it drops."""
    want = [SequenceScore(seq, np.full(len(seq), 0.25)) for seq in ("ACGTAC", "ACGTACG", "ACGTACGT")]
    assert_same_sequence_scores(list(want), want)
    for dropped in range(len(want)):
        with pytest.raises(AssertionError, match="scored 2 sequences, expected 3"):
            assert_same_sequence_scores(want[:dropped] + want[dropped + 1:], want)
