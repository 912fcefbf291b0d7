"""The scheduling core on its own: the KV budget's arithmetic and the decision rules, no model.

The methods and the simulator both run on these objects, so a slip here shows in both; these tests
pin the rules themselves, with numbers worked out by hand."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specrej import RunConfig
from specrej.core.budget import AUTO_MAX_ROWS, BudgetError, KVBudget
from specrej.core.decisions import EveryK, MemoryFull, Moment, keep_count, rule_for
from specrej.core.rules import Contender, rank

ROOT = Path(__file__).resolve().parents[1]


def test_budget_counts_the_shared_prompt_once_and_a_copied_one_per_row():
    shared, copied = KVBudget(100, 10, True), KVBudget(100, 10, False)
    assert shared.slots(3, 5) == 10 + 3 * 5 and copied.slots(3, 5) == 3 * (10 + 5)
    assert shared.fits(18, 5) and not shared.fits(19, 5)        # 10 + 18 * 5 = 100
    assert copied.fits(6, 15) and not copied.fits(7, 15)        # per_row already holds the prompt copy
    assert shared.cap(5) == 18 and copied.cap(15) == 6
    assert shared.rows_that_fit(5) == 18 and copied.rows_that_fit(5) == 100 // 15
    assert KVBudget(5, 10, True).rows_that_fit(1) == 0          # not even the prompt fits


def test_auto_n_and_rows_per_pass():
    kv = KVBudget(2048, 48, True)
    assert kv.auto_n(16) == 125                                  # 48 + 125 * 16 = 2048
    assert KVBudget(10**9, 1, True).auto_n(1) == AUTO_MAX_ROWS
    assert kv.rows_per_pass(None, 256) == 2000 // 255 and kv.rows_per_pass(4, 256) == 4
    assert KVBudget(10, 48, True).rows_per_pass(None, 256) == 1  # always at least one row
    cfg = kv.resolve_n(RunConfig(prompt="x", n="auto", first_decision=16))
    assert cfg.n == 125
    with pytest.raises(BudgetError, match="first_decision"):
        KVBudget(40, 48, True).resolve_n(RunConfig(prompt="x", n="auto"))


def test_memory_full_is_due_only_when_the_next_token_overflows():
    kv = KVBudget(100, 10, True)
    rule = MemoryFull(0.5)
    assert not rule.due(Moment(0, 50, 1, 0, kv))                 # never before the first token
    assert not rule.due(Moment(4, 18, 5, 0, kv))
    assert rule.due(Moment(4, 19, 5, 0, kv))


def test_every_k_is_due_every_k_tokens_and_when_memory_is_full():
    kv = KVBudget(10**6, 10, True)
    rule = EveryK(0.5, k=8)
    assert [g for g in range(0, 20) if rule.due(Moment(g, 4, g + 1, 8 if g > 8 else 0, kv))] == [8, 16, 17, 18, 19]
    assert EveryK(0.5, k=100).due(Moment(3, 10**6, 4, 0, kv))   # memory full decides too


def pool(scores: dict[int, float], finished: bool = False) -> list[Contender]:
    return [Contender(c, s, 8, finished) for c, s in scores.items()]


def test_select_ranks_live_and_finished_together_and_memory_can_force_more():
    live, finished = pool({0: 0.1, 1: 0.9, 2: 0.5, 3: 0.5}), pool({7: 0.7}, finished=True)
    sel = MemoryFull(0.5).select(live, finished, cap=10)
    assert keep_count(0.5, 5) == 2 and sel.kept == (1, 7) and sel.kept_live == (1,)
    assert set(sel.pruned) == {0, 2, 3} and not sel.forced and sel.threshold == 0.7
    assert rank({3: 0.5, 2: 0.5, 1: 0.9}) == [1, 2, 3]            # ties go to the lower id
    kept_finished = MemoryFull(0.5, keep_finished=True).select(live, finished, cap=10)
    assert 7 not in kept_finished.kept + kept_finished.pruned    # finished ones stay out of the ranking
    assert kept_finished.kept_live == (1, 2)
    forced = MemoryFull(0.0).select(live, [], cap=2)
    assert forced.forced and forced.kept_live == (1, 2) and forced.pruned == (3, 0) and forced.threshold == 0.5
    assert MemoryFull(0.99).select(pool({4: 1.0}), [], cap=1).kept == (4,)   # at least one is kept


def test_rule_for_reads_the_config():
    assert rule_for(RunConfig(prompt="x", alpha=0.3)) == MemoryFull(0.3)
    assert rule_for(RunConfig(prompt="x", decision="interval", interval=4, keep_finished=True)) == EveryK(0.5, True, 4)


@pytest.mark.parametrize("folder", ["specrej/core", "specrej/methods"])
def test_the_scheduling_core_and_the_methods_do_not_import_torch(folder):
    for path in (ROOT / folder).rglob("*.py"):   # packages inside (core/rules/) too
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("torch", "transformers") for n in names), f"{path} imports {names}"
            if isinstance(node, ast.ImportFrom) and node.level:
                assert not (node.module or "").startswith("backends.hf"), f"{path} reaches past the Backend protocol"


IMPORT_EACH_CORE_MODULE = """
import importlib, json, pkgutil, sys
import specrej.core
out = {}
for m in sorted(pkgutil.iter_modules(specrej.core.__path__, "specrej.core.")):
    importlib.import_module(m.name)
    out[m.name] = sorted(k for k in ("torch", "transformers", "gradio", "plotly") if k in sys.modules)
print(json.dumps(out))
"""


def test_importing_every_core_module_loads_no_torch():
    """In a fresh interpreter, importing ``specrej.core`` and each of its modules (through the package's
    ``__init__``, as a user's import does) leaves torch, transformers and the app's libraries unloaded."""
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH_CORE_MODULE], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"specrej.core.budget", "specrej.core.config", "specrej.core.events", "specrej.core.rules",
            "specrej.core.decisions", "specrej.core.cost"} <= set(loaded)
    assert all(not heavy for heavy in loaded.values()), {m: h for m, h in loaded.items() if h}


def test_core_imports_nothing_above_it():
    """``specrej.core`` modules import only from ``specrej.core`` (relative imports stay in the folder)."""
    for path in (ROOT / "specrej" / "core").rglob("*.py"):
        depth = len(path.relative_to(ROOT / "specrej" / "core").parts)   # 1: core/x.py, 2: core/rules/x.py
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= depth, f"{path.name} imports from above core: {'.' * node.level}{node.module}"
                assert node.level or not (node.module or "").startswith("specrej") or \
                    (node.module or "").startswith("specrej.core"), f"{path.name} imports {node.module}"
