"""Every ``module.name`` the code reads from one of its own modules exists there.

A move that leaves a caller behind fails only when the caller runs; under the page's guard such a failure
reads as a visitor's malformed call (``lecture.frame_for_room``, left in app.py by a move, broke every
presenter's key in lecture mode). This reads the source, imports each project module it names, and checks
each attribute read of it, so a move that leaves a caller behind fails here.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specrej", "components")


def sources():
    yield ROOT / "app.py"
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def own_module_names(tree: ast.Module, here: str, is_package: bool) -> dict[str, str]:
    """The names a module binds to one of the project's modules (``from components import lecture``,
    ``import specrej.core.cost as cost``, ``from . import x``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES and a.asname:
                    out[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".") if is_package else here.split(".")[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            if base.split(".")[0] not in PACKAGES:
                continue
            for a in node.names:
                candidate = f"{base}.{a.name}"
                try:
                    importlib.import_module(candidate)
                except ModuleNotFoundError:
                    continue   # a name from the module, not a submodule
                out[a.asname or a.name] = candidate
    return out


def missing_names(path: Path, here: str) -> tuple[list[str], int]:
    """The attribute reads of the project's modules in the file at ``path`` (module ``here``) that those
    modules lack, and how many reads were checked."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules = own_module_names(tree, here, path.name == "__init__.py")
    missing, checked = [], 0
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and not isinstance(node.ctx, ast.Store)):
            checked += 1
            if not hasattr(importlib.import_module(modules[node.value.id]), node.attr):
                missing.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return missing, checked


def test_every_attribute_read_of_an_own_module_exists():
    missing, checked = [], 0
    for path in sources():
        m, n = missing_names(path, module_name(path) if path.name != "app.py" else "app")
        missing, checked = missing + m, checked + n
    assert checked > 100   # the walk found the code's reads
    assert not missing, missing


def test_the_check_finds_a_name_a_move_left_behind(tmp_path):
    bad = tmp_path / "moved.py"
    bad.write_text("from components import lecture\n\n\ndef f(x):\n    return lecture.for_room(lecture.frame_for_room(x))\n")
    assert missing_names(bad, "components.moved") == (["moved.py:5: lecture.frame_for_room"], 2)


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` (a folder under the repository, e.g. 'specrej/core') it imports, at the
    top or inside a function: ``from a.b import c`` counts ``a.b.c`` where that is a module, else ``a.b``."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = {p: ".".join(p.relative_to(root).with_suffix("").parts) for p in (root / package).rglob("*.py")}
    names = {p: n[:-len(".__init__")] if n.endswith(".__init__") else n for p, n in names.items()}
    modules = set(names.values())
    graph = {}
    for path, name in names.items():
        package_ = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package_.split(".")[:len(package_.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    out.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
            elif isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
        graph[name] = (out & modules) - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle a depth-first walk of ``graph`` meets, as 'a -> b -> a'."""
    seen, path_, found = {}, [], []

    def visit(n):   # depth first: a module met again while on the path closes a circle
        seen[n] = "open"
        path_.append(n)
        for t in sorted(graph.get(n, ())):
            if seen.get(t) == "open":
                found.append(" -> ".join(path_[path_.index(t):] + [t]))
            elif t not in seen:
                visit(t)
        path_.pop()
        seen[n] = "done"

    for n in sorted(graph):
        if n not in seen:
            visit(n)
    return found


def test_the_core_imports_no_module_in_a_circle():
    """Issue 48 (6): core/about.py, core/settings.py and core/config.py imported each other in a circle (config
    reached about inside two methods to get round it). Every import in specrej/core, at the top or inside a function,
    now runs one way: the field checks they share are core/checks.py."""
    graph = import_graph("specrej/core")
    assert circles(graph) == []
    assert "specrej.core.checks" in graph and not graph["specrej.core.checks"]


def test_the_components_import_no_module_in_a_circle():
    """Issue 61 (1): components/session's context -> pace -> paper -> planner -> stream -> context was held apart
    only by imports inside functions (context.py had 15). Every import in components/, at the top or inside a
    function, now runs one way: the warm-up is the start-up room's (``startup.py``), the planner holds the request's
    checks, and ``context.py`` is plain data that imports no other room of the session."""
    graph = import_graph("components")
    assert circles(graph) == []
    assert graph["components.session.context"] <= {"components.session.profile", "components.session.worker",
                                                    "components.deploy.limits", "components.state.shared"}
    assert "components.session.stream" not in graph["components.session.planner"]
