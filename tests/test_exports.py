"""Every exported name of cactus_core is the documented object, in any import order.

Each case runs in a fresh interpreter: which submodules were imported first is exactly what
used to turn `from cactus_core import verify` into the module rather than the function.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cactus_core

ROOT = Path(__file__).resolve().parent.parent
# What each export must be: the object defined under this qualified module and name.
EXPECTED = {name: module for name, module in cactus_core._EXPORTS.items()}
# Import orders that used to matter: the exports' own modules first, the decoder (which pulls in
# verify, emitted, rules and sampling) first, and nothing first.
PRELUDES = [
    "",
    "import cactus_core.maths.verify, cactus_core.maths.emitted, cactus_core.maths.rules",
    "import cactus_core.engine.decoding.decoder, cactus_core.engine.decoding.trace",
    "import cactus_core.cli, cactus_core.experiments.sweeps.run",
]


def _check_script(prelude: str) -> str:
    lines = [prelude, "import importlib, cactus_core"]
    for name, module in EXPECTED.items():
        lines += [
            f"from cactus_core import {name} as a",
            f"b = getattr(importlib.import_module({module!r}), {name!r})",
            f"assert a is b, ({name!r}, a)",
            f"assert cactus_core.{name} is b and cactus_core.{name} is b, {name!r}",
        ]
    lines.append("print('ok')")
    return "\n".join(lines)


@pytest.mark.parametrize("prelude", PRELUDES, ids=["bare", "maths", "engine", "cli"])
def test_every_export_is_the_documented_object(prelude: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _check_script(prelude)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_exports_are_callables_and_classes_not_modules() -> None:
    import types

    for name in cactus_core.__all__:
        assert not isinstance(getattr(cactus_core, name), types.ModuleType), name
    assert callable(cactus_core.verify) and callable(cactus_core.make_rule)
