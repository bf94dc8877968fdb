"""Which test tiers a session skipped and what would enable each, for the terminal summary: a
plain ``pytest`` in a dev environment passes with whole tiers skipped, and must say so."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Tier:
    name: str
    phrase: str  # every skip reason of the tier contains it
    enable: str


TIERS = (
    Tier("NxDI CPU tier", "the NxDI CPU tier needs NxDI",
         "nox -s trn2-stack, or pytest --carbon-nxdi-source DIR (an NxDI checkout) with transformers 4.57"),
    Tier("Trainium2 device", "on a Trainium2 host",
         "pytest --carbon-backend neuron on a Trn2 host with the [neuron] extra"),
    Tier("vLLM serving tier", "serving tests need --carbon-serve vllm",
         "nox -s serving (a vLLM CPU server on the embedded default), or pytest -m serving --carbon-backend openai "
         "--carbon-endpoint URL"),
    Tier("release checks", "release checks run under -m release",
         "nox -s release-check, or pytest -m release --carbon-nxdi-source DIR (an NxDI 2.29 tree whose releases/ "
         "holds 2.28 and 2.29-c63afe0)"),
    Tier("published tokenizer", "no real checkpoint given", "pytest --carbon-remote-tokenizer DIR (a real Carbon checkpoint)"),
)


def skipped_tiers(reasons: Iterable[str], tiers: Iterable[Tier] = TIERS) -> list[str]:
    """One line per tier with skipped tests: how many, and what would run them."""
    reasons = list(reasons)
    lines = []
    for tier in tiers:
        count = sum(tier.phrase in reason for reason in reasons)
        if count:
            lines.append(f"{tier.name} skipped ({count} tests): to run it, {tier.enable}")
    return lines
