"""The layout's rules, checked on the source (docs/architecture.md).

- layers import downward only: maths <- engine <- experiments <- app <- cli, and within the
  engine runtime <- loading <- drafting <- decoding; no module of cactus_core imports
  Streamlit or an integration (integrations/: cactus_vllm, cactus_transformers), which import
  cactus_core, not the other way;
- the app is grouped by page: cactus_core/app/{shared,overview,decode,step,playground,frontier},
  and pages/ with a script per page and its parts in a folder of the same name; a page's
  modules (in either tree) import only their own page's folder and the shared ones, and a
  `shared` folder imports no page's folder;
- pages/ never imports cactus_core.experiments: a page reads it through the app's views;
- no import cycles in cactus_core, pages/ or training/, counting imports inside functions and
  TYPE_CHECKING blocks;
- no function in app.py, pages/ or cactus_core/ is longer than 80 lines, no module longer than
  600;
- the names of the rules other than the defaults (sps, cactus) appear as string literals only
  in the rules package: everything else reads them from the rules' metadata;
- a rule's metadata is four class variables (`name`, its `Param`s, one `RuleCard`, one
  `Capabilities`), and `Rule` stays at most RULE_MEMBERS members.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULE_NAMES, RULES, Param, Rule
from cactus_core.maths.rules.base import Capabilities, RuleCard

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cactus_core"
LAYERS = ["maths", "engine", "experiments", "app", "cli"]
PAGES = ROOT / "pages"
SOURCES = [ROOT / "app.py", *sorted(PAGES.rglob("*.py")), *sorted(PACKAGE.rglob("*.py"))]
PAGE_GROUPS = ["overview", "decode", "step", "playground", "frontier"]
INTEGRATIONS = ("cactus_vllm", "cactus_transformers")  # packages under integrations/
# Rule's class variables and methods, dunders included (33 when this was written: name, card,
# caps, params_spec and 29 methods, of which 5 are the validated whole-row view of DESIGN.md).
RULE_MEMBERS = 34


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
        assert module.split(".")[0] not in INTEGRATIONS, f"{path} imports {module}"
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


def _module_name(path: Path, base: Path = ROOT) -> str:
    """The module's import name, counted from `base` (the folder its top package sits in)."""
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(tree: ast.Module, modules: set[str], package: str) -> set[str]:
    """The modules of `modules` a module imports anywhere: at module level, inside functions
    and in TYPE_CHECKING blocks alike (a cycle hidden in a function is still a cycle, and a
    type-only one still ties two modules together); `from pkg import mod` counts as importing
    pkg.mod, and relative imports resolve against `package`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base not in modules:
                continue
            subs = {f"{base}.{a.name}" for a in node.names}
            out |= (subs & modules) or {base}
    return out


def _cycle(paths: list[Path], base: Path = ROOT) -> list[str] | None:
    """The first import cycle among these modules (function-level imports included), their
    names counted from `base`."""
    names = {_module_name(p, base): p for p in paths}
    modules = set(names)
    graph = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imported_modules(_tree(path), modules, package)
    # A package's __init__ importing its own modules is how packages work, not a cycle.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [name])):
            return found
    return None


def test_cactus_core_has_no_import_cycles() -> None:
    cycle = _cycle(sorted(PACKAGE.rglob("*.py")))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_pages_have_no_import_cycles() -> None:
    cycle = _cycle(sorted(PAGES.rglob("*.py")))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("root", [PACKAGE / "app", PAGES], ids=["app", "pages"])
def test_the_app_is_grouped_by_page(root: Path) -> None:
    """cactus_core/app: one folder per page and one shared folder. pages/: one script per page
    (directly in pages/, where Streamlit's legacy mode finds a deep link's page) and a folder
    for a page's parts where it has any. A page's modules import no other page's folder, and a
    shared folder imports no page's folder (in either tree)."""
    folders = {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}
    scripts = {p.stem for p in root.glob("*.py")} - {"__init__"}
    if root == PAGES:
        # the Overview is app.py's function page (pages/overview/__init__.py says why)
        assert scripts == set(PAGE_GROUPS) - {"overview"} and folders <= {"shared", *PAGE_GROUPS}
    else:
        assert folders == {"shared", *PAGE_GROUPS} and not scripts
    for path in sorted(root.rglob("*.py")):
        own = path.relative_to(root).parts[0].removesuffix(".py")
        for module in _imports(_tree(path)):
            group = _page_group(module)
            assert group in (None, own), f"{path.relative_to(ROOT)} imports {module}"


def _page_group(module: str) -> str | None:
    """The page whose folder a module belongs to (in cactus_core/app or pages/), if any."""
    for prefix in ("cactus_core.app.", "pages."):
        if module.startswith(prefix):
            group = module[len(prefix) :].split(".")[0]
            return group if group in PAGE_GROUPS else None
    return None


@pytest.mark.parametrize("path", sorted(PAGES.rglob("*.py")), ids=lambda p: p.name)
def test_pages_read_experiments_only_through_the_app(path: Path) -> None:
    """Type-only imports count too: a page names the app's view of a type, not the type."""
    for module in _imports(_tree(path)):
        assert not module.startswith("cactus_core.experiments"), (
            f"{path.relative_to(ROOT)} imports {module}: read it through cactus_core.app"
        )


def test_the_training_scripts_have_no_import_cycles() -> None:
    cycle = _cycle(sorted((ROOT / "training").rglob("*.py")))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_inside_a_function_is_found(tmp_path) -> None:
    """The check reads imports inside functions too."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import g\n")
    assert _cycle(sorted(pkg.rglob("*.py")), base=tmp_path) == ["pkg.a", "pkg.b", "pkg.a"]


# The engine's groups, in the order they may import each other (each only those before it).
ENGINE_GROUPS = ["runtime", "loading", "drafting", "decoding"]


@pytest.mark.parametrize("path", sorted((PACKAGE / "engine").rglob("*.py")), ids=lambda p: p.name)
def test_engine_groups_import_downward_only(path: Path) -> None:
    rel = path.relative_to(PACKAGE / "engine").parts
    if len(rel) < 2:
        return
    own = ENGINE_GROUPS.index(rel[0])
    for module in _imports(_tree(path)):
        parts = module.split(".")
        if parts[:2] == ["cactus_core", "engine"] and len(parts) > 2:
            other = ENGINE_GROUPS.index(parts[2])
            assert other <= own, f"{path.relative_to(ROOT)} imports {module} (a higher group)"


@pytest.mark.parametrize("package", ["vllm/cactus_vllm", "transformers/cactus_transformers"])
def test_the_integrations_have_no_import_cycles(package: str) -> None:
    folder = ROOT / "integrations" / package
    cycle = _cycle(sorted(folder.rglob("*.py")), base=folder.parent)
    assert _module_name(folder / "__init__.py", folder.parent) == folder.name  # names resolve
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _members(cls: type) -> set[str]:
    plumbing = {"__module__", "__doc__", "__dict__", "__weakref__", "__qualname__"}
    plumbing |= {"__firstlineno__", "__static_attributes__", "__hash__", "__annotations__"}
    return (set(vars(cls)) | set(vars(cls).get("__annotations__", {}))) - plumbing


def test_rule_protocol_is_small() -> None:
    assert len(_members(Rule)) <= RULE_MEMBERS, sorted(_members(Rule))
    for cls in {c for rule in RULES.values() for c in rule.__mro__ if issubclass(c, Rule)}:
        data = {k for k in _members(cls) if not callable(vars(cls).get(k, print))}
        data -= {k for k, v in vars(cls).items() if isinstance(v, (Param, property, classmethod))}
        assert data <= {"name", "card", "caps", "params_spec"}, (cls.__name__, data)
        assert isinstance(cls.caps, Capabilities)
    for name, cls in RULES.items():
        assert isinstance(cls.card, RuleCard) and cls.card.description and cls.card.colour, name
