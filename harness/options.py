"""Option parsers shared by the CLI and the pytest plugin (argparse ``type=`` callables), so a bad
value fails at the command line with one clear message."""

from __future__ import annotations

import argparse


def _parse_int(value: str, minimum: int, requirement: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(f"{value!r} must be {requirement}")
    return n


def parse_positive_int(value: str) -> int:
    return _parse_int(value, 1, "at least 1")


def parse_nonneg_int(value: str) -> int:
    return _parse_int(value, 0, ">= 0")


def parse_positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be positive")
    return x
