"""The repository's layout and layering: the engines' adapters are leaves at the root, written against
``diffinterface.extend`` alone; the package's groups stand on floors, each importing only groups below
it (imports inside functions included), with no import circle."""

from __future__ import annotations

import ast
import pathlib
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The floors of the package's groups, from the ground up: a group imports only groups on lower floors.
# ``backends`` (the root folder, installed as diffinterface.backends) is the top floor: it imports
# diffinterface.extend and nothing else of the package, and nothing of the package imports it (the
# registry loads an adapter by the dotted path its config names).
FLOORS = {
    "_core": 1,  # arrays and families, contexts, errors, structures, configs and the registry
    "_closures": 2,  # captured state: walker, plan, stand-ins
    "_adapters": 3,  # the adapter contract and its fallbacks
    "_frontend": 4,  # the pipeline every operator runs
    "first_order": 5,
    "second_order": 5,
    "rules": 6,  # custom rules and DifferentiateWith (call the operators)
    "sparse": 6,  # AutoSparse (calls the operators)
    "scipy": 7,
    "testing": 7,
    "extend": 7,  # the kit, re-exported from the groups below
    "__init__": 7,  # the public API, re-exported
    "bench": 8,
    "__main__": 9,
    "backends": 10,
}
# Imports allowed to run back up a floor, each explained in the module that holds it (at most 3).
BACK_UP: set[tuple[str, str]] = set()


def _package_modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in (ROOT / "diffinterface").rglob("*.py"):
        parts = ["diffinterface", *path.relative_to(ROOT / "diffinterface").with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _backend_modules() -> dict[str, pathlib.Path]:
    return {
        "diffinterface.backends" + ("" if p.stem == "__init__" else "." + p.stem): p
        for p in (ROOT / "backends").glob("*.py")
    }


def _modules() -> dict[str, pathlib.Path]:
    return {**_package_modules(), **_backend_modules()}


def _import_targets(module: str, path: pathlib.Path) -> list[tuple[str, str]]:
    """Every ``(module, name)`` that ``module`` imports (name "" for ``import m``), also inside functions."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names]
    return out


def _imports(module: str, path: pathlib.Path, mods: dict) -> set:
    out = set()
    for target, name in _import_targets(module, path):
        full = f"{target}.{name}"
        out.add(full if full in mods else target)
    return {m for m in out if m in mods and m != module}


def _group(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _graph() -> dict[str, set]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


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
    graph = _graph()
    assert "diffinterface._core.configs" in graph["diffinterface._adapters.second_order"]  # the parser sees imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _running_up(graph: dict) -> set:
    """The imports from a group to one on the same floor or above it."""
    return {
        (module, other)
        for module, imported in graph.items()
        for other in imported
        if _group(other) != _group(module) and FLOORS[_group(other)] >= FLOORS[_group(module)]
    }


def test_each_group_imports_only_groups_below_it():
    graph = _graph()
    assert set(map(_group, graph)) <= set(FLOORS), "a new group: give it a floor in FLOORS"
    assert _running_up(graph) == BACK_UP
    assert len(BACK_UP) <= 3


def test_the_floor_check_sees_an_import_running_up():
    graph = {
        "diffinterface._core.arrays": {"diffinterface._frontend.pipeline"},
        "diffinterface._frontend.pipeline": set(),
    }
    assert _running_up(graph) == {("diffinterface._core.arrays", "diffinterface._frontend.pipeline")}


def test_the_root_holds_the_layout_the_user_asked_for():
    """pyproject.toml, diffinterface/, backends/, tests/, benchmarks/, noxfile.py at the root; the engines'
    adapters in backends/, installed as diffinterface.backends (not a folder of the package)."""
    for name in ("pyproject.toml", "diffinterface", "backends", "tests", "benchmarks", "noxfile.py"):
        assert (ROOT / name).exists(), name
    assert (ROOT / "backends" / "__init__.py").exists()
    assert not (ROOT / "diffinterface" / "backends").exists()
    for engine in ("jax", "torch", "autograd", "finitediff"):
        assert (ROOT / "backends" / f"{engine}.py").exists() and (ROOT / "backends" / f"{engine}_bench.py").exists()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"diffinterface.backends": "backends"}
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "diffinterface").rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders | {"diffinterface.backends"}, "pyproject.toml lists every package"


@pytest.mark.parametrize("engine", ["jax", "torch", "autograd", "finitediff"])
def test_the_adapters_import_as_diffinterface_backends(engine):
    """From this install (editable here, a wheel in ``nox -s wheel``), the configs' dotted paths resolve."""
    import importlib.util

    spec = importlib.util.find_spec(f"diffinterface.backends.{engine}")
    assert spec is not None and spec.origin is not None
    assert pathlib.Path(spec.origin).parent.name == "backends"


def test_the_engines_import_only_the_kit():
    """A module under backends/ imports nothing of diffinterface but ``diffinterface.extend`` (and its
    sibling modules): the built-in engines are written as an outside package would write them."""
    for module, path in _backend_modules().items():
        for target, name in _import_targets(module, path):
            if target.startswith("diffinterface.backends"):
                continue  # a sibling engine module
            if target == "diffinterface" or target.startswith("diffinterface."):
                assert target == "diffinterface.extend", f"{path.name} imports {target}.{name}"
                assert not name.startswith("_"), f"{path.name} imports {target}.{name}"


def test_the_engines_check_catches_a_private_import(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("from diffinterface._core.arrays import family\nfrom diffinterface.extend import Adapter\n")
    found = [t for t, _ in _import_targets("diffinterface.backends.mine", path)]
    assert found == ["diffinterface._core.arrays", "diffinterface.extend"]


def test_nothing_in_the_package_imports_an_engine_adapter():
    graph = _graph()
    for module, imported in graph.items():
        if _group(module) != "backends":
            assert not {m for m in imported if _group(m) == "backends"}, module


def test_a_module_over_400_lines_says_why_at_its_top():
    """Issue 19: a long module states, in its docstring, why it is one module ("Size: ...")."""
    for module, path in _modules().items():
        text = path.read_text()
        if text.count("\n") > 400:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            assert "\nSize: over 400 lines in one module, because" in docstring, f"{module}: say why at its top"


def test_the_tree_reads_as_the_architecture():
    """Issue 19: no flat private module beside the public ones; each private module sits in the group
    it belongs to (_core, _closures, _adapters, _frontend)."""
    flat = sorted(
        p.name for p in (ROOT / "diffinterface").glob("_*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert flat == []
    groups = {p.name for p in (ROOT / "diffinterface").iterdir() if (p / "__init__.py").exists()}
    assert {"_core", "_closures", "_adapters", "_frontend", "rules", "sparse", "testing", "bench"} <= groups


# Issue 37 wants bare ``Any`` below 20% of the parameter annotations of diffinterface/ and backends/
# (63% when the issue was filed, 19.4% when the target was reached): lower it as parameters get their
# types, never raise it. An alias of ``Any`` (``Foo = Any``, ``Foo: TypeAlias = "Any"``) counts as
# the bare ``Any`` it is.
BARE_ANY_CEILING = 0.20


def _is_bare_any(annotation: ast.expr, aliases: frozenset[str] = frozenset()) -> bool:
    """``Any`` as written (a name, ``typing.Any``, a string), or a name in ``aliases`` (aliases of Any)."""
    names = {"Any", "typing.Any"} | aliases
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in names
    return (isinstance(annotation, ast.Name) and annotation.id in names) or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any"
    )


def _any_aliases(source: str) -> set[str]:
    """The names a module binds to ``Any`` (``Foo = Any``, ``Foo: TypeAlias = Any`` or ``"Any"``), at
    its top level or under ``if TYPE_CHECKING:``; an annotation naming one is a bare Any too."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            annotation = node.annotation
            is_alias = (isinstance(annotation, ast.Name) and annotation.id == "TypeAlias") or (
                isinstance(annotation, ast.Attribute) and annotation.attr == "TypeAlias"
            )
            if not is_alias:
                continue
            target, value = node.target, node.value
        else:
            continue
        if _is_bare_any(value):
            found.add(target.id)
    return found


def _parameter_annotations(source: str) -> list[ast.expr]:
    """The annotations of every parameter of every function (``*args`` and ``**kwargs`` included)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *[v for v in (a.vararg, a.kwarg) if v]]:
                if arg.annotation is not None:
                    out.append(arg.annotation)
    return out


def _bare_any_share(paths: list[pathlib.Path]) -> tuple[int, int]:
    sources = [p.read_text() for p in paths]
    aliases = frozenset(name for source in sources for name in _any_aliases(source))
    annotations = [a for source in sources for a in _parameter_annotations(source)]
    return sum(_is_bare_any(a, aliases) for a in annotations), len(annotations)


def test_parameter_annotations_are_mostly_typed():
    paths = sorted((ROOT / "diffinterface").rglob("*.py")) + sorted((ROOT / "backends").rglob("*.py"))
    bare, total = _bare_any_share(paths)
    assert total > 1000, total  # the files were found
    assert bare / total < BARE_ANY_CEILING, f"{bare} of {total} parameter annotations are a bare Any"


def test_the_annotation_count_sees_a_bare_any(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import typing\nfrom typing import Any\n"
        "def f(a: Any, b: int, *c: 'Any', d: typing.Any = 1, **e: list[Any]) -> Any: ...\n"
        "async def g(x: float, y) -> None: ...\n"
    )
    assert _bare_any_share([module]) == (3, 6)


def test_the_annotation_count_sees_an_alias_of_any(tmp_path):
    (tmp_path / "aliases.py").write_text(
        "from typing import TYPE_CHECKING, Any, TypeAlias\n"
        "Loose = Any\n"
        "if TYPE_CHECKING:\n    Hidden: TypeAlias = 'Any'\n"
        "Real: TypeAlias = 'int | None'\n"
    )
    (tmp_path / "user.py").write_text(
        "from aliases import Hidden, Loose, Real\ndef f(a: Loose, b: 'Hidden', c: Real, d: int) -> None: ...\n"
    )
    assert _bare_any_share(sorted(tmp_path.glob("*.py"))) == (2, 4)
