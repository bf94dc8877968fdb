"""Option parsers shared by the CLI and the pytest plugin (argparse ``type=`` callables), so a bad
value fails at the command line with one clear message."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

from harness.core.hardware import get_profile
from harness.core.metrics import SLO_METRICS
from harness.core.spec import get_model, get_shape

T = TypeVar("T")

# Upper bounds for counts a user types: a typo such as 1000000000 rounds must fail at the command
# line, not run for days. Far above any useful value (the reference runs use 20 runs, 1 warm-up).
MAX_RUNS = 10_000
MAX_WARMUP = 1_000
BACKENDS = ("hf", "neuron", "openai")
SERVE_CHOICES = ("vllm",)  # servers a session can start itself (--carbon-serve)


def _parse_int(value: str, minimum: int, requirement: str, maximum: int | None = None) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(f"{value!r} must be {requirement}")
    if maximum is not None and n > maximum:
        raise argparse.ArgumentTypeError(f"{value!r} must be at most {maximum}")
    return n


def parse_runs(value: str) -> int:
    return _parse_int(value, 1, "at least 1", MAX_RUNS)


def parse_warmup(value: str) -> int:
    return _parse_int(value, 0, ">= 0", MAX_WARMUP)


def parse_nonempty_path(value: str) -> str:
    """A path option given as '' would silently mean the working directory."""
    if not value.strip():
        raise argparse.ArgumentTypeError("'' is empty: give a path")
    return value


def parse_positive_int(value: str) -> int:
    return _parse_int(value, 1, "at least 1")


def parse_nonneg_int(value: str) -> int:
    return _parse_int(value, 0, ">= 0")


def parse_positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{value!r} must be a finite number")
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be positive")
    return x


def parse_percent(value: str) -> float:
    """``5%`` or ``0.05`` -> 0.05. A bare number of 1 or more is refused: ``5`` could mean 5% or 500%,
    and taken as 500% a release gate would pass a 74% slowdown without a word."""
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a percentage such as 5% or 0.05") from None
    if not text.endswith("%") and number >= 1:
        raise ValueError(f"{value!r} is ambiguous: write a percentage such as {text}% or a fraction such as "
                         f"{number / 100:g}")
    if not 0 <= number < 10:  # also rejects NaN
        raise ValueError(f"{value!r} is out of range (0% .. 1000%)")
    return number


def argparse_type(parse: Callable[[str], T], name: str) -> Callable[[str], T]:
    """``parse`` as an argparse ``type=``: its ValueError (a SpecError, HardwareError...) becomes
    argparse's one-line usage error, with the message that names the value and what is accepted."""
    def convert(value: str) -> T:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = convert.__qualname__ = name
    return convert


parse_model = argparse_type(lambda value: get_model(value).name, "parse_model")
parse_shape = argparse_type(lambda value: get_shape(value).name, "parse_shape")
parse_hardware = argparse_type(lambda value: get_profile(value).name, "parse_hardware")
parse_tolerance = argparse_type(parse_percent, "parse_tolerance")


def parse_acceptance(value: str) -> float:
    try:
        a = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0.0 <= a <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} must be in [0, 1] (the fraction of draft tokens accepted)")
    return a


def parse_confidence(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number such as 0.95") from None
    if not 0.5 <= x < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least 0.5 and below 1, such as 0.95")
    return x


def parse_backend(value: str) -> str:
    if value not in BACKENDS:
        raise ValueError(f"--carbon-backend {value!r}; known backends: {', '.join(BACKENDS)}")
    return value


def parse_serve(value: str) -> str:
    if value not in SERVE_CHOICES:
        raise ValueError(f"--carbon-serve {value!r}; known servers: {', '.join(SERVE_CHOICES)}")
    return value


def parse_endpoint(url: str) -> str:
    """The server's base URL (``http://HOST:PORT``, an optional trailing ``/v1`` dropped)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--carbon-endpoint {url!r}: expected http(s)://HOST:PORT of an OpenAI-compatible server")
    base = url.strip().rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def parse_slos(text: str) -> dict[str, float]:
    """vLLM's ``--goodput`` syntax: ``"ttft:200 tpot:50"`` (milliseconds) -> {"ttft": 200.0, "tpot": 50.0}."""
    slos: dict[str, float] = {}
    for item in text.split():
        name, sep, value = item.partition(":")
        if not sep or name not in SLO_METRICS:
            raise ValueError(f"SLO {item!r}: expected NAME:MILLISECONDS with NAME one of {', '.join(SLO_METRICS)} "
                             "(e.g. 'ttft:200 tpot:50')")
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"SLO {item!r}: {value!r} is not a number of milliseconds") from None
        if not ms > 0:
            raise ValueError(f"SLO {item!r}: the bound must be positive milliseconds")
        slos[name] = ms
    if not slos:
        raise ValueError(f"SLO string {text!r} names no SLO (e.g. 'ttft:200 tpot:50')")
    return slos


def parse_sweep(text: str) -> list[float]:
    """``"1,2,4"`` -> [1.0, 2.0, 4.0]: the concurrency or rate values of a sweep (``inf`` allowed)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"sweep {text!r}: expected comma-separated positive numbers, e.g. '1,2,4'") from None
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"sweep {text!r}: expected comma-separated positive numbers, e.g. '1,2,4'")
    return values
