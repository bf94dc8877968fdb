"""Each 2.32+ vLLM Neuron worker's NeuronCore, from its server's log (``harness.release.worker_cores``): the
plugin logs each worker it starts ("Initialized NeuronWorker with rank %s, local_rank %s", ``NeuronWorker.__init__``
in the fork jinhuang12/vllm-neuron at 44a17b6ff476) and gives it ``NEURON_VISIBLE_DEVICES[local_rank]``
(``_init_neuron_distributed_environment_and_runtime``); each is checked against the plan, and the verdict says
that the /proc read-back proves only the range handed to the server. The server in the read-back test is the
readiness stand-in (tests/stand_ins/server.py); its log gets the worker lines as the plugin writes them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.core.neuron_visibility import CHOSEN_VARIABLE, VISIBLE_DEVICES
from harness.release.cores import markdown, read_back
from harness.release.errors import ReleaseCheckError
from harness.release.worker_cores import PROVES, range_list, worker_cores
from harness.serving.server import VLLMServer
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit


def worker_log(*local_ranks: int) -> str:
    return "".join(f"(Worker_TP{r} pid={100 + r}) INFO 11-28 19:00:0{r} [neuron_worker.py:215] Initialized NeuronWorker "
                   f"with rank {r}, local_rank {r}\n" for r in local_ranks)


def test_each_worker_gets_its_local_rank_of_the_range_handed():
    records, problems = worker_cores("candidate", "noise\n" + worker_log(0, 1, 2, 3) + worker_log(0), "4-7", "4-7")
    assert problems == [] and [(r["worker_rank"], r["worker_core"]) for r in records] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert range_list("8,1,5-6") == [8, 1, 5, 6]  # in the order written, as parse_range_list reads it


def test_a_worker_outside_the_plan_or_past_the_range_is_a_problem():
    _, problems = worker_cores("candidate", worker_log(0, 1), "4-7", "0-3")
    assert problems[0] == ("the candidate's worker rank 0 runs on NeuronCore 4 (local_rank 0 of "
                           "NEURON_VISIBLE_DEVICES=4-7), planned 0-3") and len(problems) == 2
    _, problems = worker_cores("candidate", worker_log(2), "4-5", "4-7")
    assert problems == ["the candidate's worker rank 2 (local_rank 2) has no core in NEURON_VISIBLE_DEVICES=4-5"]


def test_a_log_that_names_no_worker_is_said_not_passed():
    records, problems = worker_cores("baseline", "INFO nothing here\n", "0-3", "0-3")
    assert problems == [] and "no worker named in the server log" in records[0]["worker_log"]


class StandIn(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, str(REPO / "tests" / "stand_ins" / "server.py"), str(self.port), self.served_model]


def started(tmp_path: Path, handed: str, log: str) -> StandIn:
    server = StandIn(Path("/unused"), None, tmp_path / "vllm-server.log", "carbon-tiny",
                     env={VISIBLE_DEVICES: handed, CHOSEN_VARIABLE: VISIBLE_DEVICES}).start()
    server.wait_ready(60)
    with open(server.log_path, "a") as f:  # what the plugin's workers write once the engine has started
        f.write(log)
    return server


def test_the_read_back_reads_each_workers_core_and_the_verdict_says_what_proc_proves(tmp_path):
    server = started(tmp_path, "4-7", worker_log(0, 1, 2, 3))
    try:
        records = read_back("candidate", server, "4-7", neuron_ls=None)
    finally:
        server.stop()
    assert [r["worker_core"] for r in records if "worker_core" in r] == [4, 5, 6, 7]
    plan = {"scheme": "disjoint", "instance": "trn2.48xlarge", "logical_cores": 64,
            "ranges": {"baseline": "0-3", "candidate": "4-7"}, "reason": "room for both"}
    text = "\n".join(markdown({"plan": plan, "servers": records}))
    assert PROVES in text and "the candidate's worker rank 3 (local_rank 3): NeuronCore 7 (planned 4-7)" in text


def test_a_worker_log_outside_the_plan_stops_the_check_and_its_server(tmp_path):
    server = started(tmp_path, "4-7", worker_log(0, 1, 2, 3, 4))
    with pytest.raises(ReleaseCheckError, match="worker rank 4 .local_rank 4. has no core in NEURON_VISIBLE_DEVICES"):
        read_back("candidate", server, "4-7", neuron_ls=None)
    assert server.proc.poll() is not None


def test_the_verdict_keeps_workers_apart_from_the_server_processes(tmp_path):
    """verdict.json's ``neuron_cores.servers`` stays one record per server process (what every reader of it
    takes); the workers read from the log are under ``workers``."""
    from harness.core.neuron_cores import plan_cores
    from harness.release.cores import record
    from harness.release.plan import CheckPlan, Side

    records, _ = worker_cores("candidate", worker_log(0, 1), "4-5", "4-5")
    process = {"who": "candidate", "pid": 1, "variable": VISIBLE_DEVICES, "cores": "4-5", "planned": "4-5"}
    plan = CheckPlan(Side("baseline", sys.executable), Side("candidate", sys.executable, backend="openai"), tmp_path)
    got = record(plan, plan_cores("trn2.48xlarge", 64, {"baseline": 2, "candidate": 2}, ("candidate",)),
                 [process, *records], [])
    assert got["servers"] == [process] and got["workers"] == records
    assert "worker rank 1 (local_rank 1): NeuronCore 5 (planned 4-5)" in "\n".join(markdown(got))


@pytest.fixture
def held(tmp_path):
    """A process holding a 2.32+ server's environment (the range handed in NEURON_VISIBLE_DEVICES, what chose
    the variable, which start rules ran), alone in its process group as a started server is; no port."""
    import subprocess
    from types import SimpleNamespace

    from harness.core.neuron_visibility import CHOSEN_SOURCE

    env = {VISIBLE_DEVICES: "4-7", CHOSEN_VARIABLE: VISIBLE_DEVICES, CHOSEN_SOURCE: "platform source of 0.2.0",
           "CARBON_VLLM_NEURON_PREFLIGHT": "plugin's own rules", "STANDIN_NEURON_LS": "1"}
    from harness.core.neuron_cores import read_environ

    for _ in range(3):  # a stray signal on a loaded runner (pid_max 32768 here) can end it before it is read
        proc = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
        try:
            if read_environ(proc.pid).get(VISIBLE_DEVICES) == "4-7":
                break
        except OSError:
            pass
        proc.kill()
        proc.wait()
    else:
        pytest.fail("a sleep holding the server's environment ended before its /proc environ was read, three times")
    server = SimpleNamespace(proc=proc, log_path=tmp_path / "vllm-server.log", stop=proc.kill)
    yield server
    proc.kill()
    proc.wait()


def test_each_read_back_record_says_what_chose_its_variable_the_rules_run_and_its_own_libnrt(held, monkeypatch):
    """A server's log with a byte that is not UTF-8 (a worker's raw output) still gives each worker's core; each
    process's record carries what chose its variable, which start rules ran and the libnrt of that process."""
    import harness.release.cores as cores

    held.log_path.write_bytes(b"\xff\xfe raw\n" + worker_log(0, 1).encode())
    monkeypatch.setattr(cores, "process_libnrt", lambda pid: {"loaded": f"/opt/aws/libnrt.so.1 (pid {pid})"})
    records = read_back("candidate", held, "4-7", neuron_ls=None)
    assert records[0] == {"who": "candidate", "pid": held.proc.pid, "variable": VISIBLE_DEVICES,
                          "NEURON_RT_VISIBLE_CORES": None, "cores": "4-7", "planned": "4-7",
                          "chosen_by": "platform source of 0.2.0", "skip_efa_affinity": None,
                          "preflight": "plugin's own rules", "libnrt": f"/opt/aws/libnrt.so.1 (pid {held.proc.pid})"}
    assert [r["worker_core"] for r in records[1:]] == [4, 5]


def test_a_server_without_its_log_has_its_workers_said_unread_and_neuron_ls_is_read_where_the_host_has_it(
        held, monkeypatch, tmp_path):
    """No server log (never written, or removed): each worker's core is said not read, never a crash; and
    read_back's default looks for neuron-ls on this host (a Trn2 host has it) and reads its view."""
    from harness.core import neuron_host

    from tests.unit.release.test_core_turns import neuron_ls

    monkeypatch.setattr(neuron_host, "neuron_ls_path", lambda: neuron_ls(tmp_path))
    records = read_back("candidate", held, "4-7")
    assert "no worker named in the server log" in records[1]["worker_log"]
    assert {"device": 1, "pid": held.proc.pid, "neuroncore_ids": [4, 5, 6, 7]} in [r.get("neuron_ls") for r in records]
