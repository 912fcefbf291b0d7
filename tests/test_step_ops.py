"""The ops a captured step issues (issue 60, 4), counted on a CPU for the 8B config's layer structure
(``scripts/step_ops.py``): the figure docs/performance.md gives, kept from growing unseen."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import step_ops  # noqa: E402


def test_the_8b_step_issues_about_65_computing_ops_a_layer():
    count = step_ops.step_ops("llama-3-8b", rows=8)
    n = sum(count.ops.values())
    assert 1500 < n <= 2100, n                  # 2,071 on 2026-12-07, before fusion (target <= 450 after)
    assert count.ops["linear"] == 32 * 4 + 1    # q/k/v fused, o, gate/up fused, down; the head
    assert count.ops["bmm"] == 2 * 32           # the prompt's part of the attention, scores and values
    assert count.ops["index_copy_"] == 2 * 32   # each layer's key and value written in place
    assert count.views > 0
