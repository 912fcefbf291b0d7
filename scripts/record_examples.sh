#!/usr/bin/env bash
# Record the paper-scale race of every example prompt (assets/examples.json) into assets/recordings/,
# for instant replay in the app. Same settings as the app's "Paper scale" preset (components/session/recordings.py):
# Best-of-128 in the passes that fit, Speculative Rejection opening with the rows that fill the budget at
# token 16, 256 new tokens, budget 2048 KV slots, alpha 0.5, the self-certainty reward. Best-of-N writes all
# 128 answers (its curve over N is the verdict's yardstick), and the recording keeps this machine's measured
# decoding step (the verdict's clock). Usage: bash scripts/record_examples.sh [extra flags for python -m specrej record]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-assets/recordings}
mkdir -p "$out"
python - <<'PY' | while IFS=$'\t' read -r slug prompt; do
import json, re
for p in json.load(open("assets/examples.json")):
    print(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-")[:40] + "\t" + p)
PY
  echo "recording: $prompt" >&2
  python -m specrej record --out "$out/$slug.json.gz" --prompt "$prompt" \
    --arms bon:n=128 sr:n=auto,first_decision=16 --alpha 0.5 --max-new-tokens 256 --budget 2048 \
    --reward self-certainty --quiet "$@"
done
du -sh "$out"
