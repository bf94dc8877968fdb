"""A served release check's rounds (``harness.release.rounds.focus_on``, ``harness.release.served``): only
the side whose round it is runs, the other's server paused, and the running side's server gets its untimed
warm-up requests after it is resumed, before every round, so that no timed round finds it cold. The
servers here are real processes paused and resumed with real signals; the warm-up batch is the shape's
own, built from the real tokenizer."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.release.rounds import focus_on
from harness.release.served import warm_rows

pytestmark = pytest.mark.unit


@dataclass
class Process:
    """What ``focus`` reads of a server: its process (the leader of its own process group)."""

    proc: subprocess.Popen


def state(proc: subprocess.Popen) -> str:
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def settled(proc: subprocess.Popen, stopped: bool, within_s: float = 10.0) -> str:
    """The process's state once a signal sent to it has landed: "T" (stopped) or not, polled until it
    reads as expected or ``within_s`` passes (a signal lands asynchronously)."""
    deadline = time.monotonic() + within_s
    while (state(proc) == "T") != stopped and time.monotonic() < deadline:
        os.sched_yield()
    return "stopped" if state(proc) == "T" else "running"


@pytest.fixture
def servers():
    started = {name: Process(subprocess.Popen(["sleep", "600"], start_new_session=True))
               for name in ("baseline", "candidate")}
    yield started
    for server in started.values():
        server.proc.kill()
        server.proc.wait(timeout=10)


def test_each_round_warms_its_own_server_after_resuming_it_with_the_other_paused(servers):
    seen: list[tuple[str, str, str]] = []

    def warm(name: str) -> None:
        other = "candidate" if name == "baseline" else "baseline"
        states = {name: settled(servers[name].proc, stopped=False), other: settled(servers[other].proc, stopped=True)}
        seen.append((name, states["baseline"], states["candidate"]))

    focus = focus_on(servers, warm)
    for name in ("baseline", "candidate", "candidate", "baseline"):  # A B, then B A: as the pairs alternate
        focus(name)
    focus(None)
    running = {"baseline": ("running", "stopped"), "candidate": ("stopped", "running")}
    assert [name for name, *_ in seen] == ["baseline", "candidate", "candidate", "baseline"]
    assert all((b, c) == running[name] for name, b, c in seen), seen  # warmed while running, the other stopped
    assert {settled(s.proc, stopped=False) for s in servers.values()} == {"running"}  # focus(None): both, unwarmed
    assert len(seen) == 4


def test_no_server_started_means_nothing_to_pause_or_warm():
    calls = []
    focus_on({}, calls.append)("baseline")
    assert calls == []


def test_the_warm_up_batch_is_the_rounds_own(carbon_tiny_checkpoint):
    """What a perf round sends (tests/perf/test_latency.py::shape_batch): the shape's prompts, each row as
    the tokenizer gives it, and the shape's new tokens."""
    from harness.carbon.dna import shape_prompts
    from harness.carbon.tokenizer import CarbonTokenizer
    from harness.core.spec import get_shape

    tokenizer = CarbonTokenizer.from_checkpoint(carbon_tiny_checkpoint)
    batches = warm_rows(carbon_tiny_checkpoint, ("smoke", "a100-style-bs16"))
    for (rows, new), name in zip(batches, ("smoke", "a100-style-bs16")):
        shape = get_shape(name)
        assert new == shape.max_new_tokens and len(rows) == shape.batch_size
        assert rows == [tokenizer(p)["input_ids"] for p in shape_prompts(shape)]
