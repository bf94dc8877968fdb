"""Which NeuronCores each side of a release check takes (``NEURON_RT_VISIBLE_CORES``), decided before
anything starts, and how to read back what a process actually got.

The Neuron runtime gives a process every NeuronCore unless ``NEURON_RT_VISIBLE_CORES`` says otherwise, and
a core held by one process cannot be allocated by another; SIGSTOP does not free it. A served side is a
long-lived server that holds its cores for the whole check, while the other side's processes come and go
(one per conformance run and per perf round). So:

- **disjoint** (the host has cores for both sides' tp degrees, as a trn2.48xlarge's 64 for two tp=4 sides):
  each side gets its own range, the baseline's from core 0, the candidate's after it; a server keeps its
  range while the other side runs.
- **exclusive** (it has not, as a trn2.3xlarge's 4 logical cores for two tp=4 sides, and a side is served):
  both sides take cores from 0; the served side's server is stopped (its processes gone, its cores freed)
  whenever the other side runs, and started again (a load of its compiled artifacts) before its own turn.
  Each start is timed and recorded; both sides then pay a load per turn, as every NxDI round loads its own.
- **sequential** (no side is served): every process runs alone, one after the other, each on cores from 0.

Pure, except ``read_environ`` (``/proc/PID/environ``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMES = ("disjoint", "exclusive", "sequential")
VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"


class CorePlanError(ValueError):
    """A side needs more NeuronCores than the instance has (one line, naming both)."""


def core_range(start: int, count: int) -> str:
    """``NEURON_RT_VISIBLE_CORES`` for ``count`` cores from ``start``: ``4-7`` (``4`` for one core)."""
    if start < 0 or count < 1:
        raise ValueError(f"cores {start}+{count}: give a start >= 0 and a count >= 1")
    return str(start) if count == 1 else f"{start}-{start + count - 1}"


def parse_cores(value: str) -> set[int]:
    """The cores a ``NEURON_RT_VISIBLE_CORES`` value names: ``0-3``, ``4``, or a comma list of either."""
    cores: set[int] = set()
    for part in value.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={value!r}: give a core (4), a range (4-7) or a comma list")
        if first < 0 or last < first:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={value!r}: {part.strip()!r} is not an ascending range")
        cores.update(range(first, last + 1))
    return cores


@dataclass(frozen=True)
class CorePlan:
    """Each side's cores on one instance, the scheme that shares them, and why."""

    instance: str
    logical_cores: int
    scheme: str
    ranges: dict[str, str] = field(default_factory=dict)  # side -> NEURON_RT_VISIBLE_CORES
    tp: dict[str, int] = field(default_factory=dict)
    served: tuple[str, ...] = ()
    reason: str = ""

    @property
    def exclusive(self) -> bool:
        return self.scheme == "exclusive"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "served": list(self.served)}

    def describe(self) -> str:
        sides = ", ".join(f"{side} {cores} (tp {self.tp[side]})" for side, cores in self.ranges.items())
        return f"{self.scheme} on {self.instance} ({self.logical_cores} logical NeuronCores): {sides}. {self.reason}"


def plan_cores(instance: str, logical_cores: int, tp: Mapping[str, int], served: tuple[str, ...] = ()) -> CorePlan:
    """The plan for the sides in ``tp`` (side -> tp degree, baseline first), ``served`` naming those that run
    a long-lived server. Raises CorePlanError where a side alone does not fit the instance."""
    if logical_cores < 1:
        raise CorePlanError(f"{instance}: {logical_cores} logical NeuronCores; a core plan needs at least one")
    for side, degree in tp.items():
        if degree > logical_cores:
            raise CorePlanError(f"the {side} needs tp {degree} NeuronCores; {instance} has {logical_cores} (give a "
                                f"smaller tp shape, or a larger instance)")
    total = sum(tp.values())
    if total <= logical_cores:
        ranges, start = {}, 0
        for side, degree in tp.items():
            ranges[side] = core_range(start, degree)
            start += degree
        return CorePlan(instance, logical_cores, "disjoint", ranges, dict(tp), served,
                        f"the sides' {total} cores fit the instance's {logical_cores}: a server keeps its own range "
                        "while the other side runs")
    ranges = {side: core_range(0, degree) for side, degree in tp.items()}
    if served:
        return CorePlan(instance, logical_cores, "exclusive", ranges, dict(tp), served,
                        f"the sides need {total} cores of {logical_cores}: the served side's server is stopped while "
                        "the other side holds the cores, and started again (a load) before its own turn")
    return CorePlan(instance, logical_cores, "sequential", ranges, dict(tp), served,
                    "no side is served: every process runs alone, one after the other")


class EnvironRewritten(OSError):
    """The process wrote over its environment area (``setproctitle`` does, to make room for a long title):
    ``/proc/PID/environ`` no longer holds its variables. ``SPT_NOENV=1`` stops setproctitle from doing so."""


def read_environ(pid: int, proc: Path = Path("/proc")) -> dict[str, str]:
    """A running process's environment as it was exec'ed (``/proc/PID/environ``): what it actually got,
    whatever the scripts between the caller and it did. Raises OSError when it cannot be read, and
    EnvironRewritten when the process wrote over it (an area of NULs or a title, no ``NAME=value``); an
    empty file is an empty environment."""
    raw = (proc / str(pid) / "environ").read_bytes()
    out = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.decode(errors="replace").partition("=")
        if sep and key:
            out[key] = value
    if raw and not out:
        raise EnvironRewritten(f"{proc / str(pid) / 'environ'} holds no NAME=value: the process wrote over it")
    return out


def check_range(who: str, environ: Mapping[str, str], planned: str | None, whole: bool = True) -> str | None:
    """Why ``who`` (a process whose environment is ``environ``) did not get its planned cores, or None.
    ``whole``: it must hold exactly the planned range (a server's first process, a perf round); else a
    subset is enough (a vLLM Neuron worker holds one core of its server's range), a core outside it never.
    The cores are read from whichever of NEURON_RT_VISIBLE_CORES / NEURON_VISIBLE_DEVICES the process got
    (``harness.core.neuron_visibility``: a server's plugin decides which)."""
    from harness.core.neuron_visibility import given_cores

    if planned is None:
        return None
    given = given_cores(environ)
    if given is None:
        return (f"{who} runs without {VISIBLE_CORES} or NEURON_VISIBLE_DEVICES (planned {planned}): it would take "
                "every NeuronCore")
    name, got = given
    try:
        cores = parse_cores(got)
    except ValueError as exc:
        return f"{who} runs with {name}={got}: {exc}"
    wanted = parse_cores(planned)
    if whole and cores != wanted:
        return f"{who} runs with {name}={got}, planned {planned}"
    if not cores <= wanted:
        outside = ",".join(map(str, sorted(cores - wanted)))
        return f"{who} runs with {name}={got}, planned {planned}: core(s) {outside} outside its range"
    return None


def neuron_ls_view(devices: list[dict[str, Any]], pids: set[int], planned: str, who: str
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """What ``neuron-ls -j`` (its per-device ``neuron_processes`` and ``neuroncore_ids``) says the processes
    ``pids`` hold: one record per (device, pid), and why one is on a device none of whose cores are in
    ``planned`` (the runtime's own view, beside each process's environment)."""
    wanted = parse_cores(planned)
    records, problems = [], []
    for device in devices:
        cores = [c for c in device.get("neuroncore_ids") or [] if isinstance(c, int)]
        for entry in device.get("neuron_processes") or []:
            pid = entry.get("pid") if isinstance(entry, dict) else None
            if pid not in pids:
                continue
            records.append({"device": device.get("neuron_device"), "pid": pid, "neuroncore_ids": cores})
            if not set(cores) & wanted:
                problems.append(f"neuron-ls lists {who} process {pid} on Neuron device {device.get('neuron_device')} "
                                f"(cores {core_list(cores)}), none of them in its planned {planned}")
    return records, problems


def core_list(cores: list[int]) -> str:
    return ",".join(map(str, cores)) or "none listed"
