"""What each pytest-xdist worker takes of the host: its own NeuronCores on a multi-chip host, and
its share of the CPUs for torch's threads."""

from __future__ import annotations

import os

from harness.core.hardware import get_profile
from harness.session.config import HarnessConfig


def assign_worker_cores(config: HarnessConfig, worker_id: str) -> str | None:
    """On a multi-chip host each pytest-xdist worker takes a disjoint NeuronCore range, set in
    NEURON_RT_VISIBLE_CORES before the runtime starts; returns the range (None if not asked)."""
    if not config.cores_per_worker:
        return None
    from harness.backends.neuron.host import visible_cores

    total = get_profile(config.hardware_name).logical_cores
    if not total:
        raise ValueError(f"--carbon-cores-per-worker needs a hardware profile with logical_cores; "
                         f"{config.hardware_name!r} has none (pass --carbon-hardware trn2.48xlarge)")
    cores = visible_cores(worker_id, config.cores_per_worker, total)
    os.environ["NEURON_RT_VISIBLE_CORES"] = cores
    return cores


def worker_cpu_threads(cpus: int, workers: int) -> int:
    """CPU threads per pytest-xdist worker: the machine's CPUs shared out, at least one each."""
    if cpus < 1 or workers < 1:
        raise ValueError(f"cpus={cpus} and workers={workers} must be at least 1")
    return max(1, cpus // workers)


def limit_worker_threads(environ: dict[str, str] | None = None) -> int | None:
    """In a pytest-xdist worker, cap torch's intra-op threads (and OMP_NUM_THREADS, for what the
    worker starts) at this worker's share of the CPUs; returns the cap (None outside xdist, or where
    the user set OMP_NUM_THREADS).

    Why: each worker's torch otherwise starts one OpenMP thread per CPU, so ``-n 2`` on 2 CPUs runs 4
    spinning threads on 2 cores: the smoke CTE ranged from 13 to 244 ms (3.2-3.4 ms with one thread
    each), and a 24 ms speculative run took 0.3-0.8 s next to a busy neighbour."""
    env = os.environ if environ is None else environ
    workers = env.get("PYTEST_XDIST_WORKER_COUNT")
    if not env.get("PYTEST_XDIST_WORKER") or not workers or env.get("OMP_NUM_THREADS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = worker_cpu_threads(cpus, int(workers))
    env["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    return threads
