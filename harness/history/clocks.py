"""Which figures a series may judge: a figure is judged only in the clock its run was timed in. A run timed in
CPU time (pytest-benchmark's ``--benchmark-timer time.process_time``, as a release check times a host side, so
that a shared runner's neighbours do not move it) still measures some figures in wall time: the engine's load,
a generation timed by the engine's own ``Timer``, a bandwidth timed by an array copy. Across such runs those
figures move with the runner's load, not the code (fixtures/history/cpu-time/aa: ``tkg_roofline_fraction``
+103.5% at run 19 when the copy read half the bandwidth under load; fixtures/history/ci-load/aa: ``load_s``
-10.9% at run 8), so the history records and draws them but finds no change point in them and does not gate
them; it reports them instead, once, naming them (``not_judged``). Nor does it judge a CTE or TKG benchmark's
typical round in such runs, only its fastest (``CONTENDED``, below). A series timed in wall time judges every
figure. Pure functions over series keys (``store.SERIES_COLUMNS``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from harness.history.records import ROUND_MIN
from harness.history.store import SERIES_COLUMNS

CPU_TIMERS = ("cpu", "thread-cpu")  # records.TIMERS' names of pytest-benchmark's CPU-time timers
ALWAYS = "always"  # measured in wall time whatever the benchmark's timer
OUTSIDE_ROUNDS = "outside the rounds"  # the benchmark's timer only where its timed rounds are the source
MEASURED_BANDWIDTH = "measured bandwidth"  # wall time where the hardware's bandwidth is measured at run time
LATENCY_STATS = tuple(f"{s}_{n}_ms" for s in ("mean", "median", "p90", "p99") for n in ("ttft", "tpot", "itl", "e2el"))
# Each figure a CPU-timed run measures partly or wholly in wall time (read from the code that computes it), and when.
WALL_CLOCK: dict[str, str] = {
    # EngineInfo.load_s: time.perf_counter() around loading the engine (harness/backends/hf.py, neuron/engine.py,
    # openai.py), outside every benchmark's rounds
    "load_s": ALWAYS,
    # perf_counter() around the Neuron compile (harness/backends/neuron/engine.py)
    "compile_s": ALWAYS,
    # test_e2e: the median of the engine's own Timer (harness.core.measure.Timer, perf_counter) around generate
    "e2e_ms_p50": ALWAYS,
    # test_e2e (harness.analysis.figures.generation_figures) and speculative decoding (harness.workloads.speculative):
    # tokens or bases over the median e2e_ms of the engine's Timer
    "tokens_per_s": ALWAYS, "bp_per_s": ALWAYS, "kbp_per_s": ALWAYS,
    # a served run's client clock (harness.serving.metrics), or a static batch's e2e_ms / cte_ms / tkg_ms of the
    # engine's Timer under vLLM's names (generation_figures -> static_batch_serving_figures)
    **{name: ALWAYS for name in LATENCY_STATS},
    "request_throughput": ALWAYS, "output_throughput": ALWAYS, "total_token_throughput": ALWAYS,
    "request_goodput": ALWAYS, "goodput_fraction": ALWAYS,  # the requests within wall-clock latency objectives
    # harness.workloads.speculative: the draft's and the verifier's Timer, their ratio to the target's, a served step
    "spec_draft_ms_per_step": ALWAYS, "spec_verify_ms_per_step": ALWAYS, "spec_speedup": ALWAYS,
    "spec_step_ms_p50": ALWAYS,
    # test_cte / test_tkg: percentiles of pytest-benchmark's own rounds (round_ms), in its timer; test_e2e's from the
    # engine's Timer, scoring's cte_ms per batch from it too (harness.workloads.scoring): judged only in a benchmark
    # where records.round_minimums derived {prefix}_ms_min (its p50 is its rounds' median)
    "cte_ms_p50": OUTSIDE_ROUNDS, "cte_ms_p99": OUTSIDE_ROUNDS, "tkg_ms_p50": OUTSIDE_ROUNDS,
    "tkg_ms_p99": OUTSIDE_ROUNDS,
    # a step's bytes / (bandwidth x tkg_ms_p50): on a host whose hardware profile has no bandwidth (cpu), the
    # bandwidth is an array copy timed by perf_counter when the session starts (harness.core.hardware.
    # measure_copy_bandwidth_gbps), which reads the neighbours' use of memory; and its tkg_ms_p50 as above
    "tkg_roofline_fraction": MEASURED_BANDWIDTH,
}
# Figures read in the benchmark's timer in every benchmark (not listed above): cte_ms_min and tkg_ms_min (the fastest
# timed round), scoring's variants_per_s, scored_kbp_per_s, scoring_ms_p50 and usd_per_million_variants (round_ms),
# the tokenizer's speedups and spec_speedup_gain (process_time on a CPU: harness.core.measure); and figures with no
# clock: valid_dna_fraction, spec_acceptance_rate, spec_tokens_per_step, completed, failed.
WHY = ("wall-clock figure of runs timed in CPU time: it measures the runner's load; time the runs in wall time on a "
       "dedicated runner to judge it")
# A typical round's CPU time, and what is derived from it, in runs timed in CPU time: judged by the fastest round
# ({prefix}_ms_min) instead. CPU time keeps a neighbour's own work out of a figure, not what it costs the run when
# the runner has no idle CPU: each preemption refills the caches inside the run's CPU time, and how many rounds
# that reaches moves with the neighbours. fixtures/history/contended/aa (2026-11-29; two busy neighbours on both
# CPUs of the 2-CPU runner in runs 5-8 and 17-20, the run itself getting 0.3-0.6 of a CPU there, 0.8-1.0 elsewhere):
# tkg_ms_p50 +8.4% and tkg_ms_p99 +23.9% at run 17 of 20, each over 3 times its noise, exit 1 with the same code,
# while the fastest round, the one no preemption reached, moved +4.2% (2.0 times its noise; Otava's test alone found
# no change in it). With the two neighbours in runs 9-14 and 18-20 (contended-mid/aa) a typical round moved less
# (tkg_ms_p99 +10.7% at run 17, 1.81 noises); with them drawn per run (random-load/aa), not at all.
CONTENDED = ("cte_ms_p50", "cte_ms_p99", "tkg_ms_p50", "tkg_ms_p99", "tkg_roofline_fraction")
WHY_CONTENDED = ("a typical round's CPU time moves with the runner's contention (each preemption refills the caches "
                 "inside it): judged by the fastest round, cte_ms_min / tkg_ms_min; time the runs in wall time on a "
                 "dedicated runner to judge it")
REASONS = (WHY, WHY_CONTENDED)  # the order they are reported in


@dataclass(frozen=True)
class NotJudged:
    figure: str
    series: int  # how many series of it are not judged
    why: str = WHY

    def describe(self) -> str:
        return f"{self.figure} ({self.series} series)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def bandwidth_measured(hardware: str) -> bool:
    """Whether a run on this hardware measures its memory bandwidth (a profile without one, or one unknown here)."""
    from harness.core.hardware import load_profiles

    profile = load_profiles().get(hardware)
    return profile is None or profile.memory_bandwidth_gbps is None


def wall_clock(key: tuple, keys: Collection[tuple]) -> bool:
    """Whether the series ``key`` is a figure measured in wall time in runs timed in CPU time (so not judged).
    ``keys``: every series key of the store, where a round figure's sibling ``{prefix}_ms_min`` is looked for."""
    s = dict(zip(SERIES_COLUMNS, key))
    when = WALL_CLOCK.get(s["figure"])
    if s["timer"] not in CPU_TIMERS or when is None:
        return False
    if when == ALWAYS:
        return True
    rounds = (ROUND_MIN["tkg"] if when == MEASURED_BANDWIDTH else ROUND_MIN[s["figure"].split("_", 1)[0]],
              *key[1:])
    if when == MEASURED_BANDWIDTH and bandwidth_measured(s["hardware"]):
        return True
    return rounds not in keys


def why_not_judged(key: tuple, keys: Collection[tuple]) -> str | None:
    """Why the series ``key`` is not judged (``WHY``: a wall-clock figure of runs timed in CPU time;
    ``WHY_CONTENDED``: a typical round of runs timed in CPU time), or None where it is."""
    if wall_clock(key, keys):
        return WHY
    s = dict(zip(SERIES_COLUMNS, key))
    if s["timer"] in CPU_TIMERS and s["figure"] in CONTENDED:
        return WHY_CONTENDED
    return None


def left_out(reasons: Iterable[tuple[str, str]]) -> list[NotJudged]:
    """One entry a figure and reason, from each series' (figure, reason), in ``REASONS``' order, then the figure's."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for figure, why in reasons:
        counts[(figure, why)] += 1
    return [NotJudged(f, n, why) for (f, why), n in sorted(counts.items(), key=lambda kv: (REASONS.index(kv[0][1]),
                                                                                              kv[0][0]))]


def split(keys: Iterable[tuple]) -> tuple[list[tuple], list[NotJudged]]:
    """The keys to judge, and the figures left out, one entry a figure and reason with its number of series."""
    keys = set(keys)
    judged, reasons = [], []
    for key in sorted(keys):
        why = why_not_judged(key, keys)
        if why:
            reasons.append((key[0], why))
        else:
            judged.append(key)
    return judged, left_out(reasons)


def summary(not_judged: list[NotJudged]) -> str:
    """The lines ``changes`` and ``gate`` print for them, one a reason ("" where every figure is judged)."""
    lines = []
    for why in REASONS:
        some = [n for n in not_judged if n.why == why]
        if some:
            lines.append(f"not judged: {', '.join(n.describe() for n in some)}, {sum(n.series for n in some)} series: "
                         f"{why}")
    return "\n".join(lines)


def unjudged(points: Iterable[dict[str, Any]], figure: str | None = None) -> list[NotJudged]:
    """The figures not judged among the store's ``points`` (of one figure where given), with why."""
    keys = {tuple(p[k] for k in SERIES_COLUMNS) for p in points}
    _, left = split(keys)
    return [n for n in left if figure in (None, n.figure)]
