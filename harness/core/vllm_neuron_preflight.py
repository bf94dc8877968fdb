"""Before a vLLM Neuron server starts: the 2.32+ plugin's start rules run on the exact arguments and environment
the server is about to get, in the server's own interpreter, so that a server the plugin would stop (after a
weight load and a compile) stops in seconds, with the plugin's own message, in one line (exit 2).

Where the plugin is installed, its own functions decide, each taken from the installed package's file without
running the package's ``__init__`` (which starts the plugin's framework), and only where the file imports
nothing beyond the standard library (checked, with ``ast``, before it is loaded; so importing it starts
nothing):

- ``vllm_neuron/utils/bucket_utils.py``: ``get_max_num_batched_tokens``, ``resolve_segmented_prefill_config``
  (or ``validate_kv_segment_size_buckets`` where the server sets segment buckets, as the model runner does),
  ``validate_num_batched_tokens_buckets``, ``validate_num_seqs_buckets``;
- ``vllm_neuron/vllm/admission.py``: ``AdmissionPolicy.check`` under the ``SamplingAdmission`` that
  ``policy_from_config`` derives (its derivation is the harness's: ``policy_from_config`` imports the model
  package), on the request the harness will send (``vllm_neuron_rules.harness_requests``);
- ``vllm_neuron/utils/hardware_config.py``: ``get_efa_interface_from_bdf`` for each worker's device, on this
  host's own ``/sys``, unless ``NEURON_SKIP_EFA_AFFINITY`` skips it (the worker's condition).

The core variable is the worker's method (``NeuronWorker._get_visible_devices``, in a module that imports
vLLM and torch): the harness's rule judges it on either path. A file that is missing, or imports more than the
standard library, is judged by the harness's rule instead (``harness.core.vllm_neuron_rules``), and the
record says so; with no plugin installed (the CPU rehearsal) the harness's rules judge everything. Which ran
is printed to the server's log and travels in the server's environment (``PREFLIGHT_VARIABLE``), where a
release check reads it back with the NeuronCores (``harness.release.cores.read_back``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

from harness.core import vllm_neuron_rules as rules

PREFLIGHT_VARIABLE = "CARBON_VLLM_NEURON_PREFLIGHT"  # which ran, in the server's environment
NO_PLUGIN = "harness rules, no plugin installed"
# the plugin's files the preflight calls, relative to its package
PLUGIN_FILES = {"bucket_utils": "utils/bucket_utils.py", "admission": "vllm/admission.py",
                "hardware_config": "utils/hardware_config.py"}


@dataclass(frozen=True)
class Verdict:
    """What ran (``ran``: the plugin, its version and path, or the harness's rules) and what it refused
    (``(rule, message)`` pairs, each message the plugin's own); ``notes``: what was judged by the harness's
    rule on the plugin's path, and what the contract does about a refusal it works around."""

    ran: str
    refusals: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.refusals

    def line(self) -> str:
        if self.refusals:
            rule, message = self.refusals[0]
            more = f" (and {len(self.refusals) - 1} more refusal(s))" if len(self.refusals) > 1 else ""
            return f"the vLLM Neuron plugin would stop this server ({rule}; {self.ran}): {message}{more}"
        return f"vLLM Neuron start rules passed ({self.ran}){''.join(f'; {n}' for n in self.notes)}"


def pure_imports(source: str) -> bool:
    """True where a module's top-level imports are the standard library's only (``__future__`` included):
    executing it starts nothing of the plugin's, vLLM's or torch's."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return False
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] not in sys.stdlib_module_names for name in names):
            return False
    return True


def load_pure(path: Path, name: str) -> ModuleType | None:
    """The module at ``path``, executed under a private name (the plugin's package is not imported), or
    None where it is missing or imports more than the standard library."""
    if not path.is_file() or not pure_imports(path.read_text()):
        return None
    private = f"_carbon_preflight_{name}"
    spec = importlib.util.spec_from_file_location(private, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module  # dataclasses resolve their module while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(private, None)
    return module


def plugin_description(package: Path) -> str:
    """``plugin vllm_neuron VERSION at PATH`` (the distribution that installs it, where it is not vllm-neuron)."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    names = packages_distributions().get("vllm_neuron", []) or ["vllm-neuron"]
    try:
        found = version(names[0])
    except PackageNotFoundError:
        found = "version unknown"
    dist = "" if names[0] == "vllm-neuron" else f" ({names[0]})"
    return f"plugin vllm_neuron {found}{dist} at {package}"


def is_2_32(package: Path, version: str | None) -> bool:
    """Whether the plugin at ``package`` is the 2.32+ generation: its platform class's variable (or release's,
    ``harness.core.neuron_visibility``), else, where neither can be read (a tree of the fork's deciding modules,
    without its platform file), its layout: 2.32+ keeps its vLLM integration under ``vllm_neuron/vllm/``."""
    from harness.core.neuron_visibility import PLATFORM_FILES, VISIBLE_DEVICES, plugin_visibility

    if version is None and not any((package / f).is_file() for f in PLATFORM_FILES):
        return (package / "vllm").is_dir()
    return plugin_visibility(package, version).variable == VISIBLE_DEVICES


def visible_cores(environ: Mapping[str, str], ranks: int) -> list[int]:
    """Each local rank's core: NEURON_VISIBLE_DEVICES (``parse_range_list``), else 0..ranks-1, as the
    worker takes them."""
    value = environ.get("NEURON_VISIBLE_DEVICES")
    if not value:
        return list(range(ranks))
    cores: list[int] = []
    for part in value.split(","):
        low, _, high = part.strip().partition("-")
        cores += list(range(int(low), int(high or low) + 1))
    return cores[:ranks] or [0]


def efa_interfaces(bdf: str, host_root: Path) -> list[str] | None:
    """This host's ``/sys/bus/pci/devices/<bdf>/infiniband`` (under ``host_root``), None where it is absent."""
    try:
        return sorted(os.listdir(host_root / "sys/bus/pci/devices" / bdf / "infiniband"))
    except FileNotFoundError:
        return None


def _caught(call) -> str | None:
    try:
        call()
    except (ValueError, RuntimeError, IndexError) as exc:
        return str(exc)
    return None


def _tp(args: Sequence[str], environ: Mapping[str, str]) -> int:
    # a CPU rehearsal runs tp 1 and says the device's in CARBON_REHEARSED_TP (harness.core.vllm_neuron)
    if "CARBON_REHEARSED_TP" in environ:
        return int(environ["CARBON_REHEARSED_TP"])
    return rules._int_flag(args, "--tensor-parallel-size", 1)


def preflight(args: Sequence[str], environ: Mapping[str, str], package: Path | None,
              host_root: Path = Path("/")) -> Verdict:
    """The start rules on a server's arguments (``args``: what follows the interpreter, or ``ServeCommand.args``)
    and environment, by the plugin at ``package`` where its files allow, else by the harness's rules."""
    from harness.core.neuron_visibility import plugin_version

    settings = rules.engine_settings(args)
    ran = plugin_description(package) if package else NO_PLUGIN
    if package is not None and not is_2_32(package, plugin_version()):
        return Verdict(f"{ran}: the NxDI-based plugin, whose start rules are not the 2.32+ plugin's (none run)")
    modules = {name: load_pure(package / rel, name) for name, rel in PLUGIN_FILES.items()} if package else {}
    by_harness = [name for name in PLUGIN_FILES if package and modules.get(name) is None]
    refusals: list[tuple[str, str]] = []
    notes = ["core variable: harness rule (the worker's _get_visible_devices imports vLLM and torch)"] if package \
        else []
    if by_harness:
        notes.append(f"harness rules for {', '.join(by_harness)} (file missing, or it imports beyond the standard "
                     f"library)")

    def add(rule: str, message: str | None) -> None:
        if message:
            refusals.append((rule, message))

    if package is not None:  # without a plugin the NeuronCores go in the runtime's own variable (neuron_visibility)
        add("core variable", rules.core_variable_refusal(environ))
    buckets = modules.get("bucket_utils")
    add("prefill size", _plugin_prefill(buckets, settings) if buckets else rules.prefill_refusal(settings))
    hardware = modules.get("hardware_config")
    if not rules.skips_efa(environ):
        for bdf in dict.fromkeys(rules.efa_bdf(core) for core in visible_cores(environ, _tp(args, environ))):
            found = _caught(lambda bdf=bdf: hardware.get_efa_interface_from_bdf(bdf)) if hardware else \
                rules.efa_refusal(environ, bdf, efa_interfaces(bdf, host_root))
            if found:
                add("EFA", found)
                break
    admission = modules.get("admission")
    asked = rules.harness_requests(settings)
    add("admission of log-probabilities", _plugin_admission(admission, settings, asked) if admission
        else rules.admission_refusal(settings, asked))
    prompt = rules.Asked(prompt_logprobs=1)
    prompt_refused = _plugin_admission(admission, settings, prompt) if admission \
        else rules.admission_refusal(settings, prompt)
    if asked.logprobs is not None and prompt_refused:
        notes.append("prompt logprobs refused by the server: the contract scores each prompt position by a "
                     "one-token request on its prefix")
    return Verdict(ran, tuple(refusals), tuple(notes))


def _plugin_prefill(bu: ModuleType, settings: rules.EngineSettings) -> str | None:
    """The model runner's bucket resolution (``neuron_model_runner.py``), on the plugin's own functions."""
    config = settings.neuron_config

    def resolve() -> None:
        tokens = bu.get_max_num_batched_tokens(settings.max_num_batched_tokens, settings.max_model_len)
        if "kv_segment_size_buckets" in config:
            bu.validate_kv_segment_size_buckets(config["kv_segment_size_buckets"],
                                                config.get("num_batched_tokens_buckets"))
        else:
            bu.resolve_segmented_prefill_config(tokens, settings.max_model_len)
        if "num_batched_tokens_buckets" in config:
            bu.validate_num_batched_tokens_buckets(config["num_batched_tokens_buckets"], tokens)
        if "num_seqs_buckets" in config:
            bu.validate_num_seqs_buckets(config["num_seqs_buckets"], settings.max_num_seqs)

    return _caught(resolve)


def _plugin_admission(adm: ModuleType, settings: rules.EngineSettings, asked: rules.Asked) -> str | None:
    """``AdmissionPolicy.check`` of a greedy request asking ``asked``, under ``policy_from_config``'s policy."""
    if rules.samples_on_device(settings.neuron_config):
        sampler = settings.neuron_config.get("on_device_sampling_config") or {}
        sampling = adm.SamplingAdmission(all_greedy=bool(sampler.get("all_greedy", False)),
                                         logprobs=not settings.async_scheduling, prompt_logprobs=False)
    else:
        sampling = adm.SamplingAdmission()
    params = SimpleNamespace(logprobs=asked.logprobs, prompt_logprobs=asked.prompt_logprobs,
                             logprob_token_ids=[0] if asked.logprob_token_ids else None, temperature=0.0, top_k=0,
                             top_p=1.0, min_p=0.0, seed=None, n=1)
    return _caught(lambda: adm.AdmissionPolicy(prompt=None, sampling=sampling).check(None, params))


def installed_package() -> Path | None:
    from harness.core.neuron_visibility import plugin_dir

    return plugin_dir()


def checked(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with what ran recorded, once the server about to run as ``argv`` (interpreter, ``-m``,
    module, arguments) passes this interpreter's plugin's start rules; otherwise one line on stderr and exit
    2, before anything starts."""
    args = list(argv[3:]) if len(argv) > 2 and argv[1] == "-m" else list(argv[1:])
    try:
        verdict = preflight(args, environ, installed_package())
    except ValueError as exc:
        print(f"vllm-serve: error: the vLLM Neuron start rules could not read the server's arguments: {exc}",
              file=sys.stderr)
        raise SystemExit(2) from None
    if not verdict.passed:
        print(f"vllm-serve: error: {verdict.line()}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    print(f"carbon-harness vllm-serve: {verdict.line()}", file=sys.stderr, flush=True)
    return {**environ, PREFLIGHT_VARIABLE: verdict.ran}


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.core.vllm_neuron_preflight ARGS...``: the verdict on a server's arguments (those after
    ``-m vllm.entrypoints.openai.api_server``) in this environment, as one JSON line; exit 2 on a refusal."""
    args = sys.argv[1:] if argv is None else argv
    try:
        verdict = preflight(args, os.environ, installed_package())
    except ValueError as exc:
        print(f"vllm-neuron preflight: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"ran": verdict.ran, "passed": verdict.passed, "refusals": [list(r) for r in verdict.refusals],
                      "notes": list(verdict.notes), "line": verdict.line()}))
    return 0 if verdict.passed else 2


if __name__ == "__main__":
    sys.exit(main())
