"""What abandoned Step through runs keep: 12 "tabs" on the embedded pair, each a StepRun that
decodes 2 rounds and is then let go (every other one closed first, as the page closes a run it
replaces; the rest only dropped, as a session's state is when it ends), with the cyclic garbage
collector off, as between its rare full collections on a server.

    .venv/bin/python benchmarks/bench_step_runs_retained.py [CODE_DIR]

CODE_DIR (default: this checkout) is the lab measured, e.g. an older checkout to compare with.
Prints the runs and recording threads still alive after the 12 tabs, the process's RSS growth
over them, and the same after a forced gc.collect().
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from pathlib import Path


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    code = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).parents[1]
    sys.path.insert(0, str(code))
    import torch

    from cactus_core.app.shared.request import DecodeRequest
    from cactus_core.app.shared.settings import AppSettings
    from cactus_core.app.step.run import StepRun
    from cactus_core.engine.decoding.recording import RECORDER_THREAD
    from cactus_core.engine.loading.models import load_pair
    from cactus_core.maths.rules import DEFAULT_RULE, make_rule
    from cactus_core.maths.sampling import SamplingSettings

    torch.set_num_threads(1)
    pair = load_pair()

    def request(seed: int) -> DecodeRequest:
        s = AppSettings(device="cpu", sampling=SamplingSettings(seed=seed))
        rule = make_rule(DEFAULT_RULE, delta=1.0)
        return DecodeRequest("Tell me about cacti.", s, rule, 64, True)

    StepRun.start(pair, request(99)).ensure(2)  # first-use costs out of the measurement
    gc.collect()
    gc.disable()
    start = rss_mb()
    refs, shown = [], None
    for tab in range(12):
        run = StepRun.start(pair, request(tab))
        run.ensure(2)
        refs.append(weakref.ref(run))
        if tab % 2 == 0 and shown is not None and hasattr(shown, "close"):
            shown.close()
        shown = run
    run = shown = None
    alive = sum(r() is not None for r in refs)
    threads = sum(t.name.startswith(RECORDER_THREAD) for t in threading.enumerate())
    grown = rss_mb() - start
    gc.collect()
    after = sum(r() is not None for r in refs)
    print(f"lab at {code}")
    print(f"after 12 tabs: {alive} runs alive, {threads} recording threads, RSS +{grown:.0f} MB")
    print(f"after gc.collect(): {after} runs alive, RSS +{rss_mb() - start:.0f} MB")


if __name__ == "__main__":
    main()
