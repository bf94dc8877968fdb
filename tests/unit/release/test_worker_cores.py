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
