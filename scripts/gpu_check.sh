#!/usr/bin/env bash
# The GPU check, for the machine this project can be lent: one GPU, no network, its own torch and transformers.
#   bash scripts/gpu_check.sh              # on the GPU machine: writes $OUT (default ./gpu_out)
#   DRY=1 bash scripts/gpu_check.sh        # the CPU dry run: every stage, tiny configs, device cpu (a test runs it)
# Nothing is installed or fetched: the checkout goes on PYTHONPATH and the machine's python3 is used as it is
# (it needs torch and transformers). Models are built there with random weights from assets/configs/ (SmolLM2-135M,
# Llama-3-8B). Stages, in order of value, each in its own process with its own time limit (all within ~8 minutes;
# a stage that fails or runs out of time leaves the next ones to run), every one adding to one JSON
# ($OUT/gpu_steps.json, written after every figure) and keeping its whole log ($OUT/<stage>.log, tracebacks in full):
#   0. the machine: GPU, Python, torch, transformers;
#   a. smoke: the 135M config's captured step at 1 and 8 rows, its replay equal to the same body uncaptured across
#      a prune; where it fails, a bisect: the sampling, the forward and the whole step each captured alone, each in
#      its own process (a failed capture can leave a process unable to capture again);
#   b. ceilings: the device's copy bandwidth and matmul rate (each step's roofline);
#   c. sweep: the step eager, compiled and captured at 1-1024 rows, the 8B config first, then the 135M;
#   d. races: a coupled race of both methods per variant on the 135M config (SR's tokens against BoN's);
#   e. anchors: transformers' static-cache generate, warmed at every length it times, at 1 and 64 rows;
#   f. paper: Best-of-2048 against Speculative Rejection (n=auto) at 256 tokens on the 8B config, captured, with
#      the device's default budget (memplan.arm_budget);
#   g. fused, an experiment, with the time left: the body fused by inductor then captured (SPECREJ_FUSE=1): its
#      compile, its smoke, one step's kernels, its sweep;
#   then, with the time left, the CUDA tests with tiny models.
# After a real run, commit $OUT's JSON and logs under assets/gpu/ (docs/performance.md, the GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export GRADIO_ANALYTICS_ENABLED=False
PY="${PYTHON:-python3}"
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-$([ "${DRY:-0}" = 1 ] && echo 1500 || echo 480)}"   # a CPU dry run on a busy CI machine: slack
JSON="$OUT/gpu_steps.json"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
rm -f "$JSON"
say() { echo "== $*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( DEADLINE_S - $(elapsed) )); }

if [ "${DRY:-0}" = 1 ]; then   # every stage on the CPU, tiny configs, a few steps
  COMMON=(--device cpu --tiny --rows 1 8 32 --steps 2 --anchor-rows 1 --paper-n 64 --paper-tokens 16)
  # stage:seconds; the bisect runs whatever the smoke says (so the dry run checks it too)
  # (not the fused experiment: inductor compiles its four shapes for ~2-5 minutes on a 2-core CPU;
  # tests/test_captured.py checks the fused body, and `--stage fused --device cpu --tiny` runs the stage)
  STAGES="smoke:240 ceilings:60 sweep:360 races:180 anchors:180 paper:180"   # slack for a busy CI machine
else
  COMMON=()
  STAGES="smoke:75 ceilings:25 sweep:170 races:50 anchors:80 paper:100 fused:150"
fi

# stage NAME LIMIT [ARGS...]: one stage in its own process, within LIMIT seconds and what is left of the deadline
stage() {
  local name="$1" limit="$2" tag="$1"; shift 2
  [ "$name" = bisect ] && tag="bisect-$2"
  local t=$(( $(left) < limit ? $(left) : limit ))
  if [ "$t" -lt 5 ]; then
    say "$tag: skipped, the check's ${DEADLINE_S}s are spent"
    return 0
  fi
  say "$tag [t=$(elapsed)s, limit ${t}s]"
  timeout --kill-after=10 "$t" "$PY" scripts/gpu_check.py --stage "$name" "${COMMON[@]}" "$@" \
    --deadline-s "$(( t > 20 ? t - 10 : t ))" --out "$JSON" > "$OUT/$tag.log" 2>&1
  local rc=$?
  case $rc in
    0) say "$tag: ok" ;;
    124|137) say "$tag: TIMED OUT after ${t}s (exit $rc; what it measured is in the JSON, its log in $tag.log)" ;;
    *) say "$tag: FAILED (exit $rc; traceback in $tag.log)" ;;
  esac
  grep -E "rows:|race|ceilings|smoke|bisect|FAILED|Error" "$OUT/$tag.log" | grep -v Warning | tail -40 | tee -a "$SUMMARY"
  return $rc
}

say "gpu_check started $(date -u +%FT%TZ) in $PWD (DRY=${DRY:-0}, deadline ${DEADLINE_S}s)"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi not found") \
  | tee -a "$SUMMARY"
timeout 60 "$PY" - <<'PYEOF' 2>&1 | tee -a "$SUMMARY"
import importlib, platform
print("   python", platform.python_version())
for mod in ("torch", "transformers", "pytest"):
    try:
        m = importlib.import_module(mod)
        print(f"   {mod:<13}{getattr(m, '__version__', 'ok')}")
    except Exception as e:
        print(f"   {mod:<13}MISSING ({type(e).__name__})")
import torch
print("   cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PYEOF

for entry in $STAGES; do
  name="${entry%%:*}" limit="${entry##*:}"
  stage "$name" "$limit"
  rc=$?
  if [ "$name" = smoke ] && { [ "$rc" != 0 ] || [ "${DRY:-0}" = 1 ]; }; then
    for piece in sampling forward step; do   # what of the step a capture refuses, each piece in its own process
      stage bisect 40 --piece "$piece"
    done
  fi
done

if [ "${DRY:-0}" != 1 ] && [ "$(left)" -gt 60 ]; then
  say "tests: the CUDA tests with tiny models [t=$(elapsed)s]"
  timeout "$(( $(left) - 5 ))" "$PY" -m pytest -q -p no:cacheprovider tests/test_captured.py tests/test_memplan.py \
    tests/test_engine.py tests/test_compiled.py > "$OUT/tests.log" 2>&1
  say "tests exit code $? (log: tests.log)"
  tail -4 "$OUT/tests.log" | tee -a "$SUMMARY"
fi
"$PY" - "$JSON" <<'PYEOF' 2>&1 | tee -a "$SUMMARY"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"no JSON ({type(e).__name__}: {e})")
print("   stages:", ", ".join(f"{k} {v.get('status')}" for k, v in r.get("stages", {}).items()))
print("   errors:", len(r.get("errors", [])), *(f"\n     {e[:200]}" for e in r.get("errors", [])))
PYEOF
say "done in $(elapsed)s; outputs in $OUT"
