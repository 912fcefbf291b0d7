"""The page wing imports one way: presentation -> state <- session (``components/__init__.py``).

Read from each file's own imports (``ast``), so a new upward import fails here, before anyone draws the
structure: the run's state imports only ``specrej``; the runtime never imports presentation; presentation
never imports the runtime (an import under ``if TYPE_CHECKING:`` is a type hint, not an import at run time).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = ROOT / "components"
PRESENTATION = {"ui", "charts", "panels", "frames", "looks", "theme", "links", "autospec_tab", "lecture"}


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports at run time, as an absolute dotted name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    hidden = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
              and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}   # `from . import charts`
    return out


def room(module: str) -> str | None:
    """presentation | state | session | deploy for a ``components`` module, else None."""
    parts = module.split(".")
    if parts[0] != "components" or len(parts) < 2:
        return None
    if parts[1] in ("state", "session", "deploy"):
        return parts[1]
    return "presentation" if parts[1] in PRESENTATION else None


FILES = sorted(p for p in COMPONENTS.rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_file_imports_one_way(path):
    mine = room("components." + ".".join(path.relative_to(COMPONENTS).with_suffix("").parts))
    rooms = {m: room(m) for m in imported(path)}
    if mine == "state":
        outside = sorted(m for m in rooms if m.split(".")[0] == "components" and rooms[m] not in ("state", None)
                         or m.split(".")[0] in ("gradio", "plotly", "torch"))
        assert not outside, f"the run's state imports only specrej: {outside}"
    if mine == "session":
        assert not [m for m, r in rooms.items() if r == "presentation"], "the runtime imports presentation"
    if mine == "presentation":
        assert not [m for m, r in rooms.items() if r == "session"], "presentation imports the runtime"


def test_the_reader_sees_a_relative_import_as_the_module_it_names(tmp_path):
    """The test's own reader, on a file it can be wrong about."""
    assert room("components.session.stream") == "session" and room("components.frames") == "presentation"
    found = imported(COMPONENTS / "session" / "stream.py")
    assert "components.state.update" in found and "components.session.context" in found
