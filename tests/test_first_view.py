"""The app's first page view after start never raises, while the pair loads in the background.

transformers resolves its names lazily, and two threads importing them at once (the start-up
load, pages/shared/pair.preload_pair, and the page a visitor opens meanwhile) used to fail with
`ImportError: cannot import name 'PreTrainedModel' from 'transformers'`. The engine now takes
every transformers name from one module, `cactus_core.engine.runtime.transformers_names`,
whose import lock makes the second thread wait."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GATEWAY = ROOT / "cactus_core" / "engine" / "runtime" / "transformers_names.py"
RUNS = 8  # each page opened first twice; the race this guards against failed every run


@pytest.mark.slow
def test_app_then_every_page_at_once_with_the_pair_loading_never_raises():
    """8 fresh processes (tests/first_view.py): app.py, and at once every page, with the
    start-up load on."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.first_view", str(RUNS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    runs = [line for line in proc.stdout.splitlines() if line.startswith("run ")]
    assert proc.returncode == 0 and len(runs) == RUNS, proc.stdout + proc.stderr[-4000:]
    assert all(line.endswith(": ok") for line in runs), proc.stdout


def _transformers_imports(tree: ast.Module) -> list[int]:
    """Lines of a module's imports of transformers outside `if TYPE_CHECKING:` blocks."""
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    lines = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        if any(n == "transformers" or n.startswith("transformers.") for n in names):
            lines.append(node.lineno)
    return lines


def test_only_the_gateway_imports_transformers():
    """A module importing transformers directly would race again with the background load."""
    sources = [ROOT / "app.py", *ROOT.glob("pages/**/*.py"), *ROOT.glob("cactus_core/**/*.py")]
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in sources
        if path != GATEWAY
        and (lines := _transformers_imports(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert not offenders, (
        f"import these from cactus_core.engine.runtime.transformers_names: {offenders}"
    )
