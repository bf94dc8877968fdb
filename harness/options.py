"""Option parsers shared by the CLI and the pytest plugin (argparse ``type=`` callables), so a bad
value fails at the command line with one clear message."""

from __future__ import annotations

import argparse
import math

# Upper bounds for counts a user types: a typo such as 1000000000 rounds must fail at the command
# line, not run for days. Far above any useful value (the reference runs use 20 runs, 1 warm-up).
MAX_RUNS = 10_000
MAX_WARMUP = 1_000


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
