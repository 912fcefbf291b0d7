#!/usr/bin/env bash
# The wheel as a user gets it: build it, check what it carries (the package data the library reads, no
# top-level components/), install it into a clean virtual environment and race on the embedded model with
# the calibrated rule from a folder outside the checkout, so nothing resolves through the source tree.
# The lock's torch goes in first (torch==2.13.0 from requirements.txt): the package's range would
# otherwise pull the newest, multi-GB CUDA build; the wheel's other ranges resolve as a user's would.
# WHEEL_DIR keeps the work folder (default: a temporary one, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${WHEEL_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/specrej-wheel.XXXXXX")}"
[ -n "${WHEEL_DIR:-}" ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"
rm -rf "$WORK/dist" "$WORK/venv" "$WORK/run"
# Built from a copy of the files git tracks or would track, so no stale build/ folder or stray file rides along.
rm -rf "$WORK/src" && mkdir -p "$WORK/src"
git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -x -C "$WORK/src"
python -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/specrej-*.whl)
echo "wheel: $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"
python - "$WHEEL" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({n.split("/")[0] for n in names})
assert tops == ["specrej", "specrej-0.1.0.dist-info"], f"top-level entries: {tops}"
need = ["specrej/data/rules/calibrated.json", "specrej/data/prompts/default.jsonl", "specrej/data/prompts/quick.jsonl"]
missing = [n for n in need if n not in names]
assert not missing, f"the wheel lacks {missing}"
print(f"wheel holds {len(names)} files; top level {tops}; package data {need}")
PY
python -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install -q "torch==$(sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.txt)"
"$PY" -m pip install -q "$WHEEL"
"$PY" -m pip install -q --no-deps -r requirements-embedded.txt
mkdir -p "$WORK/run" && cd "$WORK/run"
"$PY" - <<'PY'
import importlib.util, sys
import specrej
from specrej.core.rules import RULES
assert "site-packages" in specrej.__file__, specrej.__file__
assert "calibrated" in RULES, sorted(RULES)
absent = [m for m in ("components", "gradio", "plotly") if importlib.util.find_spec(m) is not None]
assert not absent, f"installed beside the library: {absent}"
print("installed:", specrej.__file__, "rules:", sorted(RULES))
PY
"$WORK/venv/bin/specrej" --prompt "Name three rivers and one fact about each." --arms bon:n=4 sr:n=auto,rule=calibrated \
  --max-new-tokens 16 --json race.json --quiet > summary.txt 2> race.err
# warning-free on the newest transformers and accelerate the ranges admit (what pip resolves here; the lock's
# are older): a FutureWarning or a deprecation printed on every run fails the check, with its lines
if grep -E "Warning|deprecated" race.err; then
  echo "the race above printed warnings on $("$PY" -c 'import transformers as t, accelerate as a; print("transformers", t.__version__, "accelerate", a.__version__)')" >&2
  exit 1
fi
"$PY" - <<'PY'
import json
trace = json.load(open("race.json"))
arms = {a["id"]: a for a in trace["arms"]}
assert arms["sr"]["config"]["rule"] == "calibrated", arms["sr"]
rounds = [e for e in trace["events"] if e["event"] == "round" and e["arm"] == "sr"]
finished = {e["arm"] for e in trace["events"] if e["event"] == "finished"}
assert rounds and finished == {"bon", "sr"}, (len(rounds), finished)
import transformers
print(f"race from outside the checkout: sr:rule=calibrated took {len(rounds)} decision(s); both arms finished; "
      f"no warning on transformers {transformers.__version__}")
PY
