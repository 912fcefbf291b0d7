"""A method is data (issue 40): nothing outside ``specrej/methods/`` (and the descriptors' table,
``specrej/core/about.py``, and the registry in ``specrej/arms.py``) branches on a method's name; the page, the
charts, the why box, the request, the cost model and the bench read ``ArmKind.about`` instead."""
from __future__ import annotations

import ast
from pathlib import Path

from specrej.arms import REGISTRY
from specrej.core.about import ABOUTS

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {"specrej/core/about.py", "specrej/arms.py"}


def _method_names() -> set[str]:
    return set(REGISTRY) | set(ABOUTS)


def _branches(path: Path, names: set[str], root: Path = ROOT) -> list[str]:
    """Comparisons (==, !=, in, not in) of anything with a method key literal, and a literal tuple, list or
    set of two or more method keys (a branch waiting to happen: ``method in ("deepconf", "stbon")``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            for side in [node.left, *node.comparators]:
                lits = ([side] if isinstance(side, ast.Constant) else
                        list(side.elts) if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [])
                if any(isinstance(x, ast.Constant) and x.value in names for x in lits):
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
                    break
    return sorted(out)


def test_no_branch_on_a_methods_name_outside_the_methods():
    names = _method_names()
    files = [p for d in ("specrej", "components") for p in (ROOT / d).rglob("*.py")] + [ROOT / "app.py"]
    found = []
    for p in files:
        rel = str(p.relative_to(ROOT))
        if rel.startswith("specrej/methods/") or rel in ALLOWED:
            continue
        found += _branches(p, names)
    assert not found, "branches on a method's name (read ArmKind.about instead): " + ", ".join(found)


def test_the_grep_finds_a_branch_when_there_is_one(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text('def f(arm):\n    return 1 if arm.method == "deepconf" else 2\n'
                   'def g(m):\n    return m in ("sr", "x")\n', encoding="utf-8")
    assert _branches(bad, _method_names(), tmp_path) == ["probe.py:2", "probe.py:4"]


def test_every_registered_method_has_an_about_and_the_rivals_cite_their_papers():
    for key, kind in REGISTRY.items():
        assert kind.about is ABOUTS[key]
        if kind.about.rival:
            assert kind.about.citation and kind.about.paper and kind.about.adaptations
            assert kind.name.endswith(f"({kind.about.citation})") and "-style" in kind.name
