"""What hostile sweep files cost the server that opens them: time and peak memory of
`load_sweep_file` on each, one fresh process per file (its peak RSS is the file's alone), with
the address space capped at 4 GB so that a file that would exhaust the machine ends in a
MemoryError instead.

    .venv/bin/python benchmarks/bench_hostile_sweep_files.py [CODE_DIR]

CODE_DIR (default: this checkout) is the lab whose loader is measured, e.g. an older checkout
to compare against. The files:
- "48 kB": 1,000 prompts × 1,000 settings in chunks of one, and no chunk record at all;
- "107 kB": the same with 4,000 settings;
- "JSON bomb": 63 kB of gzip that unpacks to 64 MB of `[{},{},…]`;
- "bomb, public": the same on a public server (CACTUS_LAB_PUBLIC=1).
Prints one markdown row per file: its size, what the loader answered, seconds, the process's
peak RSS (imports included: the empty file's row is what the imports take), and the peak of
Python allocations during the load alone (tracemalloc, in a second process: it slows a load).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the hostile files the tests open
from hostile_sweep_files import bomb, empty_sweep  # noqa: E402

MEMORY_CAP = 4 * 2**30

MEASURE = """
import resource, sys, time, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from cactus_core.experiments.sweeps import file as sf
data = open(sys.argv[1], "rb").read()
traced = sys.argv[2] == "traced"
if traced:
    tracemalloc.start()
start = time.perf_counter()
try:
    sf.load_sweep_file(data, "x")
    said = "opened"
except sf.SweepFileError as err:
    said = str(err).removeprefix("x: ")
except MemoryError:
    said = "MemoryError"
seconds = time.perf_counter() - start
peak = tracemalloc.get_traced_memory()[1] if traced else 0
print(said, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, peak)
"""


def measure(code: Path, path: Path, public: bool, traced: bool) -> tuple[str, float, int, int]:
    """(the loader's answer, seconds, peak RSS, peak of Python allocations during the load:
    the last only when traced, which slows the load)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    env.pop("CACTUS_LAB_PUBLIC", None)
    if public:
        env["CACTUS_LAB_PUBLIC"] = "1"
    how = "traced" if traced else "timed"
    out = subprocess.run(
        [sys.executable, "-c", MEASURE.format(cap=MEMORY_CAP), str(path), how],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=code,
    ).stdout.strip()
    said, seconds, rss, peak = out.rsplit(" ", 3)
    return said, float(seconds), int(rss), int(peak)


def main() -> None:
    code = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    files = {
        "0 bytes (the imports alone)": (b"", False),
        "48 kB": (empty_sweep(1000, 1000), False),
        "107 kB": (empty_sweep(1000, 4000), False),
        "JSON bomb": (bomb(64 * 2**20 - 16), False),
        "bomb, public": (bomb(64 * 2**20 - 16), True),
    }
    print(f"loader of {code}")
    print("| file | bytes | answer | s | peak RSS (MB) | peak allocated by the load (MB) |")
    print("|---|---|---|---|---|---|")
    mb = 2**20
    with tempfile.TemporaryDirectory() as tmp:
        for name, (data, public) in files.items():
            path = Path(tmp) / "file"
            path.write_bytes(data)
            said, seconds, rss, _ = measure(code, path, public, traced=False)
            peak = measure(code, path, public, traced=True)[3]
            print(f"| {name} | {len(data):,} | {said[:60]} | {seconds:.2f} | {rss / mb:,.0f} | "
                  f"{peak / mb:,.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
