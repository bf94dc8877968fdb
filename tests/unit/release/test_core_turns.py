"""A release check's NeuronCore turns (``harness.release.cores``) where the sides cannot hold their cores at
once, as on a trn2.3xlarge: before the other side's turn the served side's server is stopped, its whole
process group gone (a paused server keeps its cores), and before its own turn it is started again, and each
start's process is read back for its NEURON_RT_VISIBLE_CORES. The servers here are stand-ins that answer
``/v1/models`` (tests/stand_ins/server.py): what starts, stops and reads them back is what is tested."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.release.cores import ExclusiveFocus
from harness.release.errors import ReleaseCheckError
from harness.serving.process_group import group_members
from harness.serving.server import VLLMServer
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

STAND_IN = REPO / "tests" / "stand_ins" / "server.py"


@dataclass
class StandIn(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, str(STAND_IN), str(self.port), self.served_model]


def server(tmp_path: Path, cores: str) -> StandIn:
    s = StandIn(Path("/unused"), None, tmp_path / "server.log", "carbon-tiny", env={"NEURON_RT_VISIBLE_CORES": cores})
    s.port = 0
    return s


def turns(servers: dict, planned: dict) -> ExclusiveFocus:
    return ExclusiveFocus(servers, lambda name, s: s.wait_ready(60), planned, lambda message: None)


def test_the_served_side_is_stopped_for_the_other_sides_turn_and_started_for_its_own(tmp_path):
    import time

    candidate = server(tmp_path, "0-3")
    readied, said = [], []
    t0 = time.monotonic()
    focus = ExclusiveFocus({"candidate": candidate}, lambda name, s: (readied.append(name), s.wait_ready(60)),
                           {"baseline": "0-3", "candidate": "0-3"}, said.append)
    try:
        focus("baseline")  # the baseline's conformance: nothing runs yet
        assert candidate.proc is None
        focus("candidate")
        first = candidate.proc.pid
        assert focus.read_backs[0]["NEURON_RT_VISIBLE_CORES"] == "0-3" and focus.read_backs[0]["pid"] == first
        assert (focus.read_backs[0]["who"], focus.read_backs[0]["planned"]) == ("candidate", "0-3")
        port = candidate.port
        focus("baseline")
        assert candidate.proc.poll() is not None and group_members(first) == []  # its cores are free
        focus("candidate")
        assert candidate.proc.pid != first and candidate.port == port  # the same endpoint for the client
        focus("candidate")  # already running: left as it is
        assert [(e["server"], e["action"]) for e in focus.events] == [("candidate", "start"), ("candidate", "stop"),
                                                                       ("candidate", "start")]
        assert focus.events[1]["for"] == "baseline" and len(focus.read_backs) == 2
        # each start and stop timed from the turns' own start, in tenths of a second; the first start kept
        elapsed = time.monotonic() - t0
        assert [sorted(e) for e in focus.events] == [["action", "at_s", "server", "took_s"],
                                                     ["action", "at_s", "for", "server", "took_s"],
                                                     ["action", "at_s", "server", "took_s"]]
        for e in focus.events:
            assert all(isinstance(e[k], float) and 0 <= e[k] <= elapsed + 0.1 and round(e[k], 1) == e[k]
                       for k in ("at_s", "took_s")), e
        assert focus.events[0]["at_s"] <= focus.events[1]["at_s"] <= focus.events[2]["at_s"]
        assert list(focus.starts) == ["candidate"] and round(focus.starts["candidate"], 1) == focus.events[0]["took_s"]
        assert readied == ["candidate", "candidate"]
        assert said == [f"candidate: starting its vLLM server again (pid {first}): the other side's turn is over",
                        f"candidate: starting its vLLM server again (pid {candidate.proc.pid}): the other side's "
                        "turn is over"]
    finally:
        candidate.stop()


def test_a_server_outside_its_planned_cores_stops_the_check(tmp_path):
    candidate = server(tmp_path, "4-7")
    focus = turns({"candidate": candidate}, {"baseline": "0-3", "candidate": "0-3"})
    with pytest.raises(ReleaseCheckError, match="NEURON_RT_VISIBLE_CORES=4-7, planned 0-3") as caught:
        focus("candidate")
    assert candidate.proc.poll() is not None
    assert str(caught.value).startswith(f"the candidate's server process {candidate.proc.pid}")  # named


def test_a_servers_first_process_must_hold_its_whole_range_and_a_process_gone_since_listed_is_recorded(
        tmp_path, monkeypatch):
    """The API server (the group's first process) holding part of its planned range is refused, as a worker's
    part is not; a process whose environment cannot be read (gone since listed, or its environment area
    rewritten: EnvironRewritten, the reader's own error) is recorded as unreadable and the rest still read."""
    import harness.release.cores as cores
    from harness.core.neuron_cores import EnvironRewritten
    from harness.release.cores import read_back

    part = StandIn(Path("/unused"), None, tmp_path / "part.log", "carbon-tiny", env={"NEURON_RT_VISIBLE_CORES": "4-5"})
    part.port = 0
    try:
        part.start().wait_ready(60)
        with pytest.raises(ReleaseCheckError, match=f"^the candidate's server process {part.proc.pid}"):
            read_back("candidate", part, "4-7", neuron_ls=None)
    finally:
        part.stop()
    s = StandIn(Path("/unused"), None, tmp_path / "server.log", "carbon-tiny",
                env={"NEURON_RT_VISIBLE_CORES": "4-7", "STANDIN_WORKER_CORES": "5"})
    s.port = 0
    real = cores.read_environ
    try:
        s.start().wait_ready(60)
        members = sorted(set(group_members(s.proc.pid)) | {s.proc.pid})
        assert len(members) == 2

        def rewritten(pid):
            if pid == members[0]:
                raise EnvironRewritten(f"/proc/{pid}/environ: rewritten")
            return real(pid)

        monkeypatch.setattr(cores, "read_environ", rewritten)
        records = read_back("candidate", s, "4-7", neuron_ls=None)
        assert records[0] == {"who": "candidate", "pid": members[0], "unreadable": f"/proc/{members[0]}/environ: "
                                                                                 "rewritten"}
        assert [(r["who"], r["pid"], r["planned"]) for r in records[1:]] == [("candidate", members[1], "4-7")]
        assert {"chosen_by", "preflight", "skip_efa_affinity", "libnrt"} <= set(records[1])
    finally:
        s.stop()


def test_a_server_started_for_its_turn_is_warmed_running_on_every_turn_of_its_own(tmp_path):
    """The served warm-up after each resume (``harness.release.run.warming``) holds for a server the turns start
    again: it is warmed once running, before each of its side's turns, and never for the other side's."""
    candidate = server(tmp_path, "0-3")
    warmed: list[tuple[str, bool]] = []
    focus = ExclusiveFocus({"candidate": candidate}, lambda name, s: s.wait_ready(60), {"candidate": "0-3"},
                           lambda message: None, lambda name: warmed.append((name, candidate.proc.poll() is None)))
    try:
        for side in ("baseline", "candidate", "baseline", "candidate", "candidate"):
            focus(side)
        assert warmed == [("candidate", True)] * 3
        assert [e["action"] for e in focus.events] == ["start", "stop", "start"]
    finally:
        candidate.stop()


NEURON_LS = REPO / "tests" / "stand_ins" / "neuron_ls.py"


def neuron_ls(tmp_path: Path) -> Path:
    """The neuron-ls stand-in as an executable (what ``neuron_ls_path`` finds on a Trn2 host)."""
    exe = tmp_path / "neuron-ls"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {NEURON_LS} \"$@\"\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize("runtime_cores, problem", [(None, None), ("8-11", "on Neuron device 2 (cores 8,9,10,11), "
                                                                             "none of them in its planned 4-7")])
def test_neuron_ls_sees_each_server_process_where_the_runtime_put_it(tmp_path, runtime_cores, problem):
    """The read-back reads neuron-ls's view beside each process's environment: a server the runtime placed on
    the planned cores' device passes; one it placed elsewhere (what an environment set in-process hides from
    /proc/PID/environ) stops the check, named by neuron-ls."""
    from harness.release.cores import read_back

    env = {"NEURON_VISIBLE_DEVICES": "4-7", "STANDIN_NEURON_LS": "1",
           **({"STANDIN_NEURON_LS_CORES": runtime_cores} if runtime_cores else {})}
    s = StandIn(Path("/unused"), None, tmp_path / "server.log", "carbon-tiny", env=env)
    s.port = 0
    try:
        s.start().wait_ready(60)
        if problem is None:
            records = read_back("candidate", s, "4-7", neuron_ls=neuron_ls(tmp_path))
            seen = [r["neuron_ls"] for r in records if "neuron_ls" in r]
            assert seen == [{"device": 1, "pid": s.proc.pid, "neuroncore_ids": [4, 5, 6, 7]}]
            assert {r["who"] for r in records} == {"candidate"}  # neuron-ls's records name the side too
        else:
            with pytest.raises(ReleaseCheckError, match=re.escape(problem)):
                read_back("candidate", s, "4-7", neuron_ls=neuron_ls(tmp_path))
            assert s.proc.poll() is not None  # stopped: it would hold the other side's cores
    finally:
        s.stop()


@pytest.mark.parametrize("worker, problem", [("5", None), ("8", "core(s) 8 outside its range")])
def test_every_process_of_the_servers_group_is_read_back_not_only_its_first(tmp_path, worker, problem):
    """A TP worker may hold a part of its server's range (a 2.32+ worker takes one core), never a core outside
    it: the worker, not the API server, is what holds the other side's core here."""
    from harness.release.cores import read_back

    s = StandIn(Path("/unused"), None, tmp_path / "server.log", "carbon-tiny",
                env={"NEURON_VISIBLE_DEVICES": "4-7", "STANDIN_WORKER_CORES": worker})
    s.port = 0
    try:
        s.start().wait_ready(60)
        if problem is None:
            records = read_back("candidate", s, "4-7", neuron_ls=None)
            assert sorted(r["cores"] for r in records if "pid" in r) == ["4-7", "5"], records  # each process
        else:
            with pytest.raises(ReleaseCheckError, match=re.escape(problem)) as caught:
                read_back("candidate", s, "4-7", neuron_ls=None)
            assert f"process {s.proc.pid}:" not in str(caught.value)  # the worker's pid, not the API server's
    finally:
        s.stop()


def test_each_start_and_stop_is_kept_in_tenths_of_a_second(monkeypatch):
    """verdict.json's core turns give each start and stop's wall time in tenths (what docs and the verdict's
    table print), whatever the clock's own resolution: a clock that moves 0.0437 s a reading."""
    import harness.release.cores as cores
    from types import SimpleNamespace

    clock = iter(0.0437 * k for k in range(100))
    monkeypatch.setattr(cores, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(cores, "read_back", lambda *a, **k: [])

    class Server:
        def __init__(self, running: bool) -> None:
            self.proc = SimpleNamespace(pid=1, poll=lambda: None if self.up else 0)
            self.up = running

        def start(self):
            self.up = True

        def stop(self):
            self.up = False

    focus = cores.ExclusiveFocus({"baseline": Server(True), "candidate": Server(False)}, lambda n, s: None,
                                 {}, lambda m: None)
    focus("candidate")
    assert [(e["action"], e["took_s"]) for e in focus.events] == [("stop", 0.0), ("start", 0.0)]
    assert focus.starts == {"candidate": pytest.approx(0.0437)}
