"""Make NxDI importable on a CPU machine, for its own CPU mode (``on_cpu=True`` + ``to_cpu()``).

NxDI's Python sources import six packages that exist only in the Neuron pip repository
(``torch_xla``, ``torch_neuronx``, ``nki``, ``nkilib``, ``libneuronxla``, ``neuronxcc``): compiler,
runtime and kernel bindings that CPU mode never calls. This module stubs exactly those, and only
when they are not installed, so that everything else NxDI runs is its real code. The stubs are
named as stubs in the session header and the run manifest (``stubbed_packages``).

A stub answers only the names on its allow-list (``harness.backends.neuron.stub_allowlist``);
any other name or submodule, a subscript, an ``isinstance`` / ``issubclass`` it cannot decide, a
truth test or an iteration raises ``NeuronStubMissing``, naming it, so that NxDI code branching on
a Neuron-only helper cannot quietly take the path a stub happens to pick (see that class for why it
is not an ``AttributeError``). The stubbed calls made are counted (``stub_calls``) and reported in
the NxDI CPU tier's summary line.

``neuronx_distributed/__init__.py`` touches the Neuron runtime at import time
(``torch.classes.neuron.*``): its packages are registered without running their ``__init__``,
and the model code imports the submodules it needs from source.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.backends.neuron.sources import NXD_PACKAGE, NXDI_PACKAGE, NeuronImportError, source_roots
from harness.backends.neuron.stub_allowlist import ALLOW_LIST, ALLOWED_MODULES

NEURON_ONLY_PACKAGES = ("torch_xla", "torch_neuronx", "nki", "nkilib", "libneuronxla", "neuronxcc")
# neuronx_distributed packages whose __init__ needs the Neuron runtime: registered, not executed.
NXD_BARE_PACKAGES = ("neuronx_distributed", "neuronx_distributed.modules", "neuronx_distributed.modules.moe")

ALLOW_LIST_FILE = "harness/backends/neuron/stub_allowlist.py"
_CALLS: Counter[str] = Counter()  # stubbed calls made in this process, by name


def _platform_target(*args: Any, **kwargs: Any) -> str:
    _CALLS["torch_neuronx.utils.get_platform_target"] += 1
    return "trn2"


# Stubbed names whose value matters to code that CPU mode runs.
STUB_VALUES: dict[str, Any] = {
    "torch_neuronx.utils.get_platform_target": _platform_target,
    "torch_neuronx.__version__": "2.9.0+stub",
    "neuronxcc.__version__": "2.0.0+stub",
    "libneuronxla.__version__": "2.0.0+stub",
}


class NeuronStubCalled(RuntimeError):
    """CPU mode reached Neuron-only code (a kernel, a device op): a real device is needed for it."""


class NeuronStubMissing(BaseException):
    """A Neuron-only name or use that is not on the stub allow-list was asked for.

    A ``BaseException``, like ``KeyboardInterrupt``, on purpose. NxDI probes Neuron-only names and
    branches on the answer: ``hasattr``, ``getattr(mod, name, None)`` (attention_base.py's
    ``import_nki_cte_attention_kernel``), ``from X import Y`` inside ``try/except ImportError``
    (neuronx_distributed's trace/functions.py) or ``except Exception`` (its parallel_state.py). Each of
    those swallows any ``Exception`` subclass, an ``AttributeError`` or ``ImportError`` by design, and
    takes the "absent" branch, where a Trn2 host, which has the real name, takes the other. Recording
    the miss and failing the tier's summary afterwards would still let that run take the wrong path
    and produce figures from it; an error that only ``except BaseException`` catches stops it at
    the probe, with the name. pytest reports it as the test's failure (or collection error)."""


def _not_allowed(qualname: str) -> str:
    return (f"{qualname} is not on the Neuron stub allow-list: {qualname.split('.', 1)[0]} is a Neuron-only package "
            f"stubbed for NxDI's CPU mode, and NxDI's CPU mode was not seen using this name (if it may, add it to "
            f"{ALLOW_LIST_FILE}, saying what it stands for)")


def _undecided(check: str) -> str:
    return (f"{check} cannot be decided: the Neuron-only class is a stub for NxDI's CPU mode (the real class decides "
            f"on a Trn2 host, so NxDI could take another branch here; see {ALLOW_LIST_FILE})")


def stub_calls() -> dict[str, int]:
    """The stubbed Neuron-only calls made in this process (decorators at import included), by name."""
    return dict(sorted(_CALLS.items()))


def stub_calls_line() -> str | None:
    """The NxDI CPU tier's summary line on the stubbed calls made (None: NxDI was not imported)."""
    if _INSTALLED is None:
        return None
    calls = ", ".join(f"{name} x{count}" for name, count in stub_calls().items()) or "none"
    stubbed = ", ".join(_INSTALLED.stubbed) or "nothing"
    return f"carbon-harness: NxDI CPU tier: stubbed Neuron-only calls made: {calls} (stubbed packages: {stubbed})"


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) or (isinstance(value, (list, tuple)) and any(_is_tensor(v) for v in value))


class _StubMeta(type):
    """Stub objects are classes: they can be subclassed, called, used as decorators and indexed,
    so module-level NxDI code that only names Neuron symbols runs unchanged. An attribute is
    another stub only when it is on the allow-list; a truth test or iteration raises."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _lookup(f"{cls._stub_name}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("_stub_direct"):
            _CALLS[cls._stub_name] += 1
            if any(_is_tensor(a) for a in (*args, *kwargs.values())):
                raise NeuronStubCalled(f"{cls._stub_name} was called on tensors: it is Neuron-only code (stubbed "
                                       "for NxDI's CPU mode), so this configuration needs a Trainium2 device")
            if len(args) == 1 and not kwargs and callable(args[0]):
                return args[0]  # @stub: a decorator that leaves the function as it is
            return _lookup(f"{cls._stub_name}()")  # @stub(...) or a call at import time: another stub
        return super().__call__(*args, **kwargs)  # a real subclass of a stub

    def __getitem__(cls, item: Any) -> Any:
        return _lookup(f"{cls._stub_name}[]")  # any subscript of this stub, on the list as NAME[]

    def __instancecheck__(cls, instance: Any) -> bool:
        if not cls.__dict__.get("_stub_direct") or cls in type(instance).__mro__:
            return type.__instancecheck__(cls, instance)  # a real subclass of a stub, or an instance of one
        raise NeuronStubMissing(_undecided(f"isinstance(<{type(instance).__name__}>, {cls._stub_name})"))

    def __subclasscheck__(cls, subclass: type) -> bool:
        if not cls.__dict__.get("_stub_direct") or cls in getattr(subclass, "__mro__", ()):
            return type.__subclasscheck__(cls, subclass)
        raise NeuronStubMissing(_undecided(f"issubclass({getattr(subclass, '__name__', subclass)}, {cls._stub_name})"))

    def __iter__(cls):
        raise NeuronStubMissing(f"{cls._stub_name} is a Neuron-only stub: it cannot be iterated (NxDI code iterating "
                                f"it would take a path the stub picks; see {ALLOW_LIST_FILE})")

    def __bool__(cls) -> bool:
        raise NeuronStubMissing(f"{cls._stub_name} is a Neuron-only stub: it has no truth value (NxDI code testing "
                                f"it would take a path the stub picks; see {ALLOW_LIST_FILE})")

    def __repr__(cls) -> str:
        return f"<neuron stub {cls._stub_name}>"


def _instance_getattr(self: Any, name: str) -> Any:
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return _lookup(f"{type(self)._stub_name}.{name}")


_STUBS: dict[str, Any] = {}


def _lookup(qualname: str) -> Any:
    if qualname in STUB_VALUES:
        return STUB_VALUES[qualname]
    if qualname not in ALLOW_LIST:
        raise NeuronStubMissing(_not_allowed(qualname))
    if qualname not in _STUBS:
        _STUBS[qualname] = _StubMeta(qualname.rsplit(".", 1)[-1], (), {
            "_stub_name": qualname, "_stub_direct": True, "__module__": qualname.rsplit(".", 1)[0],
            "__getattr__": _instance_getattr})
    return _STUBS[qualname]


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # Python's own protocol probes (copy, inspect, typing), not NxDI's
        qualname = f"{self.__name__}.{name}"
        if qualname in ALLOWED_MODULES:  # a submodule, as the real package has it (import's fromlist asks hasattr)
            return importlib.import_module(qualname)
        return _lookup(qualname)


class _StubLoader(importlib.abc.Loader):
    carbon_stub = True  # host.host_find_spec: a stubbed package is not the Neuron stack

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []  # a package: every submodule is a stub too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        for qualname, value in STUB_VALUES.items():
            parent, _, attr = qualname.rpartition(".")
            if parent == module.__name__:
                setattr(module, attr, value)


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(roots)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] in self.roots:
            if fullname not in ALLOWED_MODULES:  # not ModuleNotFoundError: `except ImportError` would take a fallback
                raise NeuronStubMissing(_not_allowed(fullname))
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


@dataclass(frozen=True)
class NxdiImport:
    """Where NxDI came from in this process, for the report header and the run manifest."""

    nxdi_path: str
    nxd_path: str
    stubbed: tuple[str, ...]
    source: str | None  # the --carbon-nxdi-source directory, None for the installed package


def _register_bare_package(name: str, search: Path) -> None:
    """Register ``name`` as a package whose submodules load from ``search`` without running its
    ``__init__`` (which needs the Neuron runtime)."""
    if name in sys.modules:
        return
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(search)]
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [str(search)]
    module.__file__ = str(search / "__init__.py")
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _nxd_location(nxd_root: Path | None) -> Path:
    if nxd_root is not None:
        return nxd_root
    spec = importlib.util.find_spec(NXD_PACKAGE) if NXD_PACKAGE not in sys.modules else sys.modules[NXD_PACKAGE].__spec__
    if spec is None or not spec.submodule_search_locations:
        raise NeuronImportError(
            f"{NXD_PACKAGE} (neuronx-distributed) is neither installed nor beside the NxDI source: put a "
            "neuronx-distributed checkout next to it (neuronx-distributed/src) or pip install it")
    return Path(next(iter(spec.submodule_search_locations))).parent


def _soften_neuron_classes() -> None:
    """``torch.classes.neuron.*`` (the runtime's TorchScript classes) name type hints at import
    time: without the runtime they resolve to stubs instead of raising."""
    import torch

    try:
        torch.classes.neuron.SPMDModel  # noqa: B018 - the real runtime is loaded
    except RuntimeError:
        setattr(torch.classes, "neuron", _lookup("torch.classes.neuron"))


_INSTALLED: NxdiImport | None = None


def install(source: Path | None = None) -> NxdiImport:
    """Prepare this process to import NxDI for CPU mode, once: the NxDI source on sys.path (when
    given), stubs for the Neuron-only packages that are not installed, neuronx-distributed's
    runtime-bound packages registered bare. Idempotent: a later call without a source takes what
    is there; one naming another source fails (a process imports one NxDI)."""
    global _INSTALLED
    wanted = str(source.expanduser().resolve()) if source is not None else None
    if _INSTALLED is not None:
        if wanted is not None and wanted != _INSTALLED.source:
            raise NeuronImportError(f"NxDI was already imported from {_INSTALLED.nxdi_path} in this process; "
                                    f"cannot switch to {wanted or 'the installed package'}")
        return _INSTALLED
    nxd_root: Path | None = None
    if source is not None:
        nxdi_root, nxd_root = source_roots(source)
        for root in (nxd_root, nxdi_root):
            if root is not None and str(root) not in sys.path:
                sys.path.insert(0, str(root))
    elif importlib.util.find_spec(NXDI_PACKAGE) is None:
        raise NeuronImportError(f"{NXDI_PACKAGE} is not installed: pass --carbon-nxdi-source DIR (an NxDI "
                                "source checkout) or install the [neuron] extra")
    stubbed = tuple(p for p in NEURON_ONLY_PACKAGES if importlib.util.find_spec(p) is None)
    if stubbed:
        sys.meta_path.insert(0, _StubFinder(stubbed))
    _soften_neuron_classes()
    nxd = _nxd_location(nxd_root)
    for name in NXD_BARE_PACKAGES:
        _register_bare_package(name, nxd.joinpath(*name.split(".")))
    nxdi_spec = importlib.util.find_spec(NXDI_PACKAGE)
    if nxdi_spec is None or not nxdi_spec.submodule_search_locations:
        raise NeuronImportError(f"{NXDI_PACKAGE} is not importable from {source}")
    _INSTALLED = NxdiImport(str(Path(next(iter(nxdi_spec.submodule_search_locations)))),
                            str(nxd / NXD_PACKAGE), stubbed, wanted)
    return _INSTALLED


def installed() -> NxdiImport | None:
    return _INSTALLED
