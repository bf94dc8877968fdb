"""Each 2.32+ vLLM Neuron worker's NeuronCore, read from its server's log, checked against the plan; and what the
``/proc`` read-back of a server's processes proves.

What ``/proc/PID/environ`` shows is the environment a process was started with: a 2.32+ worker sets
``NEURON_RT_VISIBLE_CORES`` to its own core in its own process after exec (``vllm_neuron/vllm/worker/
neuron_worker.py`` in the public fork jinhuang12/vllm-neuron at 44a17b6ff476626879662307db4b698df8a6da47,
``_init_neuron_distributed_environment_and_runtime``: ``visible_devices[self.local_rank]``, where
``visible_devices`` is ``NEURON_VISIBLE_DEVICES`` parsed in order by ``parse_range_list``), so every process of
the group still shows the whole range: the read-back proves the range handed to the server (``PROVES``), no more.

The plugin logs no worker's core. It logs each worker it starts, at INFO, from ``NeuronWorker.__init__``
("Initialized NeuronWorker with rank %s, local_rank %s"), and a worker's core follows from its local rank and
the range it was handed, by the rule above. So each worker the log names is given that core and checked against
the planned range; a log that names none (the NxDI-based plugin, whose single-process executor has no such
workers; a log level above INFO) is said, not passed.
"""

from __future__ import annotations

import re
from typing import Any

PROVES = ("the /proc read-back proves the NeuronCore range handed to each server process (its environment at "
          "start), not each worker's cores: a 2.32+ worker sets NEURON_RT_VISIBLE_CORES in its own process after "
          "exec; each worker's core is read from the server log (its local rank in the range handed)")
WORKER_LINE = re.compile(r"Initialized NeuronWorker with rank (\d+), local_rank (\d+)")


def range_list(value: str) -> list[int]:
    """``parse_range_list`` (``vllm_neuron/utils/hardware_config.py`` at 0bae3e9c50d0): "4-7" -> [4, 5, 6, 7],
    "0,1,5" -> [0, 1, 5], in the order written."""
    out: list[int] = []
    for part in value.split(","):
        start, _, end = part.strip().partition("-")
        out.extend(range(int(start), int(end or start) + 1))
    return out


def worker_cores(who: str, log_text: str, handed: str, planned: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each worker ``log_text`` names, with the core the plugin gives it from ``handed`` (the server's
    ``NEURON_VISIBLE_DEVICES``), as read-back records; and the problems: a core outside ``planned``, a local rank
    past the range handed."""
    devices = range_list(handed)
    allowed = set(range_list(planned)) if planned else None
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    seen = sorted({(int(r), int(lr)) for r, lr in WORKER_LINE.findall(log_text)})
    for rank, local in seen:
        if local >= len(devices):
            problems.append(f"the {who}'s worker rank {rank} (local_rank {local}) has no core in NEURON_VISIBLE_DEVICES"
                            f"={handed}")
            continue
        core = devices[local]
        records.append({"who": who, "worker_rank": rank, "local_rank": local, "worker_core": core, "planned": planned})
        if allowed is not None and core not in allowed:
            problems.append(f"the {who}'s worker rank {rank} runs on NeuronCore {core} (local_rank {local} of "
                            f"NEURON_VISIBLE_DEVICES={handed}), planned {planned}")
    if not seen:
        records.append({"who": who, "worker_log": "no worker named in the server log (\"Initialized NeuronWorker\"): "
                                                  "each worker's core is not read"})
    return records, problems


def markdown(records: list[dict[str, Any]]) -> list[str]:
    """The verdict's lines: what the read-back proves, and each worker's core as the log gives it."""
    lines = [f"- {PROVES}"]
    for r in records:
        if "worker_core" in r:
            lines.append(f"- the {r['who']}'s worker rank {r['worker_rank']} (local_rank {r['local_rank']}): "
                         f"NeuronCore {r['worker_core']} (planned {r['planned']})")
        elif "worker_log" in r:
            lines.append(f"- the {r['who']}'s workers: {r['worker_log']}")
    return lines
