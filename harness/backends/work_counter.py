"""Counting the work of engine steps, outside every timed call: Python calls by function (``sys.setprofile``
on the calling thread: each ``call`` of Python code and each ``c_call`` of a builtin), aten ops by name and the
bytes their outputs take (a ``TorchDispatchMode``: every op torch dispatches, on any backend that runs torch
on the host), and user-space instructions where the host exposes a PMU (``perf_event_open``; on a VM without
hardware counters, none, and the record says why). Profiling slows what it counts several-fold, so it runs
only in its own untimed pass (``count_steps``) after a benchmark's timed rounds.

The counts are exact and the same in every process for the same code and inputs; ``harness.core.work``
compares them.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.core.work import WorkCount, per_step


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's protocol)
        out = func(*args, **(kwargs or {}))
        self.ops[str(func.overloadpacket.__name__)] += 1
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.bytes += t.numel() * t.element_size()
        return out


def _function(frame: Any, event: str, arg: Any) -> str:
    if event == "c_call":
        owner = getattr(arg, "__self__", None)
        module = getattr(arg, "__module__", None) or type(owner).__module__ if owner is not None else None
        return f"{module or 'builtins'}.{getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}"
    code = frame.f_code
    return f"{frame.f_globals.get('__name__', '?')}.{getattr(code, 'co_qualname', code.co_name)}"


class _CallCounter:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.calls[_function(frame, event, arg)] += 1


# perf_event_open (linux/perf_event.h): a user-space instruction counter for this thread
_PERF_TYPE_HARDWARE, _PERF_COUNT_HW_INSTRUCTIONS = 0, 1
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_PERF_IOC_ENABLE, _PERF_IOC_DISABLE = 0x2400, 0x2401


class _PerfAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


def instruction_counter() -> tuple[int | None, str]:
    """A file descriptor counting this thread's user-space instructions (disabled), or None and why not."""
    number = _SYS_PERF_EVENT_OPEN.get(os.uname().machine)
    if number is None or not sys.platform.startswith("linux"):
        return None, f"no perf_event_open on {sys.platform}/{os.uname().machine}"
    attr = _PerfAttr(type=_PERF_TYPE_HARDWARE, size=ctypes.sizeof(_PerfAttr), config=_PERF_COUNT_HW_INSTRUCTIONS)
    attr.flags = 1 | (1 << 5) | (1 << 6)  # disabled, exclude_kernel, exclude_hv
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(number, ctypes.byref(attr), 0, -1, -1, 0)
    if fd < 0:
        err = ctypes.get_errno()
        return None, f"this host exposes no instruction counter (perf_event_open: {os.strerror(err)})"
    return fd, ""


def count_steps(step: Callable[[], Any], steps: int = 3, setup: Callable[[], Any] | None = None) -> WorkCount:
    """The work of ``steps`` calls of ``step``, per step; ``setup`` runs before each, uncounted (a decode
    round's re-prefill at a generation's end). Two passes of ``steps`` each: Python calls (and instructions)
    with nothing else active, then aten ops and bytes under the dispatch mode, which routes every op through
    Python and would otherwise add its own calls to the count. Restores whatever profile hook was set."""
    if steps < 1:
        raise ValueError(f"steps={steps}: count at least one step")
    calls, ops = _CallCounter(), _OpCounter()
    fd, why = instruction_counter()
    libc = ctypes.CDLL(None, use_errno=True) if fd is not None else None
    previous = sys.getprofile()
    try:
        for _ in range(steps):
            if setup is not None:
                setup()
            if libc is not None:
                libc.ioctl(fd, _PERF_IOC_ENABLE, 0)
            sys.setprofile(calls)
            try:
                step()
            finally:
                sys.setprofile(previous)
                if libc is not None:
                    libc.ioctl(fd, _PERF_IOC_DISABLE, 0)
        instructions = None
        if fd is not None:
            instructions = int.from_bytes(os.read(fd, 8), sys.byteorder) / steps
    finally:
        if fd is not None:
            os.close(fd)
    for _ in range(steps):
        if setup is not None:
            setup()
        with ops:
            step()
    calls.calls.pop("sys.setprofile", None)  # the counter's own switch-off, once a step
    return WorkCount(steps, sum(calls.calls.values()) / steps, per_step(calls.calls, steps),
                     sum(ops.ops.values()) / steps, per_step(ops.ops, steps), ops.bytes / steps, instructions, why)
