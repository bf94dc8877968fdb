"""Will a leg fit its job's timeout? The time a release check's plan needs on a Trn2 host, estimated from its design
before anything starts, and the plan refused, in one line naming what to change, where it cannot fit (issue 55, item
9: a vLLM -> vLLM leg on a trn2.3xlarge stops and restarts both servers every round; a job killed at its timeout
leaves no verdict at all, so the plan is refused up front instead).

What is counted, per model and shape of the plan, at the design's most rounds (``max_pairs``, the worst case the
sequential rule allows):

- **compiles**: one cold compile per side (an empty compile cache), the reference compile time of the model;
- **weight loads**: every process or server start that loads the model: an NxDI side loads in its conformance run
  and in each of its perf rounds; a served side loads once per server start, which is once for the whole check where
  its server keeps its cores (a **disjoint** core plan: a trn2.48xlarge's halves), and before each of its turns
  where it cannot (an **exclusive** plan: a trn2.3xlarge, its server stopped while the other side holds the cores);
- **server starts**: a vLLM server's start beyond its weight load (engine set-up, each bucket's graph traced and
  found in the cache, the untimed warm-up), per start;
- **rounds**: each side's perf round per pair, a fresh client process plus ``runs`` + 1 timed requests (one warm-up)
  at the model's reference end-to-end latency.

The conformance tiers' own test time and the output contract's CPU reference are not counted (they are the same for
any round count; a plan refused here would be refused with them too). The costs are data
(``fixtures/release/leg-time.json``), each with its source; the reference runs' figures
(``fixtures/reference/trn2.3xlarge-sdk2.29.json``) give compile, load and end-to-end time per model. Pure, except
``load_costs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from harness.core.paths import FIXTURES_DIR

COSTS_FILE = FIXTURES_DIR / "release" / "leg-time.json"
REFERENCE_FILE = FIXTURES_DIR / "reference" / "trn2.3xlarge-sdk2.29.json"
REFERENCE_SHAPE = "report-bs1"  # the one shape whose compile and load the reference runs publish


class LegTimeError(ValueError):
    """A costs file the estimate cannot read."""


@dataclass(frozen=True)
class Costs:
    """Seconds: per model (``compile_s``, ``load_s``, ``e2e_s``: the reference runs'), and per start or process."""

    compile_s: dict[str, float]
    load_s: dict[str, float]
    e2e_s: dict[str, float]
    server_start_s: float  # a vLLM server's start beyond its weight load
    process_s: float  # a fresh pytest process: interpreter, imports, collection


@dataclass(frozen=True)
class Leg:
    """What the estimate reads of a plan: its models and shapes, its design's most pairs, each side's stack."""

    models: tuple[str, ...]
    shapes: tuple[str, ...]
    max_pairs: int
    runs: int
    sides: tuple[str, str]  # (baseline, candidate): "process" (NxDI: each process loads), "server" (a vLLM server
    # the check starts), "endpoint" (a team's running server: only the client's rounds are the check's)
    scheme: str  # the core plan's: disjoint, exclusive or sequential
    perf: bool = True
    conformance: bool = True
    min_pairs: int = 4  # the design's first look: fewer rounds than this are a fixed count (--rounds K)


@dataclass(frozen=True)
class Estimate:
    compiles_s: float
    loads_s: float
    starts_s: float
    rounds_s: float
    server_starts: int
    weight_loads: int
    unknown: tuple[str, ...] = ()  # models without reference costs: not estimated

    @property
    def total_s(self) -> float:
        return self.compiles_s + self.loads_s + self.starts_s + self.rounds_s

    def describe(self) -> str:
        return (f"{self.total_s / 60:.0f} min ({self.weight_loads} weight loads {self.loads_s / 60:.0f} min, "
                f"{self.server_starts} server starts {self.starts_s / 60:.0f} min, cold compiles "
                f"{self.compiles_s / 60:.0f} min, perf rounds {self.rounds_s / 60:.0f} min)")


def model_key(model: str) -> str:
    """``carbon-8b`` and ``/opt/models/carbon/Carbon-8B`` are one model."""
    return Path(model).name.lower()


def estimate(leg: Leg, costs: Costs) -> Estimate:
    unknown = tuple(m for m in leg.models if model_key(m) not in costs.compile_s)
    compiles = loads = starts = rounds = 0.0
    n_starts = n_loads = 0
    pairs = leg.max_pairs if leg.perf else 0
    for model in leg.models:
        key = model_key(model)
        if key in unknown:
            continue
        for _shape in leg.shapes:
            for kind in leg.sides:
                if kind == "endpoint":
                    rounds += pairs * (costs.process_s + (leg.runs + 1) * costs.e2e_s[key])
                    continue
                compiles += costs.compile_s[key]
                if kind == "server":
                    # the server keeps its cores for the whole check, or is stopped during each of the other side's
                    # turns (its conformance run and each perf round then start it again)
                    side_starts = 1 if leg.scheme != "exclusive" else int(leg.conformance) + pairs
                    n_starts += side_starts
                    n_loads += side_starts
                    starts += side_starts * costs.server_start_s
                    loads += side_starts * costs.load_s[key]
                else:
                    side_loads = int(leg.conformance) + pairs  # every NxDI process loads its own
                    n_loads += side_loads
                    loads += side_loads * costs.load_s[key]
                rounds += pairs * (costs.process_s + (leg.runs + 1) * costs.e2e_s[key])
    return Estimate(compiles, loads, starts, rounds, n_starts, n_loads, unknown)


def refusal(leg: Leg, costs: Costs, timeout_min: float) -> str | None:
    """None where the leg fits ``timeout_min``; else one line: the estimate, and what would fit (the most rounds
    that do, the disjoint halves of a trn2.48xlarge where this plan restarts servers each round)."""
    est = estimate(leg, costs)
    if est.total_s <= timeout_min * 60:
        return None
    changes = []
    fitting = [k for k in range(leg.max_pairs - 1, 2, -1)
               if estimate(replace(leg, max_pairs=k), costs).total_s <= timeout_min * 60]
    if leg.perf and fitting:
        k = fitting[0]
        option = f"--max-rounds {k} (MAX_ROUNDS={k})" if k >= leg.min_pairs else f"--rounds {k} (ROUNDS={k})"
        changes.append(f"fewer rounds: {option} fits, {estimate(replace(leg, max_pairs=k), costs).total_s / 60:.0f} min")
    if leg.scheme == "exclusive":
        disjoint = estimate(replace(leg, scheme="disjoint"), costs)
        fits = "fits" if disjoint.total_s <= timeout_min * 60 else "does not fit either"
        changes.append(f"a trn2.48xlarge, whose disjoint halves keep both servers up ({disjoint.total_s / 60:.0f} min: "
                       f"{fits})")
    if len(leg.models) * len(leg.shapes) > 1:
        changes.append("one model and shape per leg")
    return (f"this plan needs about {est.describe()} at {leg.max_pairs} pairs, more than the leg's "
            f"{timeout_min:g} min timeout: change it to " + ("; or ".join(changes) or "a longer timeout"))


def load_costs(path: Path = COSTS_FILE, reference: Path = REFERENCE_FILE) -> Costs:
    """The costs file and the reference runs' per-model figures (``REFERENCE_SHAPE``)."""
    try:
        told = json.loads(path.read_text())
        figures = json.loads(reference.read_text())["figures"]
        per = {metric: {f["model"]: float(f["value"]) for f in figures
                        if f["metric"] == metric and f["shape"] == REFERENCE_SHAPE}
               for metric in ("compile_s", "load_s", "e2e_ms_p50")}
        return Costs(per["compile_s"], per["load_s"], {m: v / 1000 for m, v in per["e2e_ms_p50"].items()},
                     float(told["server_start_s"]["value"]), float(told["process_s"]["value"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LegTimeError(f"{path} / {reference}: cannot read the leg-time costs ({exc})") from None


def leg_of(plan) -> Leg:  # noqa: ANN001  (harness.release.plan.CheckPlan: not imported, to stay below it)
    scheme = plan.core_plan.scheme if plan.core_plan is not None else "sequential"
    sides = tuple("process" if side.backend != "openai" else "endpoint" if side.endpoint and not side.started
                  else "server" for side in (plan.baseline, plan.candidate))
    return Leg(tuple(plan.models), tuple(plan.shapes), plan.design.max_pairs, plan.runs, sides,  # type: ignore[arg-type]
               scheme, plan.perf, plan.conformance, plan.design.min_pairs)
