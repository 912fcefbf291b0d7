#!/usr/bin/env bash
# Issue 40's four mutants of the verdict's code, each applied to a scratch copy of the tree, and the tests
# that must kill it: every mutant must make a test fail. Run from the repository root:
#   bash tests/mutants_issue40.sh
# Prints "killed" or "SURVIVED" per mutant; exits 1 if any survives.
set -u
root=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tests="tests/test_why.py tests/test_cost.py tests/test_verdict.py"
status=0
mutate() {   # name, file, python expression old, new
  local name=$1 file=$2 old=$3 new=$4
  rm -rf "$scratch/tree" && mkdir -p "$scratch/tree"
  git -C "$root" ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$scratch/tree")
  python - "$scratch/tree/$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
assert text.count(old) == 1, f"{path}: the mutant's site {old!r} is not there once"
open(path, "w").write(text.replace(old, new))
PY
  if (cd "$scratch/tree" && GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 PYTHONPATH=$PWD \
        python -m pytest -q -x -p no:cacheprovider -m "not slow" $tests >"$scratch/log" 2>&1); then
    echo "SURVIVED: $name"; status=1
  else
    echo "killed:   $name ($(grep -m1 -o 'FAILED [^ ]*' "$scratch/log"))"
  fi
}
mutate "why: passes = max(1, n // rows)" specrej/analysis/why.py \
  "passes=len(passes(n, rows))" "passes=max(1, n // rows)"
mutate "verdict.from_race: min(n_kept) for rows per pass" specrej/analysis/verdict.py \
  "rows_per_pass=max(r.n_kept for r in baseline_rounds)" "rows_per_pass=min(r.n_kept for r in baseline_rounds)"
mutate "cost.StepCost: an infinite step time accepted" specrej/core/cost.py \
  "s > 0 and math.isfinite(s)" "s > 0 and not math.isnan(s)"
mutate "why: the opening rows as the number of candidates" specrej/analysis/why.py \
  "opening = max(profile) if profile else len(challenger.candidates)" "opening = len(challenger.candidates)"
exit $status
