"""Free loopback ports for what the harness starts on this machine: NxDI's CPU mode (a one-process
gloo group on MASTER_PORT, default 29500, which two xdist workers would otherwise both bind) and
the vLLM servers the serving tests start."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the kernel reports free on ``host`` (loopback by default)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
