"""How loaded the machine was while a run measured: recorded in the run manifest, read by compare.

A CPU timing moves with what else runs on the box (the same code read CTE 21.8 ms, then 151.4 ms a
quarter of an hour later beside other work), and a run's own samples cannot show it. So a run
records, from session start to the manifest: the CPU time the whole box spent busy (``/proc/stat``),
the part this process and its children spent (``getrusage`` for those that ended, ``/proc/PID/stat``
for those still running, such as a vLLM server the session started), and so the CPUs other work kept
busy on average; the time the hypervisor stole from this VM where the kernel counts it; and the
load averages at the end. Pure functions on those numbers; ``snapshot`` is the only reader.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any

PROC_STAT = "/proc/stat"
# Other work that kept at least this many CPUs busy on average, or a hypervisor that stole at least
# this fraction of the CPU time, makes a run "loaded": its timings say as much about the box as the code.
LOADED_OTHER_CPUS = 0.5
LOADED_STEAL_FRACTION = 0.05


@dataclass(frozen=True)
class CpuTimes:
    """The whole box's CPU time in seconds since boot, all CPUs together."""

    busy: float
    idle: float  # idle and iowait
    steal: float | None  # None where the kernel does not count it


def parse_proc_stat(text: str, ticks_per_s: float) -> CpuTimes | None:
    """The aggregate ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq softirq steal ...,
    in clock ticks; guest time is already inside user), or None when there is none."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [float(f) for f in fields[1:]]
            user, nice, system, idle = ticks[:4]
            iowait, irq, softirq = (ticks[4:7] + [0.0, 0.0, 0.0])[:3]
            steal = ticks[7] if len(ticks) > 7 else None
            return CpuTimes((user + nice + system + irq + softirq) / ticks_per_s, (idle + iowait) / ticks_per_s,
                            None if steal is None else steal / ticks_per_s)
    return None


@dataclass(frozen=True)
class Snapshot:
    wall_s: float  # time.monotonic
    cpu: CpuTimes | None
    own_cpu_s: float  # this process and its children, ended or running


def live_descendants_cpu_s(root: int, ticks_per_s: float, proc: str = "/proc") -> float:
    """CPU seconds of ``root``'s running descendants (``getrusage`` counts a child only once it has
    ended and been waited for), from each ``/proc/PID/stat``: utime, stime and its own ended children's."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    try:
        pids = [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return 0.0
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        parents[pid] = int(fields[1])
        cpu[pid] = sum(float(x) for x in fields[11:15]) / ticks_per_s
    total, frontier = 0.0, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        total += sum(cpu[c] for c in children)
        frontier += children
    return total


def snapshot() -> Snapshot:
    ticks = float(os.sysconf("SC_CLK_TCK"))
    try:
        with open(PROC_STAT) as f:
            cpu = parse_proc_stat(f.read(), ticks)
    except (OSError, ValueError):
        cpu = None
    own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    own += live_descendants_cpu_s(os.getpid(), ticks)
    return Snapshot(time.monotonic(), cpu, own)


def run_load(start: Snapshot, end: Snapshot, cpus: int | None,
             loadavg: tuple[float, float, float] | None) -> dict[str, Any]:
    """The manifest's ``load``: what the box did between two snapshots, and whether that is loaded."""
    wall = max(end.wall_s - start.wall_s, 1e-9)
    own = max(end.own_cpu_s - start.own_cpu_s, 0.0)
    out: dict[str, Any] = {"wall_s": round(wall, 3), "cpus": cpus, "own_cpus": round(own / wall, 3),
                           "loadavg": list(loadavg) if loadavg else None, "other_cpus": None, "steal_fraction": None}
    if start.cpu is not None and end.cpu is not None:
        busy = end.cpu.busy - start.cpu.busy
        total = busy + (end.cpu.idle - start.cpu.idle)
        out["other_cpus"] = round(max(busy - own, 0.0) / wall, 3)
        if start.cpu.steal is not None and end.cpu.steal is not None:
            stolen = end.cpu.steal - start.cpu.steal
            out["steal_fraction"] = round(stolen / (total + stolen), 4) if total + stolen > 0 else 0.0
    out["loaded"] = loaded_reason(out) is not None
    return out


def loaded_reason(load: Any) -> str | None:
    """Why a run counts as loaded ("other work kept 1.6 of 2 CPUs busy on average"), or None: not
    loaded, or no load recorded (a run from before this was recorded, an NxDI report)."""
    if not isinstance(load, dict):
        return None
    reasons = []
    other, steal, cpus = load.get("other_cpus"), load.get("steal_fraction"), load.get("cpus")
    if isinstance(other, (int, float)) and other >= LOADED_OTHER_CPUS:
        reasons.append(f"other work kept {other:.1f}" + (f" of {cpus}" if cpus else "") + " CPUs busy on average")
    if isinstance(steal, (int, float)) and steal >= LOADED_STEAL_FRACTION:
        reasons.append(f"the hypervisor stole {100 * steal:.0f}% of the CPU time")
    if not reasons:
        return None
    avg = load.get("loadavg")
    tail = f" (load average {avg[0]:.1f} at its end)" if isinstance(avg, list) and avg else ""
    return "; ".join(reasons) + tail


def loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None
