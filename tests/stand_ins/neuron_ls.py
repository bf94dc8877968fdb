"""STAND-IN for ``neuron-ls --json-output`` (aws-neuronx-tools) on a host with no Neuron device: the device
list of ``fixtures/neuron_ls/<instance>.json`` (the published format), each device's ``neuron_processes``
filled as the runtime would place them: every live process whose environment names NeuronCores
(NEURON_RT_VISIBLE_CORES, or NEURON_VISIBLE_DEVICES) is listed on each device holding one of those cores.
Only a process whose environment has ``STANDIN_NEURON_LS=1`` is listed (the test's own servers, never the
machine's other processes); ``STANDIN_NEURON_LS_CORES`` in its environment stands for cores the runtime gave it
that its exec-time environment does not show (a 2.32+ worker sets its own core in-process). Usage: python neuron_ls.py --json-output   (env: STANDIN_INSTANCE, default
trn2.48xlarge)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "neuron_ls"


def cores_of(value: str) -> set[int]:
    cores: set[int] = set()
    for part in value.split(","):
        low, sep, high = part.strip().partition("-")
        cores.update(range(int(low), int(high) + 1) if sep else {int(low)})
    return cores


def holders() -> dict[int, tuple[set[int], str]]:
    """pid -> (the cores its environment names, its command line), for the processes marked for the stand-in."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = dict(e.split("=", 1) for e in (entry / "environ").read_bytes().decode(errors="replace")
                           .split("\0") if "=" in e)
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        value = (environ.get("STANDIN_NEURON_LS_CORES") or environ.get("NEURON_RT_VISIBLE_CORES")
                 or environ.get("NEURON_VISIBLE_DEVICES"))
        if environ.get("STANDIN_NEURON_LS") == "1" and value:
            out[int(entry.name)] = (cores_of(value), command)
    return out


def main() -> int:
    if "--json-output" not in sys.argv[1:] and "-j" not in sys.argv[1:]:
        print("neuron-ls stand-in: only --json-output", file=sys.stderr)
        return 2
    devices = json.loads((FIXTURES / f"{os.environ.get('STANDIN_INSTANCE', 'trn2.48xlarge')}.json").read_text())
    found = holders()
    for device in devices:
        ids = set(device.get("neuroncore_ids") or [])
        device["neuron_processes"] = [{"pid": pid, "command": command[:80], "neuron_runtime_version": "stand-in"}
                                      for pid, (cores, command) in sorted(found.items()) if cores & ids]
    print(json.dumps(devices, indent=4))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
