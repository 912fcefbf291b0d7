#!/usr/bin/env bash
# The GPU check, for the machine this project can be lent: one GPU, no network, its own torch and transformers.
#   bash scripts/gpu_check.sh              # on the GPU machine: writes $OUT (default ./gpu_out)
#   DRY=1 bash scripts/gpu_check.sh        # the CPU dry run (tiny configs, device cpu; CI runs it)
# Nothing is installed or fetched: the checkout goes on PYTHONPATH and the machine's python3 is used as it is
# (it needs torch, transformers and, for step 1, pytest). Models are built there with random weights from
# assets/configs/ (SmolLM2-135M, Llama-3-8B). Steps, each with its own time limit (all within ~8 minutes):
#   0. the machine: GPU, Python, torch, transformers, accelerate;
#   1. the CUDA tests with tiny models (tests/test_engine.py, test_compiled.py, test_captured.py, test_methods.py);
#   2. scripts/gpu_check.py: the device's copy and matmul ceilings; transformers' static-cache generate at 1
#      and 64 rows; the step sweep at 1, 8, 32, 128, 512, 1024 rows, eager, compiled and captured (one CUDA
#      graph a step), each with its ratio to the roofline and to transformers' path, for both configs; a coupled
#      race of both methods per variant on the random 135M model; a paper-scale race on the 8B config;
#      one JSON ($OUT/gpu_steps.json), written after every measurement.
# After a real run, commit the JSON as assets/gpu/<device>-<date>.json (docs/performance.md, the GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export GRADIO_ANALYTICS_ENABLED=False
PY="${PYTHON:-python3}"
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-470}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "== $*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( DEADLINE_S - $(elapsed) )); }

say "gpu_check started $(date -u +%FT%TZ) in $PWD (DRY=${DRY:-0})"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi not found") \
  | tee -a "$SUMMARY"
"$PY" - <<'PYEOF' 2>&1 | tee -a "$SUMMARY"
import importlib, platform
print("   python", platform.python_version())
for mod in ("torch", "transformers", "accelerate", "pytest"):
    try:
        m = importlib.import_module(mod)
        print(f"   {mod:<13}{getattr(m, '__version__', 'ok')}")
    except Exception as e:
        print(f"   {mod:<13}MISSING ({type(e).__name__})")
import torch
print("   cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PYEOF

if [ "${DRY:-0}" = 1 ]; then
  say "1. tests: skipped in the dry run (CI runs the whole suite)"
  timeout "$(left)" "$PY" scripts/gpu_check.py --device cpu --tiny --rows 1 8 32 --steps 2 --anchor-rows 1 \
    --paper-n 64 --paper-tokens 16 \
    --deadline-s "$(( $(left) - 10 ))" --out "$OUT/gpu_steps.json" 2>&1 | grep -v Warning | tee "$OUT/gpu_check.log"
else
  say "1. CUDA tests with tiny models [t=$(elapsed)s]"
  timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_engine.py tests/test_compiled.py tests/test_captured.py tests/test_methods.py \
    > "$OUT/tests.log" 2>&1
  say "tests exit code $? (log: tests.log)"
  tail -4 "$OUT/tests.log" | tee -a "$SUMMARY"
  say "2. step sweep and coupled race [t=$(elapsed)s]"
  timeout "$(left)" "$PY" scripts/gpu_check.py --deadline-s "$(( $(left) - 40 ))" --out "$OUT/gpu_steps.json" \
    > "$OUT/gpu_check.log" 2>&1
  say "gpu_check.py exit code $? (log: gpu_check.log)"
  grep -E "rows:|race|ceilings|FAILED|wrote" "$OUT/gpu_check.log" | tee -a "$SUMMARY"
fi
say "done in $(elapsed)s; outputs in $OUT"
