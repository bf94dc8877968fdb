"""Speculative decoding's pure parts: the acceptance math, the speedup plan, the batched accept
rule, and NxDI 0.9's speculation config built from the kwargs (against the real NxDI source)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.analysis.speculation_plan import break_even_acceptance, plan_speculation
from harness.backends.neuron.config import neuron_config_kwargs, neuron_speculation_kwargs, nxdi_speculation_length
from harness.backends.neuron.host import neuron_speculation_unavailable_reason
from harness.cli import main as cli_main
from harness.core.hardware import get_profile
from harness.core.spec import MODELS
from harness.core.speculation import SpeculativeError, expected_tokens_per_step, predicted_speedup
from harness.workloads.speculative import (
    EndsComparison,
    SpeculativeResult,
    accepted_prefix,
    combine_results,
    loop_unavailable_reason,
)
from tests.helpers import REPO, plugin_options, run_pytest

pytestmark = pytest.mark.unit



# -- the math ---------------------------------------------------------------------------------

@pytest.mark.parametrize("a,k,expected", [(0.0, 4, 1.0), (1.0, 4, 5.0), (0.5, 1, 1.5), (0.5, 2, 1.75),
                                          (0.8, 3, (1 - 0.8 ** 4) / 0.2)])
def test_expected_tokens_per_step(a, k, expected):
    assert expected_tokens_per_step(a, k) == pytest.approx(expected)


def test_expected_tokens_grow_with_acceptance_and_length():
    values = [expected_tokens_per_step(a / 20, 4) for a in range(21)]
    assert values == sorted(values) and values[0] == 1.0 and values[-1] == 5.0
    assert expected_tokens_per_step(0.7, 8) > expected_tokens_per_step(0.7, 4)


def test_predicted_speedup_is_tokens_over_step_time():
    # k = 4 draft steps of 1 ms and a 5 ms verification against a 5 ms target step
    assert predicted_speedup(1.0, 4, 1.0, 5.0, 5.0) == pytest.approx(5 * 5 / 9)
    assert predicted_speedup(0.0, 4, 1.0, 5.0, 5.0) == pytest.approx(5 / 9)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_bad_speculation_length(bad):
    with pytest.raises(SpeculativeError, match="speculation length .* must be a positive integer"):
        expected_tokens_per_step(0.5, bad)


@pytest.mark.parametrize("bad", [-0.1, 1.01, float("nan"), "0.5"])
def test_bad_acceptance(bad):
    with pytest.raises(SpeculativeError, match=r"acceptance rate .* must be a number in \[0, 1\]"):
        expected_tokens_per_step(bad, 4)


def test_break_even_acceptance():
    a = break_even_acceptance(4, 0.2)
    assert 0 < a < 1
    assert expected_tokens_per_step(a, 4) / (4 * 0.2 + 1) == pytest.approx(1.0, abs=1e-9)
    assert break_even_acceptance(4, 0.0) == 0.0  # a free draft never costs anything
    assert break_even_acceptance(4, 1.0) is None  # a draft as slow as the target never pays


def test_accepted_prefix_counts_leading_agreement_per_row():
    drafts = torch.tensor([[5, 6, 7], [5, 9, 7], [1, 6, 7], [5, 6, 7]])
    predictions = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 0, 8]])
    assert accepted_prefix(drafts, predictions).tolist() == [3, 1, 0, 2]
    assert accepted_prefix(torch.empty(2, 0, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)).tolist() == [0, 0]


def result(tokens, proposed, accepted, advanced, e2e):
    return SpeculativeResult(torch.tensor(tokens), 4, 1.0, e2e, [1.0] * len(proposed), [2.0] * len(proposed),
                             proposed, accepted, advanced)


def test_result_rates_and_combining():
    a = result([[1, 2, 3, 4, 5, 6]], [4, 1], [4, 0], [5, 1], 10.0)
    b = result([[7, 8, 9, 1, 2, 3]], [4, 1], [0, 0], [1, 1], 30.0)
    assert (a.acceptance_rate, a.tokens_per_step) == (4 / 5, 3.0)
    both = combine_results([a, b])
    assert both.tokens.shape == (2, 6) and both.e2e_ms == 40.0 and both.steps == 4
    assert both.acceptance_rate == 4 / 10 and both.tokens_per_step == 8 / 4
    with pytest.raises(ValueError, match="different lengths"):
        combine_results([a, result([[1, 2]], [1], [1], [2], 1.0)])


def test_ends_figures_are_speedups_over_the_same_rounds_target_alone():
    high = result([[1, 2, 3, 4, 5, 6]], [4, 1], [4, 1], [5, 1], 10.0)
    low = result([[1, 2, 3, 4, 5, 6]], [4, 1], [0, 0], [1, 1], 30.0)
    ends = EndsComparison("process_cpu", 5, alone_s=0.018, high_s=0.024, low_s=0.048, high=high, low=low,
                          alone_tokens=torch.tensor([[1, 2, 3, 4, 5, 6]]))
    figures = ends.figures("self", "carbon-tiny-draft")
    assert figures["spec_speedup_self"] == pytest.approx(0.75)
    assert figures["spec_speedup_carbon-tiny-draft"] == pytest.approx(0.375)
    assert figures["spec_speedup_gain"] == pytest.approx(2.0) == figures["spec_speedup_self"] / figures[
        "spec_speedup_carbon-tiny-draft"]
    assert (figures["spec_acceptance_rate_self"], figures["spec_acceptance_rate_carbon-tiny-draft"]) == (1.0, 0.0)
    assert ends.lossless
    assert not EndsComparison("wall", 5, 1.0, 1.0, 1.0, high, low, torch.tensor([[1, 2, 3, 4, 5, 7]])).lossless


# -- planning ---------------------------------------------------------------------------------

def test_plan_3b_with_500m_draft_on_trn2():
    hw = get_profile("trn2.3xlarge")
    plan = plan_speculation("carbon-3b", "carbon-500m", "report-bs1", hw, acceptance=0.7, speculation_length=4)
    assert plan.tp_degree == 4 and plan.speculation_length == 4
    assert 0 < plan.draft_tkg_floor_ms < plan.target_tkg_floor_ms
    assert plan.step_time_ratio == pytest.approx(plan.draft_tkg_floor_ms / plan.target_tkg_floor_ms)
    # the verification reads the target's weights once for all k + 1 tokens, plus k more KV positions
    assert plan.target_tkg_floor_ms < plan.verify_floor_ms < 1.01 * plan.target_tkg_floor_ms
    assert plan.expected_tokens_per_step == pytest.approx(expected_tokens_per_step(0.7, 4))
    assert plan.speedup == pytest.approx(plan.expected_tokens_per_step * plan.target_tkg_floor_ms
                                         / (4 * plan.draft_tkg_floor_ms + plan.verify_floor_ms))
    at_zero = plan_speculation("carbon-3b", "carbon-500m", "report-bs1", hw, acceptance=0.0)
    assert at_zero.speedup < 1.0 < plan.speedup
    assert at_zero.break_even_acceptance == pytest.approx(plan.break_even_acceptance)
    assert plan_speculation("carbon-3b", "carbon-500m", "report-bs1", hw, 1.0).speedup < 5.0


def test_plan_of_a_draft_that_cannot_pay():
    hw = get_profile("trn2.3xlarge")
    plan = plan_speculation("carbon-500m", "carbon-3b", "report-bs1", hw, acceptance=1.0)
    assert plan.speedup < 1.0 and plan.break_even_acceptance is None


def test_cli_plan_with_a_draft(capsys):
    argv = ["plan", "--model", "carbon-3b", "--shape", "report-bs1", "--hardware", "trn2.3xlarge", "--tp", "4",
            "--draft", "carbon-500m", "--acceptance", "0.7", "--speculation-length", "4"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"speculative decoding with carbon-500m, k=4, acceptance 0\.70: .* tokens/step, "
                     r"draft/target step 0\.\d+, predicted speedup \d+\.\d+x", out), out
    assert "break-even acceptance" in out
    # the reference runs' TKG p50 (fixtures/thresholds baselines): 500M's step is half 3B's, not 15%
    assert "at the reference TKG p50 (carbon-3b 6.68 ms, carbon-500m 3.35 ms" in out
    assert cli_main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["speculative"]["draft"] == "carbon-500m" and data["speculative"]["speedup"] > 1.0
    reference = data["speculative"]["reference"]
    assert reference["speedup"] == pytest.approx(expected_tokens_per_step(0.7, 4) / (4 * 3.35 / 6.68 + 1))
    assert reference["speedup"] < 1.0  # at acceptance 0.7 and k = 4 the measured step times do not pay
    assert reference["applies"] and reference["stands"] == "reference"


def test_cli_plan_says_which_figure_stands_at_another_tp(capsys):
    """trn2.48xlarge at tp=8 (issue 32, item 6): the reference TKG p50 was measured at tp=4, so the
    memory floors' figure stands, said with the tp=4 pair beside it; at tp=4 the reference's stands."""
    argv = ["plan", "--model", "carbon-3b", "--shape", "report-bs1", "--hardware", "trn2.48xlarge",
            "--draft", "carbon-500m", "--acceptance", "0.7"]
    assert cli_main([*argv, "--tp", "8"]) == 0
    out = capsys.readouterr().out
    floors = re.search(r"predicted speedup (\d+\.\d+)x\n", out)[1]
    assert "at the reference TKG p50" not in out
    assert ("no reference TKG p50 at tp=8: the reference (carbon-3b 6.68 ms, carbon-500m 3.35 ms) was measured at "
            "tp=4") in out
    assert f"the memory-floor figure stands ({floors}x), as an optimistic one: at tp=4 the floors predict 1.73x and " \
           "the measured steps 0.92x" in out
    assert cli_main([*argv, "--tp", "8", "--json"]) == 0
    reference = json.loads(capsys.readouterr().out)["speculative"]["reference"]
    assert (reference["applies"], reference["stands"], reference["tp_degree"]) == (False, "memory floors", 4)
    assert cli_main(argv) == 0  # the shape's tp=4: the reference's figure stands
    out = capsys.readouterr().out
    assert "this figure stands (0.92x): the memory floors take every step as memory-bound" in out


@pytest.mark.parametrize("argv,message", [
    (["--acceptance", "0.7"], "--acceptance needs --draft"),
    (["--draft", "carbon-500m", "--acceptance", "1.5"], "must be in [0, 1]"),
    (["--draft", "carbon-500m", "--speculation-length", "0"], "must be at least 1"),
    (["--draft", "carbon-9b"], "unknown model 'carbon-9b'"),
])
def test_cli_plan_rejects_bad_speculation_options(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["plan", "--model", "carbon-3b", "--shape", "report-bs1", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# -- NxDI 0.9 speculation kwargs ----------------------------------------------------------------

def test_neuron_kwargs_follow_nxdi_demo():
    target, draft = neuron_speculation_kwargs("carbon-3b", "carbon-500m", "report-bs1", speculation_length=4)
    base = neuron_config_kwargs("carbon-3b", "report-bs1")
    assert target == {**base, "speculation_length": 5, "enable_fused_speculation": True}
    assert draft == {**base, "speculation_length": 0, "enable_fused_speculation": False}
    assert target["on_device_sampling_config"]["top_k"] == 1  # NxDI's fused model asserts on-device sampling
    _, draft_tp = neuron_speculation_kwargs("carbon-3b", "carbon-500m", "report-bs1", 4, fused=False, draft_tp_degree=2)
    assert draft_tp["tp_degree"] == 2
    assert nxdi_speculation_length(1) == 2


def test_neuron_kwargs_reject_bad_values():
    with pytest.raises(SpeculativeError, match="speculation length 0"):
        neuron_speculation_kwargs("carbon-3b", "carbon-500m", "report-bs1", 0)
    with pytest.raises(ValueError, match="unknown model 'carbon-1b'"):
        neuron_speculation_kwargs("carbon-3b", "carbon-1b", "report-bs1")
    with pytest.raises(SpeculativeError, match="draft_tp_degree=0"):
        neuron_speculation_kwargs("carbon-3b", "carbon-500m", "report-bs1", draft_tp_degree=0)


def nxdi_file(vendor: Path, relative: str) -> str:
    return (vendor / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / relative).read_text()


def test_every_speculation_kwarg_is_a_neuron_config_field(nxdi_source):
    source = nxdi_file(nxdi_source, "models/config.py")
    popped = set(re.findall(r'kwargs\.pop\(\s*"(\w+)"', source))
    target, draft = neuron_speculation_kwargs("carbon-3b", "carbon-500m", "report-bs1")
    for name in ("speculation_length", "enable_fused_speculation"):
        assert name in popped, f"NeuronConfig no longer takes {name!r}"
    assert "trace_tokengen_model" not in target  # deprecated in 0.9: derived from the speculation flags
    demo = nxdi_file(nxdi_source, "inference_demo.py")
    assert "draft_neuron_config.speculation_length = 0" in demo
    assert "draft_neuron_config.enable_fused_speculation = False" in demo


def test_cpu_mode_rejects_speculation_as_the_skip_reason_says(nxdi_source):
    assert "Speculation is not yet supported for CPU inference" in nxdi_file(nxdi_source, "models/application_base.py")
    assert "Speculation is not yet supported for CPU inference" in neuron_speculation_unavailable_reason("cpu")
    assert neuron_speculation_unavailable_reason("neuron") is None


def test_the_nxdi_source_given_is_the_one_used(tmp_path):
    """A child pytest given --carbon-nxdi-source=DIR reads NxDI from DIR, not from a tree it finds
    itself: given a directory that holds no NxDI, it fails naming the directory."""
    empty = tmp_path / "not-nxdi"
    empty.mkdir()
    r = run_pytest("-q", "-p", "no:randomly", f"{Path(__file__).relative_to(REPO)}::"
                   "test_cpu_mode_rejects_speculation_as_the_skip_reason_says", f"--carbon-nxdi-source={empty}",
                   cache_dir=tmp_path / "cache")
    assert r.returncode == 1, r.stdout[-3000:]
    assert f"--carbon-nxdi-source {empty} has no neuronx-distributed-inference/src" in r.stdout, r.stdout[-3000:]


@pytest.mark.slow
def test_real_nxdi_builds_and_round_trips_the_speculation_config(nxdi_source, tmp_path):
    """NxDI's own NeuronConfig, LlamaInferenceConfig and FusedSpecNeuronConfig, from the vendored source
    with the Neuron-only packages stubbed, in a subprocess: the kwargs are consumed, the draft matches
    what inference_demo.py derives, and the fused config survives NxDI's save/load."""
    from harness.carbon.checkpoint import write_checkpoint

    target_kwargs, draft_kwargs = neuron_speculation_kwargs("carbon-3b", "carbon-500m", "report-bs1", 4)
    request = {"target_kwargs": target_kwargs, "draft_kwargs": draft_kwargs, "harness_root": str(REPO),
               "target_checkpoint": str(write_checkpoint("carbon-3b", tmp_path / "3b", config_only=True, progress=None)),
               "draft_checkpoint": str(write_checkpoint("carbon-500m", tmp_path / "500m", config_only=True,
                                                        progress=None))}
    r = subprocess.run([sys.executable, str(REPO / "tests/unit/backends/nxdi_speculation_probe.py"), str(nxdi_source),
                        str(tmp_path)], input=json.dumps(request), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["unexpected_kwargs"] == []  # every kwarg is consumed (the pad id goes to the inference config)
    assert out["target"]["speculation_length"] == 5 and out["target"]["enable_fused_speculation"] is True
    assert out["target"]["spec_batch_size"] == 1 and out["target"]["kv_cache_tiling"] is True
    assert out["draft"] == {"speculation_length": 0, "enable_fused_speculation": False, "tp_degree": 4}
    # inference_demo.py's own parser, create_neuron_config and run_inference, given the flags that ask
    # for the harness's target kwargs: a flag exists for each, and NxDI builds the same target config
    # but for the top-k kernel, which OnDeviceSamplingConfig turns on by default and the demo's
    # --top-k-kernel-enabled (default off) turns off
    assert out["no_demo_flag"] == [], out["demo_argv"]
    assert out["target_vs_demo"] == ["on_device_sampling_config.top_k_kernel_enabled"], out["differences"]
    assert out["differences"]["on_device_sampling_config.top_k_kernel_enabled"] == ["True", "False"]
    # derive_draft_neuron_config on the demo's target gives the demo's draft, field by field
    assert out["derived_vs_demo"] == [], out["differences"]
    # NeuronConfig(**draft_kwargs) differs from the demo's draft only in what NeuronConfig derives from
    # the speculation flags (and the top-k kernel default above)
    assert out["kwargs_vs_demo"] == ["kv_cache_tiling", "on_device_sampling_config.top_k_kernel_enabled"]
    assert out["loaded"] == {"speculation_length": 5, "enable_fused_speculation": True,
                             "fused_spec_config": "FusedSpecNeuronConfig", "draft_speculation_length": 0,
                             "draft_hidden_size": MODELS["carbon-500m"].hidden_size,
                             "target_hidden_size": MODELS["carbon-3b"].hidden_size, "worker_cls": "NeuronLlamaModel"}


# -- the --carbon-draft option -------------------------------------------------------------------

def test_drafts_default_to_both_ends_of_the_embedded_default():
    from harness.session.config import make_config

    config = make_config(plugin_options(), REPO)
    assert [d.label for d in config.drafts] == ["carbon-tiny-draft", "self"]
    assert config.speculation_length == 4
    config = make_config(plugin_options(drafts=["Carbon-500M", "self"], speculation_length=3), REPO)
    assert [d.label for d in config.drafts] == ["carbon-500m", "self"] and config.speculation_length == 3


def test_unknown_draft_is_named_with_what_is_accepted(tmp_path):
    from harness.session.config import make_config

    with pytest.raises(ValueError, match=r"--carbon-draft 'carbon-9b' is neither a known model \(carbon-500m, .*"
                                         r"carbon-tiny-draft, .*\) nor an existing checkpoint directory \(or 'self'"):
        make_config(plugin_options(drafts=["carbon-9b"]), REPO)


def test_embedded_draft_is_smaller_with_the_same_vocabulary_and_its_own_seed(tmp_path):
    draft, target = MODELS["carbon-tiny-draft"], MODELS["carbon-tiny"]
    assert draft.vocab_size == target.vocab_size == 155776 and draft.head_dim == target.head_dim == 64
    assert draft.num_parameters < target.num_parameters and draft.num_hidden_layers == 1
    assert draft.seed != target.seed  # unrelated weights: acceptance ~0
    assert cli_main(["checkpoint", "--model", "carbon-tiny-draft", "--out", str(tmp_path / "d"), "--config-only"]) == 0
    provenance = json.loads((tmp_path / "d" / "carbon_harness.json").read_text())
    assert (provenance["model"], provenance["seed"]) == ("carbon-tiny-draft", draft.seed)
    assert json.loads((tmp_path / "d" / "config.json").read_text())["num_hidden_layers"] == 1


@pytest.mark.parametrize("backend, cpu, says", [
    ("hf", False, None),
    ("openai", False, "tests/serving/test_speculative_serving.py"),
    ("neuron", False, "harness.backends.neuron.config"),
    ("neuron", True, "Speculation is not yet supported for CPU inference"),
])
def test_where_each_backend_speculates(backend, cpu, says):
    reason = loop_unavailable_reason(backend, cpu)
    assert reason is None if says is None else says in reason
