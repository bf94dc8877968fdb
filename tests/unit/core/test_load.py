"""How loaded the box was while a run measured (issue 32, item 7): the numbers from /proc/stat and
getrusage, when a run counts as loaded, and what a real run records in its manifest."""

from __future__ import annotations

import os

import pytest

from harness.core.load import CpuTimes, Snapshot, live_descendants_cpu_s, loaded_reason, parse_proc_stat, run_load

pytestmark = pytest.mark.unit

# the aggregate line of a 2-CPU VM's /proc/stat (user nice system idle iowait irq softirq steal guest guest_nice)
STAT = "cpu  4000 100 900 10000 200 0 50 300 0 0\ncpu0 2000 50 450 5000 100 0 25 150 0 0\nintr 1 2 3\n"


def test_the_aggregate_cpu_line_in_seconds():
    assert parse_proc_stat(STAT, 100.0) == CpuTimes(busy=50.5, idle=102.0, steal=3.0)
    assert parse_proc_stat("cpu  10 0 10 80\n", 100.0) == CpuTimes(0.2, 0.8, None)  # an old kernel: no steal
    assert parse_proc_stat("intr 1\n", 100.0) is None
    with open("/proc/stat") as f:  # this machine's own, where there is one
        mine = parse_proc_stat(f.read(), float(os.sysconf("SC_CLK_TCK")))
    assert mine is not None and mine.busy > 0 and mine.idle >= 0


def test_other_work_is_the_boxs_busy_time_less_the_runs_own():
    start = Snapshot(0.0, CpuTimes(busy=100.0, idle=100.0, steal=0.0), own_cpu_s=1.0)
    # 100 s: the box spent 180 CPU s busy, the run 20 of them: other work kept 1.6 CPUs busy
    end = Snapshot(100.0, CpuTimes(busy=280.0, idle=110.0, steal=10.0), own_cpu_s=21.0)
    load = run_load(start, end, 2, (5.9, 4.3, 2.8))
    assert load == {"wall_s": 100.0, "cpus": 2, "own_cpus": 0.2, "loadavg": [5.9, 4.3, 2.8], "other_cpus": 1.6,
                    "steal_fraction": 0.05, "loaded": True}
    assert loaded_reason(load) == ("other work kept 1.6 of 2 CPUs busy on average; the hypervisor stole 5% of the "
                                   "CPU time (load average 5.9 at its end)")
    quiet = run_load(start, Snapshot(100.0, CpuTimes(busy=125.0, idle=275.0, steal=0.0), 21.0), 2, (1.0, 1.0, 1.0))
    assert quiet["other_cpus"] == 0.05 and quiet["loaded"] is False and loaded_reason(quiet) is None
    assert loaded_reason(None) is None and loaded_reason({"loadavg": [9.0]}) is None  # nothing recorded: nothing said


def test_a_running_child_counts_as_the_runs_own(tmp_path):
    """A server the session started is still running when the manifest is written: its CPU is the run's."""
    proc = tmp_path / "proc"
    for pid, ppid, ticks in ((10, 1, 500), (11, 10, 300), (12, 11, 200), (13, 1, 999)):
        (proc / str(pid)).mkdir(parents=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 5
        (proc / str(pid) / "stat").write_text(f"{pid} (a (weird) name) " + " ".join(fields) + "\n")
    assert live_descendants_cpu_s(10, 100.0, str(proc)) == pytest.approx(5.0)  # 11 and 12, not 13 nor 10 itself


def test_a_real_run_records_its_load(gated_run):
    _, data, _ = gated_run
    load = data["carbon_harness"]["load"]
    assert load["cpus"] == os.cpu_count() and load["wall_s"] > 0 and load["own_cpus"] > 0
    assert isinstance(load["other_cpus"], float) and load["other_cpus"] >= 0
    assert len(load["loadavg"]) == 3 and isinstance(load["loaded"], bool)
    assert "load" not in data["machine_info"]["carbon_harness"]  # measured, so never in what --benchmark-compare diffs
