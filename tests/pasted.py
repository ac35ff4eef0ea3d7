"""Running an exported snippet as a person pastes it: from a folder outside the repository, in a
fresh virtual environment that also sees an existing environment's packages (a `.pth` file), so
that `pip install` builds and installs only what the snippet names, as a user's pip would,
without downloading what is there already. The vLLM plugin's tests use it too."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _purelib(python: str | Path) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def overlay_venv(root: Path, base_python: str | Path) -> Path:
    """A new venv under `root` that sees `base_python`'s packages; its bin folder."""
    venv = root / "venv"
    subprocess.run([str(base_python), "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    (Path(_purelib(bin_dir / "python")) / "base_env.pth").write_text(_purelib(base_python) + "\n")
    return bin_dir


def run_pasted(
    script: str, cwd: Path, bin_dir: Path, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`script` run by bash in `cwd` with the venv first on PATH, as in an activated venv."""
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    full["VIRTUAL_ENV"] = str(bin_dir.parent)
    full.pop("PYTHONPATH", None)
    full.update(env or {})
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
