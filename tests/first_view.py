"""The app's first page views in fresh processes, with the start-up load of the pair on
(`python -m tests.first_view RUNS`; tests/test_first_view.py runs it).

A first view can only race with the background load in a process that has not imported
transformers yet, so each run is a fresh child forked from this process, which has imported
the app's other dependencies (Streamlit, torch's heavy submodules, the Overview's modules) but
nothing that pulls in transformers. In each child the app starts (app.py, with
CACTUS_LAB_PRELOAD=1: the pair's load, and with it the import of transformers, starts in the
background) and every page opens at once after it, the first page a different one in each run.
The load itself returns the tiny random pair, so that a run takes seconds; the imports it races
with are the real ones. Prints one line per run and exits with the number of runs that raised.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
PAGES = ["pages/decode.py", "pages/step.py", "pages/playground.py", "pages/frontier.py"]
# What transformers imports of torch and the rest (a few seconds, the same in every child).
HEAVY = ["torch._dynamo", "torch.distributed.tensor", "sympy", "scipy.optimize", "jinja2"]
RACED = "transformers.modeling_utils"  # what the background load and a page both import
OURS = ("cactus_core", "pages", "tests")


def _source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _top_imports(path: Path) -> list[str]:
    """The modules a file imports when it runs (not those under `if TYPE_CHECKING:` or in
    functions), with `from package import module` naming the module."""
    out = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
            if node.module.startswith(OURS):
                out += [f"{node.module}.{a.name}" for a in node.names]
    return [m for m in out if not m.startswith(OURS) or _source(m) is not None]


def _needs_transformers(module: str, seen: set[str]) -> bool:
    """Whether importing `module` imports transformers, following our own modules' imports."""
    if module.split(".")[0] == "transformers":
        return True
    path = _source(module) if module.startswith(OURS) else None
    if path is None or module in seen:
        return False
    seen.add(module)
    return any(_needs_transformers(m, seen) for m in _top_imports(path))


def _imported_first() -> list[str]:
    """Everything app.py and the pages import that needs no transformers."""
    scripts = [APP, *(ROOT / p for p in PAGES)]
    wanted = {m for path in scripts for m in _top_imports(path)}
    return sorted(m for m in wanted if not _needs_transformers(m, set()))


def _prepare() -> None:
    os.environ["CACTUS_LAB_PRELOAD"] = "1"
    sys.path.insert(0, str(ROOT))
    import streamlit.testing.v1  # noqa: F401

    for name in HEAVY + _imported_first():
        importlib.import_module(name)
    if RACED in sys.modules:
        raise RuntimeError(f"{RACED} was imported before the first view: nothing would race")

    from pages.shared import pair as pair_page

    def tiny_load(*pair_key: object) -> object:
        # As the real loader: import the loading code (the import the page races with), load.
        from cactus_core.engine.loading import models  # noqa: F401
        from tests.conftest import make_tiny_pair

        return make_tiny_pair()

    pair_page._load_pair = tiny_load


def _first_views(run: int) -> list[str]:
    """app.py, then at once every page, the first one PAGES[run % 4]; the errors seen."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    config.set_option("client.showErrorDetails", "full")  # the error itself, not a notice
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    errors = [f"app.py: {e.value}" for e in at.exception]
    start = run % len(PAGES)
    for page in PAGES[start:] + PAGES[:start]:
        at.switch_page(page).run()
        errors += [f"{page}: {e.value}" for e in at.exception]
    return errors


def _child(run: int) -> int:
    try:
        errors = _first_views(run)
    except BaseException:  # anything: the parent reports it, the child must exit
        errors = [traceback.format_exc()]
    print(f"run {run}: " + ("; ".join(errors) if errors else "ok"), flush=True)
    return 1 if errors else 0


def main(runs: int, at_once: int = 2) -> int:
    """Forks the runs, `at_once` at a time; returns how many failed."""
    _prepare()
    failed, running = 0, set()
    for run in range(runs):
        if len(running) == at_once:
            failed += _wait(running)
        pid = os.fork()
        if pid == 0:
            os._exit(_child(run))
        running.add(pid)
    while running:
        failed += _wait(running)
    return failed


def _wait(running: set[int]) -> int:
    pid, status = os.wait()
    running.discard(pid)
    return int(os.waitstatus_to_exitcode(status) != 0)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
