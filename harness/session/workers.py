"""What each pytest-xdist worker takes of the host: its own NeuronCores on a multi-chip host, and
its share of the CPUs for torch's threads, and one thread where the model runs on this CPU."""

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


def model_runs_on_cpu(config: HarnessConfig) -> bool:
    """Whether torch in this process runs the model on this machine's CPU: hf on the cpu device, or
    NxDI's CPU mode (a served model runs in its server, a Trn2 one on the device)."""
    if config.backend == "neuron":
        return config.neuron_cpu
    if config.backend != "hf":
        return False
    from harness.backends.hf import resolve_device

    return resolve_device(config.device).type == "cpu"


def torch_thread_cap(config: HarnessConfig, environ: dict[str, str], cpus: int) -> int | None:
    """torch's intra-op threads for this process, or None to leave torch's own choice.

    Where the model runs on this CPU: ``--carbon-cpu-threads``, else one. Why one: a forward split over
    every core waits at each op for whichever thread lost its core to other work. On 2 CPUs beside a busy
    neighbour core, the smoke CTE p50 read 64-102 ms in test_cte and 101-197 ms in test_e2e with 2 threads
    (the issue's 21.8 against 243 ms in one run was this, not a difference between the two paths), and
    23-34 ms in both with one; quiet, 2 threads read 10.6 ms in both. A user's OMP_NUM_THREADS is kept.

    Elsewhere, in a pytest-xdist worker: its share of the CPUs (each worker's torch otherwise starts a
    thread per CPU, ``-n 2`` on 2 CPUs then runs 4 spinning threads on 2 cores)."""
    if config.cpu_threads:
        return config.cpu_threads
    if environ.get("OMP_NUM_THREADS"):
        return None
    if model_runs_on_cpu(config):
        return 1
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT")
    if environ.get("PYTEST_XDIST_WORKER") and workers:
        return worker_cpu_threads(cpus, int(workers))
    return None


def limit_torch_threads(config: HarnessConfig, environ: dict[str, str] | None = None) -> int | None:
    """Apply :func:`torch_thread_cap`; returns the cap (None where torch keeps its own). In an xdist
    worker OMP_NUM_THREADS is set too, for what the worker starts."""
    env = os.environ if environ is None else environ
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = torch_thread_cap(config, env, cpus)
    if threads is None:
        return None
    if env.get("PYTEST_XDIST_WORKER"):
        env["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    return threads
