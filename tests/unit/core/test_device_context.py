"""The device context a run records (``harness.core.device_context``): the Neuron / XLA / vLLM variables
(secrets by name only), LNC, kernel, the AMI where the instance metadata answers (``unknown`` elsewhere,
never asked off a Neuron host), and the libnrt the process actually mapped."""

from __future__ import annotations

import io
import platform

import pytest

from harness.core.device_context import device_context, device_env, imds_ami_id, loaded_libnrt, process_libnrt

pytestmark = pytest.mark.unit

# /proc/PID/maps lines as a process that loaded the Neuron runtime has them (format of proc(5))
MAPS = """\
7f1c2a000000-7f1c2a200000 r--p 00000000 103:01 5244    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c30000000-7f1c30400000 r-xp 00000000 103:01 77712   /opt/aws/neuron/lib/libnrt.so.1
7f1c30400000-7f1c30410000 rw-p 00400000 103:01 77712   /opt/aws/neuron/lib/libnrt.so.1
"""


def test_the_neuron_xla_and_vllm_variables_are_kept_secrets_by_name():
    env = {"NEURON_RT_VISIBLE_CORES": "0-3", "XLA_FLAGS": "--xla_dump_to=/tmp", "VLLM_API_KEY": "s3cret",
           "VLLM_CACHE_ROOT": "/c", "HOME": "/root", "NEURON_CC_FLAGS": "-O2"}
    assert device_env(env) == {"NEURON_CC_FLAGS": "-O2", "NEURON_RT_VISIBLE_CORES": "0-3", "VLLM_API_KEY": "<set>",
                               "VLLM_CACHE_ROOT": "/c", "XLA_FLAGS": "--xla_dump_to=/tmp"}


def test_the_mapped_libnrt_is_named_once():
    got = loaded_libnrt(MAPS)
    assert got["loaded"] == "/opt/aws/neuron/lib/libnrt.so.1"
    assert loaded_libnrt(MAPS.splitlines()[0]) == {"loaded": None}


def test_this_process_has_no_libnrt_mapped():
    assert process_libnrt()["loaded"] is None  # a CPU box: no Neuron runtime


class Answer(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_ami_comes_from_imdsv2_or_is_unknown():
    asked = []

    def imds(req, timeout):
        asked.append((req.get_method(), req.full_url, dict(req.header_items())))
        return Answer(b"token-1" if req.get_method() == "PUT" else b"ami-0123abcd\n")

    assert imds_ami_id(imds) == "ami-0123abcd"
    assert asked[1][2].get("X-aws-ec2-metadata-token") == "token-1"  # v2: the session token sent
    assert imds_ami_id(lambda req, timeout: (_ for _ in ()).throw(OSError("no route"))) == "unknown"
    assert imds_ami_id(lambda req, timeout: Answer(b"<html>captive portal</html>")) == "unknown"


def test_off_a_neuron_host_the_metadata_is_never_asked():
    def never():
        raise AssertionError("asked the instance metadata off a Neuron host")

    context = device_context({"NEURON_LOGICAL_NC_CONFIG": "1"}, neuron_host=False, ami=never, lnc_from_neuron_ls=2)
    assert context["ami_id"] == "unknown" and context["kernel"] == platform.release()
    assert context["lnc"] == {"NEURON_LOGICAL_NC_CONFIG": "1", "neuron_ls": 2}
    assert device_context({}, neuron_host=True, ami=lambda: "ami-0f")["ami_id"] == "ami-0f"
