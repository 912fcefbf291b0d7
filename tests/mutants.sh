#!/usr/bin/env bash
# Mutants of the verdict's code, the cost model and the curve (issues 40 and 48), each applied to a scratch copy
# of the tree, and the tests that must kill it: every mutant must make a test fail. Run from the repository root:
#   bash tests/mutants.sh
# Prints "killed" or "SURVIVED" per mutant; exits 1 if any survives. A kill is pytest's exit 1 (a test failed)
# and nothing else: where pytest cannot collect or start (exit 2 to 5), the script says so and stops, exit 2.
set -u
root=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tests="tests/test_why.py tests/test_cost.py tests/test_verdict.py tests/test_curve.py"
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
  [ $? -eq 0 ] || { echo "ERROR:    $name: its site is not in $file once (the code moved?)" >&2; exit 2; }
  (cd "$scratch/tree" && GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 PYTHONPATH=$PWD \
        python -m pytest -q -x -p no:cacheprovider -m "not slow" $tests >"$scratch/log" 2>&1)
  local rc=$?
  case $rc in
    0) echo "SURVIVED: $name"; status=1 ;;
    1) echo "killed:   $name ($(grep -m1 -o 'FAILED [^ ]*' "$scratch/log"))" ;;
    *) echo "ERROR:    $name: pytest exited $rc (it could not collect or run the tests; no mutant was judged)" >&2
       tail -20 "$scratch/log" >&2
       exit 2 ;;
  esac
}
mutate "why: passes = max(1, n // rows)" specrej/analysis/why.py \
  "passes=len(passes(n, rows))" "passes=max(1, n // rows)"
mutate "verdict.from_race: min(n_kept) for rows per pass" specrej/analysis/verdict.py \
  "rows_per_pass=max(r.n_kept for r in baseline_rounds)" "rows_per_pass=min(r.n_kept for r in baseline_rounds)"
mutate "cost.StepCost: an infinite step time accepted" specrej/core/cost.py \
  "s > 0 and math.isfinite(s)" "s > 0 and not math.isnan(s)"
mutate "why: the opening rows as the number of candidates" specrej/analysis/why.py \
  "opening = max(profile) if profile else len(challenger.candidates)" "opening = len(challenger.candidates)"
mutate "verdict: the widest step from the challenger's narrowest" specrej/analysis/verdict.py \
  "max(sr_profile) if sr_profile else" "min(sr_profile) if sr_profile else"
mutate "curve: each prompt's spread measured from 0" specrej/analysis/curve.py \
  "[min(r.scores) for r in runs]" "[0 for r in runs]"
exit $status
