"""The layout's rules, checked on the source (docs/architecture.md).

- layers import downward only: maths <- engine <- experiments <- app <- cli, and no module of
  cactus_core imports Streamlit;
- no function in app.py, pages/ or cactus_core/ is longer than 80 lines, no module longer than
  600;
- the names of the rules other than the defaults (sps, cactus) appear as string literals only
  in the rules package: everything else reads them from the rules' metadata.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULE_NAMES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cactus_core"
LAYERS = ["maths", "engine", "experiments", "app", "cli"]
SOURCES = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted(PACKAGE.rglob("*.py"))]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _layer(path: Path) -> int | None:
    rel = path.relative_to(PACKAGE).parts
    name = rel[0].removesuffix(".py")
    return LAYERS.index(name) if name in LAYERS else None


def _imports(tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_layers_import_downward_only(path: Path) -> None:
    own = _layer(path)
    for module in _imports(_tree(path)):
        assert not module.startswith("streamlit"), f"{path} imports Streamlit"
        parts = module.split(".")
        if parts[0] != "cactus_core" or len(parts) < 2 or own is None:
            continue
        other = LAYERS.index(parts[1]) if parts[1] in LAYERS else None
        if other is not None:
            assert other <= own, f"{path.relative_to(ROOT)} imports {module} (a higher layer)"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_functions_and_modules_stay_short(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600, f"{path.relative_to(ROOT)} is over 600 lines"
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            assert length <= 80, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_rule_names_live_in_the_rules_package(path: Path) -> None:
    if (PACKAGE / "maths" / "rules") in path.parents:
        return
    others = set(RULE_NAMES) - {LOSSLESS_RULE, DEFAULT_RULE}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value not in others, (
                f"{path.relative_to(ROOT)}:{node.lineno} names the rule {node.value!r}; read it "
                "from the rules' metadata instead"
            )


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(tree: ast.Module, modules: set[str]) -> set[str]:
    """The cactus_core modules a module imports outside its functions (TYPE_CHECKING blocks
    included: a type-only cycle still ties two modules together); `from pkg import mod`
    counts as importing pkg.mod."""
    out: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If | ast.Try):
            todo += node.body + node.orelse + getattr(node, "finalbody", [])
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            out |= (subs & modules) or {node.module}
    return out


def test_cactus_core_has_no_import_cycles() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _module_level_imports(_tree(p), modules) for p in paths}
    # A package's __init__ importing its own modules is how packages work, not a cycle.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
