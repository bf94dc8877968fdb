"""The power table: every family at every stream's noise, each noise model, A/A and planted changes, run
by the rule (``harness.release.power.simulation``); the aims docs/release-check.md states and its unit test holds the
rule to (derived here with their margins, written to ``fixtures/release/noise.json``); the markdown.

Families (a family is what one verdict gates, over its legs):

- ``cpu``: the figures a CPU-mode check gates on the default model and shape, as the stream measured them
  (their medians and floors included);
- ``trn2``: the Trn2 workflow (ci/trn2.yml): 3 legs (carbon-500m, -3b, -8b), each a check of 2 shapes
  (smoke, report-bs1) x the figures a shape gates, at ``alpha / 3``; each shape's figures drawn as the CPU
  stream measured them (medians and floors included: no device is measured here), independently of the
  other shape's and leg's;
- ``served``: a served side's gated figures.
"""

from __future__ import annotations

import datetime as dt
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.sequential import Design
from harness.release.power.noise import Stream, family_of, key_of, multinormal, rounds
from harness.release.power.simulation import Family, Noise, simulate

SHIFTS = (0.10, 0.15, 0.30)
TARGET = {"neuron-cpu": "tkg_ms_p50", "served": "median_e2el_ms"}
# the aims' simulated checks per cell in their unit test (tests/unit/release/test_power_aims.py): enough that a
# rule catching 93% (or failing A/A 7%) does not read as its 95% (5%) aim, few enough for a unit test
AIM_SIMS = 1000
Z_TABLE, Z_TEST = 2.576, 3.09  # the table's estimate (99%) and one test's draw (1 in 1000) on either side of it


@dataclass(frozen=True)
class Setting:
    """One family at one stream's noise."""

    family: str  # cpu, trn2, served
    load: str  # quiet, loaded
    what: Family
    target: str  # the key of the figure a one-figure change is planted on
    metric: str  # its metric
    noise: Mapping[str, Any]  # the stream's measured noise (noise.measure)
    stream: Stream


def trn2_family(noise: Mapping[str, Any]) -> Family:
    """ci/trn2.yml: one leg per model (3), each gating 2 shapes x the figures a shape gates, at alpha / 3."""
    return family_of(noise, "Trn2 workflow", legs=3, shapes=2)


def settings(streams: Sequence[tuple[Stream, Mapping[str, Any]]]) -> list[Setting]:
    out = []
    for stream, noise in streams:
        load, stack = noise["label"].split("-", 1)[-1], noise["stack"]
        names = [("cpu", family_of(noise, "CPU check")), ("trn2", trn2_family(noise))] \
            if stack == "neuron-cpu" else [("served", family_of(noise, "served check"))]
        for name, family in names:
            out.append(Setting(name, load, family, key_of(noise, family, TARGET[stack]), TARGET[stack], noise, stream))
    return out


def models(setting: Setting) -> dict[str, Noise]:
    return {"normal": multinormal(setting.noise), "rounds": rounds(setting.stream),
            "normal, sigma at its 95% upper bound": multinormal(setting.noise, upper=True)}


def changes(setting: Setting, model: str) -> list[tuple[str, float, str]]:
    """(label, shift, on): A/A, each shift on the target figure and on every figure (the upper-bound model:
    A/A and 30% on the target only)."""
    target = setting.metric
    out = [("A/A", 0.0, "all")]
    shifts = (0.30,) if model.startswith("normal, sigma") else SHIFTS
    out += [(f"+{100 * s:g}% {target}", s, setting.target) for s in shifts]
    if not model.startswith("normal, sigma") and setting.what.size > 1:
        out += [(f"+{100 * s:g}% all", s, "all") for s in SHIFTS]
    return out


def seed_of(*parts: str) -> int:
    return zlib.crc32(" | ".join(parts).encode())


def run_cells(all_settings: Sequence[Setting], sims: int, design: Design = Design(),
              progress: Callable[[str], None] = lambda m: None) -> list[dict[str, Any]]:
    cells = []
    for st in all_settings:
        for model, noise in models(st).items():
            for label, shift, on in changes(st, model):
                seed = seed_of(st.family, st.load, model, label)
                rates = simulate(design, noise, st.what, shift, on, sims, seed)
                cells.append({"family": st.family, "load": st.load, "model": model, "change": label, **rates.to_dict()})
                progress(f"{st.family} {st.load} {model} {label}: {rates.to_dict()}")
    return cells


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def summary(cells: Sequence[Mapping[str, Any]], all_settings: Sequence[Setting]) -> list[str]:
    """The power table of docs/release-check.md: per family, load and noise model, the A/A verdicts and the changes caught."""
    head = ["| family (gated figures) | load | noise model | A/A PASS | A/A FAIL | A/A INCONCLUSIVE | pairs A/A | "
            "caught +10% / +15% / +30% on one | pairs +30% one | caught +10% / +15% / +30% on all |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    index = {(c["family"], c["load"], c["model"], c["change"]): c for c in cells}
    rows = []
    for st in all_settings:
        for model in models(st):
            mine = [c for k, c in index.items() if k[:3] == (st.family, st.load, model)]
            aa = next(c for c in mine if c["change"] == "A/A")
            one = [c for c in mine if c["change"] != "A/A" and not c["change"].endswith(" all")]
            every = [c for c in mine if c["change"].endswith(" all")]
            thirty = next(c for c in one if c["change"].startswith("+30%"))
            caught = " / ".join(pct(c["fail"]) for c in one) if len(one) > 1 else f"- / - / {pct(thirty['fail'])}"
            load = (f"{st.load}: {'one core kept busy' if st.noise['busy'] else 'none made'}, others "
                    f"{st.noise['load']['other_cpus_mean']:.1f} CPUs")
            rows.append(f"| {st.what.name} ({st.what.size} figures, {st.what.legs} leg{'s' if st.what.legs > 1 else ''}) | "
                        f"{load} | {model} | {pct(aa['pass'])} | {pct(aa['fail'])} | {pct(aa['inconclusive'])} | "
                        f"{aa['mean_pairs']:.1f} | {caught} ({one[0]['change'].split(' ', 1)[1]}) | "
                        f"{thirty['mean_pairs']:.1f} | {' / '.join(pct(c['fail']) for c in every) or '-'} |")
    return head + rows


def detail(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| family | load | noise model | change | PASS | FAIL | INCONCLUSIVE | mean pairs (a leg) | checks | seed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c['family']} | {c['load']} | {c['model']} | {c['change']} | {pct(c['pass'])} | {pct(c['fail'])} | "
              f"{pct(c['inconclusive'])} | {c['mean_pairs']:.2f} | {c['sims']} | {c['seed']} |" for c in cells]
    return lines


def _margin(p: float, table_sims: int, test_sims: int) -> float:
    """How far a bound sits from the table's rate ``p``: its estimate's 99% half-width, and a test draw's
    1-in-1000 spread (at least 4 checks' worth: at a rate near 0 or 1 a count is not normal)."""
    p = min(max(p, 1.0 / table_sims), 1 - 1.0 / table_sims)
    return (Z_TABLE * math.sqrt(p * (1 - p) / table_sims)
            + max(Z_TEST * math.sqrt(p * (1 - p) / test_sims), 4.0 / test_sims))


def _nice(x: float, up: bool) -> float:
    step = 0.005 if x < 0.05 else 0.01 if x < 0.90 else 0.005
    n = math.ceil(x / step - 1e-9) if up else math.floor(x / step + 1e-9)
    return round(min(max(n * step, 0.0), 1.0), 4)


def wilson(p: float, n: int, z: float = 1.96) -> list[float]:
    """The 95% interval of a simulated rate ``p`` of ``n`` checks (Wilson's: sound at 0 and 1)."""
    centre, half = (p + z * z / (2 * n)), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return [round(max((centre - half) / scale, 0.0), 4), round(min((centre + half) / scale, 1.0), 4)]


def binomial_tail(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p): how often a test of ``n`` checks reads ``k`` or more."""
    def pmf(j: int) -> float:
        return math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                        + j * math.log(p) + (n - j) * math.log1p(-p))

    return min(sum(pmf(j) for j in range(max(k, 0), n + 1)), 1.0)


def discrimination(n: int = AIM_SIMS) -> dict[str, float]:
    """What an aim test of ``n`` checks tells apart: the chance that a rule which catches +30% only 93% of
    the time still reads at least 95%, and one whose A/A FAIL is really 7% still reads at most 5%."""
    design = Design()
    power, alpha = 1 - design.beta, design.alpha
    return {"sims": n, "passes_at_93": binomial_tail(n, power - 0.02, math.ceil(power * n - 1e-9)),
            "passes_at_7": 1 - binomial_tail(n, alpha + 0.02, math.floor(alpha * n + 1e-9) + 1)}


def aims(cells: Sequence[Mapping[str, Any]], all_settings: Sequence[Setting]) -> list[dict[str, Any]]:
    """What docs/release-check.md states of the default design at the measured noise (the normal model), each a bound
    the unit test asserts on ``AIM_SIMS`` checks: the design's own aims (A/A FAIL at most ``alpha``, a
    ``resolve`` slowdown on one figure caught at least ``1 - beta`` of the time) where the table's rate
    clears them by its 99% interval and a test draw's 1-in-1000 spread, else (``short``) what the design
    does achieve, so moved; and A/A INCONCLUSIVE, which has no aim, as measured, so moved."""
    design = Design()
    out = []
    for st in all_settings:
        mine = {c["change"]: c for c in cells if (c["family"], c["load"], c["model"]) == (st.family, st.load, "normal")}
        aa = mine["A/A"]
        thirty = next(c for k, c in mine.items()
                      if k.startswith(f"+{100 * design.resolve:g}%") and not k.endswith(" all"))
        n, m = AIM_SIMS, aa["sims"]
        base = {"family": st.family, "load": st.load, "sims": n, "table_sims": m}
        worst = aa["fail"] + _margin(aa["fail"], m, n)
        caught = thirty["fail"] - _margin(thirty["fail"], m, n)
        out += [{**base, "change": "A/A", "outcome": "fail", "aim": design.alpha, "short": worst > design.alpha,
                 "at_most": max(design.alpha, _nice(worst, up=True)), "rate": aa["fail"],
                 "interval": wilson(aa["fail"], m)},
                {**base, "change": "A/A", "outcome": "inconclusive", "aim": None, "short": False,
                 "at_most": _nice(aa["inconclusive"] + _margin(aa["inconclusive"], m, n), up=True),
                 "rate": aa["inconclusive"], "interval": wilson(aa["inconclusive"], m)},
                {**base, "change": thirty["change"], "outcome": "fail", "aim": 1 - design.beta,
                 "short": caught < 1 - design.beta, "at_least": min(1 - design.beta, _nice(caught, up=False)),
                 "rate": thirty["fail"], "interval": wilson(thirty["fail"], m)}]
    return out


FAMILY_NAMES = {"cpu": "CPU check (carbon-tiny smoke)", "trn2": "Trn2 workflow (3 models x 2 shapes)",
                "served": "served check (carbon-tiny smoke)"}


def family_names() -> dict[str, str]:
    return dict(FAMILY_NAMES)


def aim_line(aim: Mapping[str, Any], names: Mapping[str, str]) -> str:
    bound = f"at most {pct(aim['at_most'])}" if "at_most" in aim else f"at least {pct(aim['at_least'])}"
    what = "identical code" if aim["change"] == "A/A" else f"a {aim['change']} slowdown"
    said = ("" if aim["aim"] is None else f", short of the design's aim of {pct(aim['aim'])}" if aim["short"]
            else ", the design's aim")
    lo, hi = aim["interval"]
    return (f"- {names[aim['family']]}, {aim['load']}: {what} ends {aim['outcome'].upper()} in {bound} of checks"
            f"{said} (simulated {pct(aim['rate'])} [{pct(lo)}, {pct(hi)}] of {aim['table_sims']}; asserted on "
            f"{aim['sims']} seeded checks)")


def noise_lines(noise: Mapping[str, Any]) -> list[str]:
    load = noise["load"]
    lines = [f"*{noise['label']}*: {noise['triples']} triples in {noise['minutes']} min ({noise['started']} .. "
             f"{noise['finished'] or 'stopped before it recorded its end'}); other processes kept "
             f"{load['other_cpus_mean']} CPUs busy on average (per triple "
             f"{load['other_cpus_range'][0]}..{load['other_cpus_range'][1]}), load average {load['loadavg1_mean']} "
             f"({load['loadavg1_range'][0]}..{load['loadavg1_range'][1]}); planted {noise['plant']['ms']} ms "
             f"({noise['plant']['what']})", "",
             "| figure | gated | median | sigma of a pair's log ratio [95%] | A/A mean | planted change | lag 1 | "
             "beyond 2 sigma | max abs z |", "|---|---|---|---|---|---|---|---|---|"]
    for f in noise["figures"]:
        lines.append(f"| {f['key'].split('::')[-1]} | {'yes' if f['gated'] else 'reported'} | {f['median']:.4g} | "
                     f"{pct(f['sigma'])} [{pct(f['sigma_95'][0])}, {pct(f['sigma_95'][1])}] | {100 * f['mean_aa']:+.1f}% | "
                     f"{100 * f['planted_change']:+.1f}% | {f['lag1']:+.2f} | {pct(f['beyond_2sigma'])} | "
                     f"{f['max_abs_z']:.1f} |")
    names = [f["metric"] for f in noise["figures"]]
    corr, (lo, hi) = noise["correlation"], noise["correlation_95"]
    lines += ["", "Correlation of the A/A log ratios [95% bootstrap]:", "",
              "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for i, name in enumerate(names):
        lines.append(f"| {name} | " + " | ".join("1" if i == j else f"{corr[i][j]:+.2f} [{lo[i][j]:+.2f}, {hi[i][j]:+.2f}]"
                                               for j in range(len(names))) + " |")
    return lines + [""]


def today() -> str:
    return dt.date.today().isoformat()


def machine(streams: Sequence[Stream]) -> str:
    """Where the streams ran, as their records say (CPUs; the analysing host's CPU model beside it: the
    streams are meant to be analysed where they ran)."""
    cpus = sorted({s.record["load"]["cpus"] for s in streams if isinstance(s.record.get("load"), dict)
                   and s.record["load"].get("cpus")})
    model = ""
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    return (f"{'/'.join(map(str, cpus)) or '?'}-CPU host" + (f" ({model})" if model else "")
            + f", streams recorded {min(str(s.record.get('started'))[:10] for s in streams)}")


def walk(stream: Stream, family: Family, design: Design = Design()) -> dict[str, list[str]]:
    """Independent real checks: the design on consecutive, disjoint stretches of the stream's own A/A pairs
    and of its planted pairs (each check starts where the last stopped; a stretch the stream's end cuts
    short is not a check)."""
    from harness.release.power.simulation import leg_check

    keep = [i for i, g in enumerate(stream.gated) if g]
    out: dict[str, list[str]] = {}
    for name, new in (("A/A", stream.a2), ("planted", stream.b)):
        done, start = [], 0
        while start + design.min_pairs <= stream.triples:
            base, cand = stream.a[start:start + design.max_pairs, keep], new[start:start + design.max_pairs, keep]
            verdict, n = leg_check(family.figures, design, base, cand)
            done.append(f"{verdict} at {n}" if verdict != "open" else f"open at {n} (the stream ended)")
            start += n
        out[name] = done
    return out
