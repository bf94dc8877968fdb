"""A release check's NeuronCores on a Trn2 host: the plan (``harness.core.neuron_cores``) applied to its
processes, read back from them, and, where the sides cannot hold their cores at once, the served side's
server stopped and started around the other side's turns.

Each side's tp degree is the largest of the check's shapes'; a side is "served" when the check starts its
server (a team's own server at ``--*-endpoint`` keeps whatever cores it was started with: the check can
neither move nor stop it, so such a side needs the disjoint scheme). What every process got is read back:
a server's from ``/proc/PID/environ`` of each process of its group (its API server, engine core and
workers), at each start; a neuron side's from each perf round's run manifest (``neuron_rt_visible_cores``,
the process's own environment). A server that runs outside its planned range stops the check.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.core.device_context import process_libnrt
from harness.core.neuron_cores import VISIBLE_CORES, CorePlan, check_range, plan_cores, read_environ
from harness.core.spec import get_shape
from harness.release.errors import ReleaseCheckError
from harness.release.plan import CheckPlan, Side


def decide(plan: CheckPlan, instance: str, logical_cores: int) -> tuple[CheckPlan, CorePlan]:
    """The plan with each side's range set (``Side.cores``), and the core plan that set them."""
    degree = max(get_shape(s).tp_degree for s in plan.shapes)
    sides = (plan.baseline, plan.candidate)
    served = tuple(s.name for s in sides if s.backend == "openai" and s.endpoint is None)
    device_sides = {s.name: degree for s in sides}
    try:
        cores = plan_cores(instance, logical_cores, device_sides, served)
    except ValueError as exc:
        raise ReleaseCheckError(str(exc)) from None
    team_servers = [s.name for s in sides if s.backend == "openai" and s.endpoint is not None]
    if cores.scheme != "disjoint" and team_servers:
        raise ReleaseCheckError(f"the {team_servers[0]}'s server at --{team_servers[0]}-endpoint holds its NeuronCores "
                                f"for the whole check, and {instance} has no room for both sides ({cores.reason}): "
                                f"let the check start it (--{team_servers[0]}-serve-script ci/scripts/vllm-serve.sh), "
                                "so it can be stopped while the other side runs")
    baseline, candidate = (replace(s, cores=cores.ranges[s.name]) for s in sides)
    return replace(plan, baseline=baseline, candidate=candidate, core_plan=cores), cores


def read_back(who: str, server: Any, planned: str | None, neuron_ls: Path | None | bool = True
              ) -> list[dict[str, Any]]:
    """What each process of ``server``'s group got: the variable its NeuronCores came in (the one its vLLM
    Neuron plugin honours: ``harness.core.neuron_visibility``), their range, what chose that variable, and
    the libnrt it loaded. The server's first process must hold exactly ``planned``; every other (the engine
    core, each TP worker) a subset of it. Where ``neuron-ls`` runs (``neuron_ls``: its path; True, found on
    this host; None, not asked), its view is read too: a process of the group that it lists on a device outside
    ``planned`` is one outside its cores. Raises ReleaseCheckError (the server stopped) when one runs outside
    ``planned``."""
    from harness.core.neuron_visibility import CHOSEN_SOURCE, VISIBLE_DEVICES, given_cores
    from harness.serving.process_group import group_members

    pid = server.proc.pid
    records = []
    for member in sorted(set(group_members(pid)) | {pid}):
        try:
            environ = read_environ(member)
        except OSError as exc:  # gone since listed, or its environment area rewritten (EnvironRewritten)
            records.append({"who": who, "pid": member, "unreadable": str(exc)})
            continue
        problem = check_range(f"the {who}'s server process {member}", environ, planned, whole=member == pid)
        variable, value = given_cores(environ) or (None, None)
        records.append({"who": who, "pid": member, "variable": variable, VISIBLE_CORES: environ.get(VISIBLE_CORES),
                        "cores": value, "planned": planned, "chosen_by": environ.get(CHOSEN_SOURCE),
                        "skip_efa_affinity": environ.get("NEURON_SKIP_EFA_AFFINITY"),  # harness.core.neuron_efa
                        "preflight": environ.get("CARBON_VLLM_NEURON_PREFLIGHT"),  # which start rules ran before it
                        "libnrt": process_libnrt(member).get("loaded")})
        if problem:
            server.stop()
            raise ReleaseCheckError(f"{problem}: a server outside its NeuronCores would take the other side's "
                                    f"(its log: {server.log_path})")
    handed = next((r["cores"] for r in records if r.get("pid") == pid and r.get("variable") == VISIBLE_DEVICES), None)
    if handed is not None:  # a 2.32+ server: each worker's core from its log (harness.release.worker_cores)
        from harness.release.worker_cores import worker_cores

        log = server.log_path.read_text(errors="replace") if server.log_path.is_file() else ""
        workers, problems = worker_cores(who, log, handed, planned)
        records += workers
        if problems:
            server.stop()
            raise ReleaseCheckError(f"{problems[0]}: a server outside its NeuronCores would take the other side's "
                                    f"(its log: {server.log_path})")
    if planned is not None:
        seen, problems = neuron_ls_read(who, {r["pid"] for r in records if "pid" in r}, planned, neuron_ls)
        records += seen
        if problems:
            server.stop()
            raise ReleaseCheckError(f"{problems[0]}: a server outside its NeuronCores would take the other side's "
                                    f"(its log: {server.log_path})")
    return records


def neuron_ls_read(who: str, pids: set[int], planned: str, neuron_ls: Path | None | bool
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """neuron-ls's view of ``pids`` (``harness.core.neuron_cores.neuron_ls_view``), as read-back records; none
    where neuron-ls is not on this host. One that cannot run is recorded, not fatal: the environments were read."""
    from harness.core.neuron_cores import neuron_ls_view
    from harness.core.neuron_host import NeuronHostError, neuron_ls_path, run_neuron_ls

    path = neuron_ls_path() if neuron_ls is True else neuron_ls or None
    if path is None:
        return [], []
    try:
        devices = run_neuron_ls(Path(path))
    except NeuronHostError as exc:
        return [{"who": who, "neuron_ls": str(exc)}], []
    seen, problems = neuron_ls_view(devices, pids, planned, f"the {who}'s server")
    return [{"who": who, "neuron_ls": entry} for entry in seen], problems


def round_read_back(out: Path, side: Side) -> list[str | None]:
    """The NEURON_RT_VISIBLE_CORES each of a side's perf rounds ran with, from its run manifest."""
    values = []
    for bench in sorted((out / side.name).glob("perf-round-*.json")):
        try:
            values.append(json.loads(bench.read_text()).get("carbon_harness", {}).get("neuron_rt_visible_cores"))
        except (OSError, ValueError, AttributeError):
            continue
    return values


class ExclusiveFocus:
    """``focus(side)`` where the sides cannot hold their cores at once: every other side's server is
    stopped (its processes gone: a paused one would keep its cores), and ``side``'s own started again
    (and waited for) if it is not running, then warmed (``warm(side)``: its untimed warm-up batches, as a
    resumed server gets them). ``focus(None)`` leaves them as they are (the check stops them). Every start
    and stop is timed and kept (``events``)."""

    def __init__(self, servers: dict[str, Any], ready: Callable[[str, Any], None],
                 planned: dict[str, str | None], progress: Callable[[str], None],
                 warm: Callable[[str], Any] | None = None) -> None:
        self.servers, self.ready, self.planned, self.progress = servers, ready, planned, progress
        self.warm = warm
        self.events: list[dict[str, Any]] = []
        self.read_backs: list[dict[str, Any]] = []
        self.starts: dict[str, float] = {}
        self._t0 = time.monotonic()

    def running(self, name: str) -> bool:
        server = self.servers[name]
        return server.proc is not None and server.proc.poll() is None

    def __call__(self, side: str | None) -> None:
        if side is None:
            return
        for name, server in self.servers.items():
            if name != side and self.running(name):
                t0 = time.monotonic()
                server.stop()
                self.events.append({"at_s": round(t0 - self._t0, 1), "server": name, "action": "stop",
                                    "for": side, "took_s": round(time.monotonic() - t0, 1)})
        if side in self.servers and not self.running(side):
            t0 = time.monotonic()
            server = self.servers[side]
            server.start()
            self.progress(f"{side}: starting its vLLM server again (pid {server.proc.pid}): the other side's turn "
                          "is over")
            self.ready(side, server)
            took = time.monotonic() - t0
            self.starts.setdefault(side, took)
            self.events.append({"at_s": round(t0 - self._t0, 1), "server": side, "action": "start",
                                "took_s": round(took, 1)})
            self.read_backs += read_back(side, server, self.planned.get(side))
        if side in self.servers and self.warm is not None:
            self.warm(side)


def record(plan: CheckPlan, cores: CorePlan | None, read_backs: list[dict[str, Any]],
           events: list[dict[str, Any]]) -> dict[str, Any]:
    """verdict.json's ``neuron_cores``: the plan, what each process got, the exclusive scheme's starts and
    stops; and the lines for verdict.md."""
    if cores is None:
        return {"plan": None, "why": "no Neuron instance named (--neuron-instance) or found (neuron-ls)"}
    rounds = {s.name: round_read_back(plan.out, s) for s in (plan.baseline, plan.candidate) if s.backend == "neuron"}
    wrong = [f"the {name}'s perf rounds ran with {VISIBLE_CORES}={sorted(set(map(str, got)))}, planned "
             f"{cores.ranges[name]}" for name, got in rounds.items() if got and set(got) != {cores.ranges[name]}]
    workers = [r for r in read_backs if "worker_core" in r or "worker_log" in r]  # harness.release.worker_cores
    return {"plan": cores.to_dict(), "servers": [r for r in read_backs if r not in workers], "workers": workers,
            "rounds": rounds, "events": events, "problems": wrong}


def markdown(neuron_cores: dict[str, Any]) -> list[str]:
    cores = neuron_cores.get("plan")
    if not cores:
        return []
    lines = ["### NeuronCores", "", f"{cores['scheme']} on {cores['instance']} ({cores['logical_cores']} logical "
             f"cores): " + ", ".join(f"{k} `{v}`" for k, v in cores["ranges"].items()) + f". {cores['reason']}.", ""]
    servers = neuron_cores.get("servers", [])
    workers = [r for r in servers if "worker_core" in r or "worker_log" in r] + neuron_cores.get("workers", [])
    for r in servers:
        if r in workers:  # worker_cores.markdown, below
            continue
        if "neuron_ls" in r:
            seen = r["neuron_ls"]
            lines.append(f"- neuron-ls: the {r['who']}'s server process {seen['pid']} on device {seen['device']} "
                         f"(cores {seen['neuroncore_ids']})" if isinstance(seen, dict) else f"- neuron-ls: {seen}")
            continue
        got = f"not readable ({r['unreadable']})" if "unreadable" in r else \
            f"{r.get('variable') or VISIBLE_CORES}={r.get('cores', r.get(VISIBLE_CORES))} (planned {r.get('planned')})"
        lines.append(f"- the {r['who']}'s server process {r['pid']}: {got}")
    if servers:
        from harness.release import worker_cores

        lines += worker_cores.markdown(workers)
    for name, got in neuron_cores.get("rounds", {}).items():
        lines.append(f"- the {name}'s perf rounds: {VISIBLE_CORES}={', '.join(sorted(set(map(str, got)))) or '-'}")
    efa = sorted({f"{r['who']}: NEURON_SKIP_EFA_AFFINITY={r.get('skip_efa_affinity') or 'unset'}"
                  for r in neuron_cores.get("servers", []) if "cores" in r})
    if efa:
        lines.append(f"- EFA affinity (a 2.32+ worker stops without an EFA device unless skipped): {', '.join(efa)}")
    chosen = sorted({r["chosen_by"] for r in neuron_cores.get("servers", []) if r.get("chosen_by")})
    lines += [f"- the server's NeuronCores variable chosen by {c}" for c in chosen]
    starts = [e for e in neuron_cores.get("events", []) if e["action"] == "start"]
    if starts:
        lines.append(f"- server starts for its turns: {len(starts)}, "
                     + ", ".join(f"{e['took_s']} s" for e in starts))
    lines += [f"- **{p}**" for p in neuron_cores.get("problems", [])]
    return lines + [""]
