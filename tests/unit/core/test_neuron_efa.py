"""NEURON_SKIP_EFA_AFFINITY for a 2.32+ vLLM Neuron server (``harness.core.neuron_efa``): set where the plugin's
workers would find no EFA device (``_set_efa_affinity`` -> ``get_efa_interface`` -> "No EFA device found", the
fork's ``vllm_neuron/utils/hardware_config.py`` at 0bae3e9c50d0), left unset where every Neuron device has one.
The host is a directory laid out as /sys and /dev are, read as the plugin reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.neuron_efa import SKIP_EFA, TRN2_EFA_BDF, EfaHost, efa_environment, missing_efa, read_efa_host
from harness.core.spec import get_shape
from harness.core.vllm_neuron import serve_command, with_efa

pytestmark = pytest.mark.unit


def host_tree(root: Path, product: str, devices: int, efa: bool) -> Path:
    (root / "sys/devices/virtual/dmi/id").mkdir(parents=True)
    (root / "sys/devices/virtual/dmi/id/product_name").write_text(product + "\n")
    (root / "dev").mkdir()
    for n in range(devices):
        (root / "dev" / f"neuron{n}").touch()
        if efa:
            (root / "sys/bus/pci/devices" / TRN2_EFA_BDF[n] / "infiniband" / f"rdmap{n}s0").mkdir(parents=True)
    return root


def test_a_3xlarge_has_no_efa_and_its_server_skips_the_affinity(tmp_path):
    host = read_efa_host(host_tree(tmp_path, "trn2.3xlarge", 1, efa=False))
    assert host == EfaHost("trn2", (0,), {})
    assert efa_environment(host) == {SKIP_EFA: "1"}
    assert missing_efa(host) == "no EFA interface for Neuron device 0 (/sys/bus/pci/devices/0000:c9:00.0/infiniband)"


def test_a_48xlarge_with_efa_leaves_the_variable_unset(tmp_path):
    host = read_efa_host(host_tree(tmp_path, "trn2.48xlarge", 16, efa=True))
    assert host.devices == tuple(range(16)) and host.interfaces[TRN2_EFA_BDF[15]] == ("rdmap15s0",)
    assert missing_efa(host) is None and efa_environment(host) == {}


@pytest.mark.parametrize(("host", "why"), [
    (EfaHost("trn2", (0, 1), {TRN2_EFA_BDF[0]: ("rdmap0s0",)}), "no EFA interface for Neuron device 1"),
    (EfaHost("trn2", (0,), {TRN2_EFA_BDF[0]: ()}), "no EFA interface for Neuron device 0"),  # an empty directory
    (EfaHost("trn2", ()), "no Neuron device"),
    (EfaHost(None, (0,), {TRN2_EFA_BDF[0]: ("rdmap0s0",)}), "instance family unknown"),
])
def test_any_device_without_efa_sets_the_skip(host, why):
    assert why in missing_efa(host) and efa_environment(host) == {SKIP_EFA: "1"}


def test_the_server_command_carries_it_and_says_why(tmp_path, capsys):
    command = serve_command("/m", get_shape("smoke"), "carbon-tiny", stack="s")
    without, why = with_efa(command, read_efa_host(host_tree(tmp_path / "a", "trn2.3xlarge", 1, efa=False)))
    assert without.env[SKIP_EFA] == "1" and why.startswith("no EFA interface")
    with_, why = with_efa(command, read_efa_host(host_tree(tmp_path / "b", "trn2.48xlarge", 16, efa=True)))
    assert SKIP_EFA not in with_.env and why is None
    err = capsys.readouterr().err
    assert f"{SKIP_EFA}=1 (no EFA interface for Neuron device 0" in err and f"{SKIP_EFA} left unset" in err


def test_the_read_back_records_what_each_server_process_got_and_the_verdict_says_it(tmp_path):
    import sys

    from harness.release.cores import markdown, read_back
    from harness.serving.server import VLLMServer
    from tests.unit.conftest import REPO

    class StandIn(VLLMServer):  # tests/stand_ins/server.py answers /v1/models, as in test_core_turns
        def command(self) -> list[str]:
            return [sys.executable, str(REPO / "tests" / "stand_ins" / "server.py"), str(self.port), self.served_model]

    server = StandIn(Path("/unused"), None, tmp_path / "s.log", "carbon-tiny",
                     env={"NEURON_RT_VISIBLE_CORES": "0-3", SKIP_EFA: "1"}).start()
    try:
        server.wait_ready(60)
        records = read_back("candidate", server, "0-3", neuron_ls=None)
    finally:
        server.stop()
    assert records[0]["skip_efa_affinity"] == "1"
    plan = {"scheme": "exclusive", "instance": "trn2.3xlarge", "logical_cores": 4, "ranges": {"candidate": "0-3"},
            "reason": "one side at a time"}
    text = "\n".join(markdown({"plan": plan, "servers": records}))
    assert "candidate: NEURON_SKIP_EFA_AFFINITY=1" in text
    records[0]["skip_efa_affinity"] = None
    assert "candidate: NEURON_SKIP_EFA_AFFINITY=unset" in "\n".join(markdown({"plan": plan, "servers": records}))
