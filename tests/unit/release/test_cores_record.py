"""A release check's NeuronCore plan applied to its sides and what the verdict says of it
(``harness.release.cores``: ``decide``, ``round_read_back``, ``record``, ``markdown``), in process: which
range each side is given on a real instance's core count, the refusal of a team's server that cannot be
moved, the perf rounds' read-back against the plan, and every line verdict.md shows. (Starting, stopping and
reading back real server processes is test_core_turns.py's.)"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.core.neuron_cores import plan_cores
from harness.core.spec import SHAPES
from harness.release.cores import decide, markdown, record, round_read_back
from harness.release.errors import ReleaseCheckError
from harness.release.plan import CheckPlan, Side
from harness.release.worker_cores import PROVES

pytestmark = pytest.mark.unit

NXDI = Side("baseline", sys.executable, backend="neuron")
STARTED = Side("candidate", sys.executable, backend="openai")  # no endpoint: the check starts its server
TEAMS = Side("candidate", sys.executable, backend="openai", endpoint="http://team:8000")
NEURON_B = Side("candidate", sys.executable, backend="neuron")


def plan_of(baseline: Side, candidate: Side, out: Path = Path("/tmp/out"), **kw) -> CheckPlan:
    return CheckPlan(baseline, candidate, out, **kw)


def test_a_large_instance_gives_each_side_its_own_range():
    plan, cores = decide(plan_of(NXDI, STARTED), "trn2.48xlarge", 64)
    assert (cores.scheme, cores.ranges, cores.tp, cores.served) == (
        "disjoint", {"baseline": "0-3", "candidate": "4-7"}, {"baseline": 4, "candidate": 4}, ("candidate",))
    assert (plan.baseline.cores, plan.candidate.cores, plan.core_plan) == ("0-3", "4-7", cores)
    assert (plan.baseline.name, plan.candidate.backend) == ("baseline", "openai")  # the sides otherwise unchanged


def test_the_largest_shapes_tp_degree_sizes_both_ranges(monkeypatch):
    monkeypatch.setitem(SHAPES, "tp8", replace(SHAPES["smoke"], name="tp8", tp_degree=8))
    for shapes in (("smoke", "tp8"), ("tp8", "smoke")):
        _, cores = decide(plan_of(NXDI, NEURON_B, shapes=shapes), "trn2.48xlarge", 64)
        assert cores.ranges == {"baseline": "0-7", "candidate": "8-15"}


def test_a_small_instance_with_a_started_server_takes_turns():
    plan, cores = decide(plan_of(NXDI, STARTED), "trn2.3xlarge", 4)
    assert (cores.scheme, cores.served, plan.baseline.cores, plan.candidate.cores) == (
        "exclusive", ("candidate",), "0-3", "0-3")


def test_a_small_instance_without_a_server_runs_the_sides_one_after_the_other():
    _, cores = decide(plan_of(NXDI, NEURON_B), "trn2.3xlarge", 4)
    assert (cores.scheme, cores.served) == ("sequential", ())


def test_a_teams_server_on_an_instance_without_room_for_both_is_refused_naming_the_fix():
    with pytest.raises(ReleaseCheckError) as err:
        decide(plan_of(NXDI, TEAMS), "trn2.3xlarge", 4)
    assert str(err.value) == (
        "the candidate's server at --candidate-endpoint holds its NeuronCores for the whole check, and trn2.3xlarge "
        "has no room for both sides (no side is served: every process runs alone, one after the other): let the "
        "check start it (--candidate-serve-script ci/scripts/vllm-serve.sh), so it can be stopped while the other "
        "side runs")


def test_a_teams_server_with_room_for_both_keeps_its_range():
    plan, cores = decide(plan_of(NXDI, TEAMS), "trn2.48xlarge", 64)
    assert (cores.scheme, cores.served, plan.candidate.cores) == ("disjoint", (), "4-7")


def test_a_side_that_does_not_fit_the_instance_is_one_release_check_error():
    with pytest.raises(ReleaseCheckError, match=r"^the baseline needs tp 4 NeuronCores; trn2.tiny has 2 \(give a "
                                                r"smaller tp shape, or a larger instance\)$"):
        decide(plan_of(NXDI, NEURON_B), "trn2.tiny", 2)


def write_round(out: Path, side: str, k: int, text: str) -> None:
    (out / side).mkdir(parents=True, exist_ok=True)
    (out / side / f"perf-round-{k}.json").write_text(text)


def manifest(cores: str | None) -> str:
    return json.dumps({"carbon_harness": {"neuron_rt_visible_cores": cores}, "benchmarks": []})


def test_round_read_back_reads_each_rounds_manifest_in_order_and_skips_unreadable_ones(tmp_path):
    write_round(tmp_path, "baseline", 1, manifest("0-3"))
    write_round(tmp_path, "baseline", 2, manifest(None))
    write_round(tmp_path, "baseline", 3, "{not json")
    write_round(tmp_path, "baseline", 4, "[1, 2]")  # not a manifest
    write_round(tmp_path, "baseline", 5, json.dumps({"benchmarks": []}))  # no carbon_harness block
    write_round(tmp_path, "baseline", 6, manifest("4-7"))
    (tmp_path / "baseline" / "perf-round-7.xml").write_text("<junit/>")  # not a round's JSON
    assert round_read_back(tmp_path, NXDI) == ["0-3", None, None, "4-7"]
    assert round_read_back(tmp_path, NEURON_B) == []  # no folder


DISJOINT = plan_cores("trn2.48xlarge", 64, {"baseline": 4, "candidate": 4}, ("candidate",))


def test_record_without_a_plan_says_why():
    assert record(plan_of(NXDI, NEURON_B), None, [], []) == {
        "plan": None, "why": "no Neuron instance named (--neuron-instance) or found (neuron-ls)"}


def test_record_holds_the_plan_the_read_backs_and_each_neuron_sides_rounds(tmp_path):
    plan = plan_of(NXDI, STARTED, tmp_path)
    write_round(tmp_path, "baseline", 1, manifest("0-3"))
    write_round(tmp_path, "candidate", 1, manifest("9"))  # a served side's rounds are its client's: not read
    server = {"who": "candidate", "pid": 10, "cores": "4-7", "planned": "4-7"}
    worker = {"who": "candidate", "worker_rank": 0, "local_rank": 0, "worker_core": 4, "planned": "4-7"}
    log = {"who": "candidate", "worker_log": "no worker line"}
    events = [{"action": "start", "took_s": 3.0}]
    got = record(plan, DISJOINT, [server, worker, log], events)
    assert got == {"plan": DISJOINT.to_dict(), "servers": [server], "workers": [worker, log],
                   "rounds": {"baseline": ["0-3"]}, "events": events, "problems": []}


def test_record_names_a_neuron_side_whose_rounds_ran_outside_its_range(tmp_path):
    plan = plan_of(NXDI, NEURON_B, tmp_path)
    for k, cores in enumerate(["0-3", "4-7", "0-3"], 1):
        write_round(tmp_path, "baseline", k, manifest(cores))
    write_round(tmp_path, "candidate", 1, manifest("4-7"))
    got = record(plan, plan_cores("trn2.48xlarge", 64, {"baseline": 4, "candidate": 4}), [], [])
    assert got["rounds"] == {"baseline": ["0-3", "4-7", "0-3"], "candidate": ["4-7"]}
    assert got["problems"] == ["the baseline's perf rounds ran with NEURON_RT_VISIBLE_CORES=['0-3', '4-7'], "
                               "planned 0-3"]
    write_round(tmp_path, "candidate", 2, manifest(None))  # a round without the variable is outside it too
    assert record(plan, DISJOINT, [], [])["problems"][1] == (
        "the candidate's perf rounds ran with NEURON_RT_VISIBLE_CORES=['4-7', 'None'], planned 4-7")


def test_markdown_without_a_plan_is_nothing():
    assert markdown({"plan": None, "why": "no instance"}) == []


def test_markdown_shows_the_plan_each_process_the_rounds_the_starts_and_the_problems():
    servers = [
        {"who": "candidate", "pid": 10, "variable": "NEURON_RT_VISIBLE_CORES", "cores": "4-7", "planned": "4-7",
         "chosen_by": "platform source", "skip_efa_affinity": "1"},
        {"who": "candidate", "pid": 11, "variable": None, "NEURON_RT_VISIBLE_CORES": "5", "cores": None,
         "planned": "4-7", "chosen_by": None, "skip_efa_affinity": None},
        {"who": "candidate", "pid": 12, "unreadable": "gone"},
        {"who": "candidate", "neuron_ls": {"pid": 10, "device": 1, "neuroncore_ids": [4, 5, 6, 7]}},
        {"who": "candidate", "neuron_ls": "neuron-ls: exit 1"},
        {"who": "candidate", "worker_rank": 0, "local_rank": 0, "worker_core": 4, "planned": "4-7"},
    ]
    workers = [{"who": "candidate", "worker_log": "no NeuronWorker line"}]
    events = [{"action": "start", "took_s": 30.5}, {"action": "stop", "took_s": 1.0},
              {"action": "start", "took_s": 12.0}]
    lines = markdown({"plan": DISJOINT.to_dict(), "servers": servers, "workers": workers,
                      "rounds": {"baseline": ["0-3", "0-3"], "candidate": []}, "events": events,
                      "problems": ["the baseline's perf rounds ran elsewhere"]})
    assert lines == [
        "### NeuronCores", "",
        f"disjoint on trn2.48xlarge (64 logical cores): baseline `0-3`, candidate `4-7`. {DISJOINT.reason}.", "",
        "- the candidate's server process 10: NEURON_RT_VISIBLE_CORES=4-7 (planned 4-7)",
        "- the candidate's server process 11: NEURON_RT_VISIBLE_CORES=None (planned 4-7)",
        "- the candidate's server process 12: not readable (gone)",
        "- neuron-ls: the candidate's server process 10 on device 1 (cores [4, 5, 6, 7])",
        "- neuron-ls: neuron-ls: exit 1",
        f"- {PROVES}",
        "- the candidate's worker rank 0 (local_rank 0): NeuronCore 4 (planned 4-7)",
        "- the candidate's workers: no NeuronWorker line",
        "- the baseline's perf rounds: NEURON_RT_VISIBLE_CORES=0-3",
        "- the candidate's perf rounds: NEURON_RT_VISIBLE_CORES=-",
        "- EFA affinity (a 2.32+ worker stops without an EFA device unless skipped): candidate: "
        "NEURON_SKIP_EFA_AFFINITY=1, candidate: NEURON_SKIP_EFA_AFFINITY=unset",
        "- the server's NeuronCores variable chosen by platform source",
        "- server starts for its turns: 2, 30.5 s, 12.0 s",
        "- **the baseline's perf rounds ran elsewhere**",
        ""]


def test_markdown_of_a_plan_alone():
    lines = markdown({"plan": DISJOINT.to_dict()})
    assert lines == ["### NeuronCores", "", f"disjoint on trn2.48xlarge (64 logical cores): baseline `0-3`, "
                     f"candidate `4-7`. {DISJOINT.reason}.", "", ""]


def test_markdown_skips_a_worker_record_among_the_servers_and_reads_an_older_records_variable():
    """A worker's record listed among the servers (its log line, or its core) is the workers' lines' and stops
    no server process after it; a record with NEURON_RT_VISIBLE_CORES and no ``cores`` shows that value."""
    servers = [{"who": "candidate", "worker_log": "no NeuronWorker line"},
               {"who": "candidate", "worker_rank": 1, "local_rank": 1, "worker_core": 5, "planned": "4-7"},
               {"who": "candidate", "pid": 20, "NEURON_RT_VISIBLE_CORES": "4-7", "planned": "4-7"}]
    lines = markdown({"plan": DISJOINT.to_dict(), "servers": servers,
                      "rounds": {"baseline": ["0-3", "4-7", "0-3"]}})
    assert lines[4:] == ["- the candidate's server process 20: NEURON_RT_VISIBLE_CORES=4-7 (planned 4-7)",
                         f"- {PROVES}", "- the candidate's workers: no NeuronWorker line",
                         "- the candidate's worker rank 1 (local_rank 1): NeuronCore 5 (planned 4-7)",
                         "- the baseline's perf rounds: NEURON_RT_VISIBLE_CORES=0-3, 4-7", ""]


def test_markdown_names_the_variable_a_server_got_its_cores_in():
    servers = [{"who": "baseline", "pid": 7, "variable": "NEURON_VISIBLE_DEVICES", "cores": "0-3", "planned": "0-3"}]
    lines = markdown({"plan": DISJOINT.to_dict(), "servers": servers, "events": [{"action": "stop", "took_s": 1}]})
    assert lines[4:] == ["- the baseline's server process 7: NEURON_VISIBLE_DEVICES=0-3 (planned 0-3)", f"- {PROVES}",
                         "- EFA affinity (a 2.32+ worker stops without an EFA device unless skipped): baseline: "
                         "NEURON_SKIP_EFA_AFFINITY=unset", ""]


def test_neuron_ls_reads_where_the_runtime_put_each_process_and_names_one_outside_the_plan(tmp_path, monkeypatch):
    """neuron-ls's view (the stand-in of tests/stand_ins/neuron_ls.py, as test_core_turns.py runs it) of two
    live processes: one on the planned cores' device, one on another, named as outside its plan."""
    import os
    import subprocess

    from harness.core import neuron_host
    from harness.release.cores import neuron_ls_read
    from tests.unit.release.test_core_turns import neuron_ls

    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    exe = neuron_ls(tmp_path)
    held = [subprocess.Popen(["cat", str(fifo)], env={**os.environ, "STANDIN_NEURON_LS": "1",
                                                      "NEURON_RT_VISIBLE_CORES": cores}) for cores in ("4-7", "8-11")]
    inside, outside = (p.pid for p in held)
    try:
        records, problems = neuron_ls_read("candidate", {inside, outside}, "4-7", exe)
        assert records == [
            {"who": "candidate", "neuron_ls": {"device": 1, "pid": inside, "neuroncore_ids": [4, 5, 6, 7]}},
            {"who": "candidate", "neuron_ls": {"device": 2, "pid": outside, "neuroncore_ids": [8, 9, 10, 11]}}]
        assert problems == [f"neuron-ls lists the candidate's server process {outside} on Neuron device 2 (cores "
                            "8,9,10,11), none of them in its planned 4-7"]
        assert neuron_ls_read("candidate", {inside}, "4-7", None) == ([], [])  # not asked
        monkeypatch.setattr(neuron_host, "NEURON_LS_FALLBACK", tmp_path / "no-fallback")
        monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
        assert neuron_ls_read("candidate", {inside}, "4-7", True) == ([], [])  # none on this host
        monkeypatch.setenv("PATH", str(tmp_path))  # found on the PATH, as on a Trn2 host
        assert neuron_ls_read("candidate", {inside}, "4-7", True) == (records[:1], [])
        monkeypatch.setenv("STANDIN_INSTANCE", "no-such-instance")  # neuron-ls fails: recorded, not fatal
        records, problems = neuron_ls_read("candidate", {inside}, "4-7", exe)
        assert problems == [] and len(records) == 1 and records[0]["who"] == "candidate"
        assert records[0]["neuron_ls"].startswith(f"{exe} --json-output exited 1: ")
    finally:
        for p in held:
            p.kill()
            p.wait()
