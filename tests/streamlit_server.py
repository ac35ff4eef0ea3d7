"""Start the app with `streamlit run` on a free local port and drive Debian's Chromium: shared
by the browser tests and benchmarks/bench_app.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"  # Debian's package; never a downloaded browser
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_chromium(playwright):  # -> playwright Browser
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


RERUN_GRACE_MS = 500  # how long an action may take to start its rerun


def wait_idle(page, timeout_ms: float = 180_000) -> None:
    """Wait until the script run that the last action started has finished: RERUN_GRACE_MS for
    it to start, then until the app says it is not running."""
    page.wait_for_timeout(RERUN_GRACE_MS)
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(
        timeout=timeout_ms
    )


@dataclass(frozen=True)
class RunningApp:
    url: str
    pid: int


@contextmanager
def streamlit_app(
    env: dict[str, str],
    log: IO | None = None,
    timeout_s: float = 90,
    poll_s: float = 0.2,
    script: Path = ROOT / "app.py",
) -> Iterator[RunningApp]:
    """Run the app (or another script) until the block ends; yields it once
    /_stcore/health answers ok."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "streamlit", "run", str(script)),
            *("--server.port", str(port), "--server.address", "127.0.0.1"),
            *("--server.headless", "true", "--browser.gatherUsageStats", "false"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_healthy(url, proc, timeout_s, poll_s)
        yield RunningApp(url, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def tiny_pair_app(tiny_pair_dirs, root: Path, **extra_env: str) -> Iterator[str]:
    """`streamlit_app` on the tiny test pair with one torch thread, its sweep cache and its log
    under `root`; yields the app's URL. `extra_env` adds settings (a timing log, a judge)."""
    env = {
        **os.environ,
        "CACTUS_LAB_VERIFIER": str(tiny_pair_dirs[0]),
        "CACTUS_LAB_DRAFT": str(tiny_pair_dirs[1]),
        "CACTUS_CACHE_DIR": str(root / "cache"),
        "OMP_NUM_THREADS": "1",
        **extra_env,
    }
    with open(root / "streamlit.log", "w") as log, streamlit_app(env, log, poll_s=0.5) as app:
        yield app.url


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float, poll_s: float) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(poll_s)
    raise TimeoutError(f"streamlit did not answer /_stcore/health within {timeout_s} s")


# -- driving widgets (the browser tests and scripts/screenshots.py) ----------------------------
def _settle(page, settle_ms: float | None) -> None:
    if settle_ms is None:
        wait_idle(page)
    else:
        page.wait_for_timeout(settle_ms)


def fill(page, label: str, value: str, settle_ms: float | None = 400) -> None:
    """Type value into the text box labelled `label` and submit it."""
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    _settle(page, settle_ms)


def slider_from_start(page, label: str, right: int = 0, settle_ms: float | None = 400) -> None:
    """Move the slider labelled `label` to its first value, then `right` steps up."""
    thumb = page.get_by_role("slider", name=label)
    thumb.focus()
    thumb.press("Home")
    for _ in range(right):
        thumb.press("ArrowRight")
    _settle(page, settle_ms)


def pick_rule(page, name: str, settle_ms: float | None = 400) -> None:
    """Add rule `name` to the Frontier's "Rules" picker."""
    box = page.get_by_role("combobox", name="Rules")
    box.click()
    box.fill(name)
    page.get_by_role("option", name=f"{name} —").first.click()
    page.keyboard.press("Escape")
    _settle(page, settle_ms)
