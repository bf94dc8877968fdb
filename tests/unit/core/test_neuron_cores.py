"""How a release check shares NeuronCores (``harness.core.neuron_cores``): disjoint ranges where both sides'
tp fit the instance (a trn2.48xlarge's 64 logical cores), the served side's server stopped during the other
side's turns where they do not (a trn2.3xlarge's 4), and what a process actually got, read back from its
``/proc/PID/environ``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.hardware import get_profile
from harness.core.neuron_cores import (
    CorePlanError,
    check_range,
    core_range,
    neuron_ls_view,
    parse_cores,
    plan_cores,
    read_environ,
)

pytestmark = pytest.mark.unit


def cores_of(instance: str) -> int:
    return get_profile(instance).logical_cores


def test_a_48xlarge_gives_each_side_its_own_range_sized_from_tp():
    plan = plan_cores("trn2.48xlarge", cores_of("trn2.48xlarge"), {"baseline": 4, "candidate": 4}, ("candidate",))
    assert plan.scheme == "disjoint" and plan.ranges == {"baseline": "0-3", "candidate": "4-7"}
    assert not plan.exclusive


def test_a_3xlarge_cannot_hold_both_so_the_server_is_stopped_in_turn():
    plan = plan_cores("trn2.3xlarge", cores_of("trn2.3xlarge"), {"baseline": 4, "candidate": 4}, ("candidate",))
    assert plan.scheme == "exclusive" and plan.ranges == {"baseline": "0-3", "candidate": "0-3"}
    assert "stopped while the other side holds the cores" in plan.describe()


def test_without_a_server_every_process_runs_alone():
    plan = plan_cores("trn2.3xlarge", 4, {"baseline": 4, "candidate": 4})
    assert plan.scheme == "sequential" and set(plan.ranges.values()) == {"0-3"}


def test_a_side_wider_than_the_instance_is_refused_naming_both():
    with pytest.raises(CorePlanError, match="needs tp 8 NeuronCores; trn2.3xlarge has 4"):
        plan_cores("trn2.3xlarge", 4, {"baseline": 8, "candidate": 4})


@given(st.integers(1, 64), st.integers(1, 32), st.integers(1, 32), st.booleans())
def test_ranges_fit_the_instance_and_overlap_only_when_the_scheme_says_so(cores, tp_a, tp_b, served):
    tp = {"baseline": tp_a, "candidate": tp_b}
    if max(tp_a, tp_b) > cores:
        with pytest.raises(CorePlanError):
            plan_cores("x", cores, tp, ("candidate",) if served else ())
        return
    plan = plan_cores("x", cores, tp, ("candidate",) if served else ())
    got = {side: parse_cores(r) for side, r in plan.ranges.items()}
    assert all(len(got[side]) == tp[side] and max(got[side]) < cores for side in tp)
    assert (plan.scheme == "disjoint") == (not got["baseline"] & got["candidate"])
    assert (plan.scheme == "disjoint") == (tp_a + tp_b <= cores)


@given(st.integers(0, 200), st.integers(1, 64))
def test_a_range_reads_back_as_its_cores(start, count):
    assert parse_cores(core_range(start, count)) == set(range(start, start + count))


@pytest.mark.parametrize("bad", ["", "a-b", "4-2", "-1", "1,,2"])
def test_a_malformed_value_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="NEURON_RT_VISIBLE_CORES="):
        parse_cores(bad)


def test_a_running_process_reads_back_the_range_it_was_given():
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "NEURON_RT_VISIBLE_CORES": "4-7"})
    try:
        assert child.stdout.readline() == "up\n"  # exec'ed: its environ is its own, not the forked parent's
        environ = read_environ(child.pid)
    finally:
        child.communicate("", timeout=30)
    assert environ["NEURON_RT_VISIBLE_CORES"] == "4-7"
    assert check_range("the server", environ, "4-7") is None
    assert check_range("the server", environ, "0-3") == ("the server runs with NEURON_RT_VISIBLE_CORES=4-7, "
                                                          "planned 0-3")
    assert "would take every NeuronCore" in check_range("the server", {}, "0-3")


def test_an_environment_written_over_is_told_from_an_empty_one(tmp_path):
    """setproctitle (vLLM names its processes with it) writes a title and NULs over the environment area."""
    from harness.core.neuron_cores import EnvironRewritten

    for pid, raw in ((1, b"VLLM::EngineCore\0\0\0\0"), (2, b""), (3, b"PATH=/bin\0NEURON_RT_VISIBLE_CORES=0-3\0")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(raw)
    with pytest.raises(EnvironRewritten, match="wrote over it"):
        read_environ(1, tmp_path)
    assert read_environ(2, tmp_path) == {}  # exec'ed with no environment: no range, which check_range names
    assert read_environ(3, tmp_path)["NEURON_RT_VISIBLE_CORES"] == "0-3"


# The server's first process holds exactly its range; its engine core and each TP worker a subset of it (a
# 2.32+ worker sets its one core), never a core outside it; in whichever variable its plugin takes.
@pytest.mark.parametrize("environ, whole, problem", [
    ({"NEURON_VISIBLE_DEVICES": "4-7"}, True, None),
    ({"NEURON_RT_VISIBLE_CORES": "4-7"}, True, None),
    ({"NEURON_VISIBLE_DEVICES": "5"}, False, None),
    ({"NEURON_VISIBLE_DEVICES": "5"}, True, "NEURON_VISIBLE_DEVICES=5, planned 4-7"),
    ({"NEURON_VISIBLE_DEVICES": "4-8"}, False, "core(s) 8 outside its range"),
    ({"NEURON_RT_VISIBLE_CORES": "3,4"}, False, "core(s) 3 outside its range"),
    ({"NEURON_VISIBLE_DEVICES": "0-63"}, False, "outside its range"),
    ({}, False, "runs without"),
    ({"NEURON_VISIBLE_DEVICES": "4-7", "NEURON_RT_VISIBLE_CORES": "9", "CARBON_NEURON_CORES_VARIABLE":
      "NEURON_VISIBLE_DEVICES"}, True, None),  # the chosen variable is the one read
    ({"NEURON_VISIBLE_DEVICES": "four"}, True, "give a core"),
])
def test_a_server_process_holds_its_range_or_a_part_of_it_never_more(environ, whole, problem):
    got = check_range("the server's process 1", environ, "4-7", whole=whole)
    assert (got is None) if problem is None else (got is not None and problem in got), got


@given(st.integers(0, 60), st.integers(1, 4), st.integers(0, 63))
def test_a_worker_passes_exactly_when_its_core_is_in_the_range(start, count, core):
    planned = core_range(start, count)
    got = check_range("a worker", {"NEURON_VISIBLE_DEVICES": str(core)}, planned, whole=False)
    assert (got is None) == (start <= core < start + count), got


def test_sides_that_exactly_fill_the_instance_get_their_own_ranges():
    """The boundary of ``total <= cores``: two tp-32 sides on a trn2.48xlarge's 64 cores fit side by side."""
    plan = plan_cores("trn2.48xlarge", 64, {"baseline": 32, "candidate": 32}, ("candidate",))
    assert plan.scheme == "disjoint" and plan.ranges == {"baseline": "0-31", "candidate": "32-63"}
    assert plan_cores("trn2.48xlarge", 64, {"baseline": 32, "candidate": 33}, ("candidate",)).scheme == "exclusive"


# issue 57: neuron-ls's own view (neuron_ls_view). On a trn2.48xlarge (16 devices of 4 logical cores each) the
# baseline's NxDI round holds device 0 while the candidate's server holds its own range: only the server's pids
# are judged, and a plan narrower than a device (tp 1-2) lies on a device that also lists cores outside it.
def devices_48xl(holding: dict[int, list[int]]) -> list[dict]:
    """trn2.48xlarge's neuron-ls devices (fixtures/neuron_ls), ``holding`` device -> the pids listed on it."""
    import json

    from tests.helpers import REPO

    devices = json.loads((REPO / "fixtures" / "neuron_ls" / "trn2.48xlarge.json").read_text())
    for device in devices:
        device["neuron_processes"] = [{"pid": pid, "command": "python", "neuron_runtime_version": "2.31"}
                                      for pid in holding.get(device["neuron_device"], [])]
    return devices


def test_another_process_neuron_ls_lists_is_not_blamed_on_the_server():
    """The baseline's NxDI round (pid 900) on device 0, the candidate's server (pid 1200) on device 1 (cores 4-7)."""
    records, problems = neuron_ls_view(devices_48xl({0: [900], 1: [1200]}), {1200}, "4-7", "candidate's server")
    assert problems == []
    assert records == [{"device": 1, "pid": 1200, "neuroncore_ids": [4, 5, 6, 7]}]


def test_the_servers_process_on_a_device_outside_its_range_is_named():
    records, problems = neuron_ls_view(devices_48xl({0: [900, 1200], 1: [1200]}), {1200}, "4-7", "candidate's server")
    assert [r["device"] for r in records] == [0, 1]
    assert problems == ["neuron-ls lists candidate's server process 1200 on Neuron device 0 (cores 0,1,2,3), none of "
                        "them in its planned 4-7"]


@pytest.mark.parametrize("planned", ["4", "4-5", "6-7", "5"])
def test_a_plan_narrower_than_a_device_is_accepted_on_its_device(planned):
    """tp 1-2: the device neuron-ls lists the server on holds cores outside the plan as well; that is no fault."""
    plan = plan_cores("trn2.48xlarge", 64, {"baseline": 4, "candidate": 2}, ("candidate",))
    assert plan.ranges["candidate"] == "4-5"
    _, problems = neuron_ls_view(devices_48xl({1: [77]}), {77}, planned, "candidate's server")
    assert problems == []
    _, problems = neuron_ls_view(devices_48xl({2: [77]}), {77}, planned, "candidate's server")
    assert len(problems) == 1 and "Neuron device 2 (cores 8,9,10,11)" in problems[0]


# survivors of the generated mutants (nox -s mutation), each pinned: what verdict.json and verdict.md say of a plan
@pytest.mark.parametrize("tp, served, scheme, ranges, reason", [
    ({"baseline": 4, "candidate": 4}, ("candidate",), "disjoint", {"baseline": "0-3", "candidate": "4-7"},
     "the sides' 8 cores fit the instance's 64: a server keeps its own range while the other side runs"),
    ({"baseline": 2, "candidate": 1, "third": 3}, (), "disjoint", {"baseline": "0-1", "candidate": "2", "third": "3-5"},
     "the sides' 6 cores fit the instance's 64: a server keeps its own range while the other side runs"),
    ({"baseline": 40, "candidate": 40}, ("baseline",), "exclusive", {"baseline": "0-39", "candidate": "0-39"},
     "the sides need 80 cores of 64: the served side's server is stopped while the other side holds the cores, and "
     "started again (a load) before its own turn"),
    ({"baseline": 40, "candidate": 40}, (), "sequential", {"baseline": "0-39", "candidate": "0-39"},
     "no side is served: every process runs alone, one after the other"),
])
def test_the_plans_record_is_its_instance_cores_scheme_ranges_tp_served_and_why(tp, served, scheme, ranges, reason):
    plan = plan_cores("trn2.48xlarge", 64, tp, served)
    assert plan.to_dict() == {"instance": "trn2.48xlarge", "logical_cores": 64, "scheme": scheme, "ranges": ranges,
                              "tp": tp, "served": list(served), "reason": reason}
    sides = ", ".join(f"{side} {r} (tp {tp[side]})" for side, r in ranges.items())
    assert plan.describe() == f"{scheme} on trn2.48xlarge (64 logical NeuronCores): {sides}. {reason}"


@pytest.mark.parametrize("start, count", [(-1, 2), (0, 0), (-1, 0)])
def test_a_range_without_a_start_or_a_core_is_refused_naming_both(start, count):
    with pytest.raises(ValueError, match=rf"^cores {start}\+{count}: give a start >= 0 and a count >= 1$"):
        core_range(start, count)
    assert core_range(4, 1) == "4" and core_range(4, 2) == "4-5"


def test_an_instance_without_cores_is_refused_naming_it():
    with pytest.raises(CorePlanError, match=r"^trn2.3xlarge: 0 logical NeuronCores; a core plan needs at least one$"):
        plan_cores("trn2.3xlarge", 0, {"baseline": 1})


def test_an_environment_is_read_as_exec_ed_values_with_equals_signs_and_bytes_that_are_no_utf8(tmp_path):
    from harness.core.neuron_cores import EnvironRewritten

    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "environ").write_bytes(b"OPTS=--a=1 --b=2\0NAME=caf\xff\0")
    assert read_environ(5, tmp_path) == {"OPTS": "--a=1 --b=2", "NAME": "caf\ufffd"}
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "environ").write_bytes(b"VLLM::Worker\0\0")
    with pytest.raises(EnvironRewritten, match=rf"^{tmp_path / '6' / 'environ'} holds no NAME=value: the process "):
        read_environ(6, tmp_path)


def test_cores_outside_a_range_are_all_named_and_a_device_without_cores_says_so():
    got = check_range("a worker", {"NEURON_VISIBLE_DEVICES": "2-9"}, "4-7", whole=False)
    assert got == "a worker runs with NEURON_VISIBLE_DEVICES=2-9, planned 4-7: core(s) 2,3,8,9 outside its range"
    devices = [{"neuron_device": 3, "neuron_processes": [77, {"pid": 77}]}]  # a bare entry is no process record
    records, problems = neuron_ls_view(devices, {77}, "4-7", "candidate's server")
    assert records == [{"device": 3, "pid": 77, "neuroncore_ids": []}]
    assert problems == ["neuron-ls lists candidate's server process 77 on Neuron device 3 (cores none listed), none "
                        "of them in its planned 4-7"]
