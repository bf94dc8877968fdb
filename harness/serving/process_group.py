"""A server's process group, stopped whole: vLLM's API server spawns its engine core (and that its
workers) in the API server's own session, and they are not this process's children, so that they are
gone is read from /proc, not waited for."""

from __future__ import annotations

import os
import time
from pathlib import Path


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies hold no CPU and are left out), read from
    /proc; without /proc, ``[pgid]`` while the group can be signalled at all."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").is_file():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while listed
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]  # after "pid (comm) "
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def wait_for_group(pgid: int, timeout_s: float) -> list[int]:
    """Until no live process is left in group ``pgid`` (they are not this process's children, so they
    are polled), or ``timeout_s``; the ones left."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
