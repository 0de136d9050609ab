"""The package's layering: no import circle among its modules (imports inside functions included)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _modules() -> dict:
    mods = {}
    for path in (ROOT / "diffinterface").rglob("*.py"):
        parts = ["diffinterface", *path.relative_to(ROOT / "diffinterface").with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(module: str, path: pathlib.Path, mods: dict) -> set:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):  # every import, also those inside functions
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                name = f"{target}.{alias.name}"
                out.add(name if name in mods else target)
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return {m for m in out if m in mods and m != module}


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """The second-order fallback works at the adapter level; it no longer calls the public operators,
    which made _adapters.contract -> _adapters.second_order -> first_order -> _frontend -> _adapters a
    circle (then flat modules: _adapter -> _second_order -> first_order -> _frontend -> _adapter)."""
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    assert "diffinterface.backends.configs" in graph["diffinterface._adapters.second_order"]  # the parser sees imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_module_over_400_lines_says_why_at_its_top():
    """Issue 19: a long module states, in its docstring, why it is one module ("Size: ...")."""
    for module, path in _modules().items():
        text = path.read_text()
        if text.count("\n") > 400:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            assert "\nSize: over 400 lines in one module, because" in docstring, f"{module}: say why at its top"


def test_the_tree_reads_as_the_architecture():
    """Issue 19: no flat private module beside the public ones; each private module sits in the group
    it belongs to (_core, _closures, _adapters, _frontend), the adapters inside the package."""
    flat = sorted(
        p.name for p in (ROOT / "diffinterface").glob("_*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert flat == []
    assert not (ROOT / "backends").exists()
    groups = {p.name for p in (ROOT / "diffinterface").iterdir() if (p / "__init__.py").exists()}
    assert {"_core", "_closures", "_adapters", "_frontend", "backends", "rules", "sparse", "testing", "bench"} <= groups
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    # the layering: _core imports nothing above it, _closures only _core
    for module, imported in graph.items():
        if module.startswith("diffinterface._core"):
            assert {m for m in imported if not m.startswith("diffinterface._core")} <= {"diffinterface"}, module
        if module.startswith("diffinterface._closures"):
            assert all(m.startswith(("diffinterface._core", "diffinterface._closures")) for m in imported), module
