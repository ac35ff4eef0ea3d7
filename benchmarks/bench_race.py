"""The Decode page's race, quiet and under a CPU load generator:
`PYTHONPATH=. .venv/bin/python benchmarks/bench_race.py [--races 3] [--load-procs 1]`.

Runs `app.race.Race` (both decoders warmed up untimed, then taking turns by tokens written) on
the app's default pair, prompt, rule and sampling, `--races` times quiet, then as many times
with `--load-procs` busy-loop processes spinning beside it, and prints each race's measured
speedup with its spread (`experiments.estimates.speedup.spread`) and the warm-ups, then the
medians and
whether each loaded race's spread holds the quiet median. One torch thread (`--threads`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUSY = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end: sum(range(20000))"


def race_once(pair, request, label):  # -> (speedup, low, high, warm-ups)
    from cactus_core.app.decode.race import WARM_UP, Race

    race = Race.start(pair, request, label).run()
    cmp = race.comparison()
    warm = {e.lane: e.seconds for e in race.events if e.what == WARM_UP}
    low, high = (cmp.spread.low, cmp.spread.high) if cmp.spread else (cmp.speedup, cmp.speedup)
    return cmp.speedup, low, high, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--races", type=int, default=3)
    ap.add_argument("--load-procs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    from cactus_core.app.shared.links import DECODE_MAX_NEW, TEMPERATURE, TOP_P, K
    from cactus_core.app.shared.request import DecodeRequest
    from cactus_core.app.shared.settings import DEFAULT_PROMPT, AppSettings, default_params
    from cactus_core.engine.loading.embedded_drafts import DEFAULT_EMBEDDED_DRAFT, embedded_draft
    from cactus_core.engine.loading.models import load_pair
    from cactus_core.maths.rules import DEFAULT_RULE, make_rule
    from cactus_core.maths.sampling import SamplingSettings

    torch.set_num_threads(args.threads)
    pair = load_pair(device="cpu", **embedded_draft(DEFAULT_EMBEDDED_DRAFT).load_kwargs("cpu"))
    sampling = SamplingSettings(temperature=TEMPERATURE.default, top_p=TOP_P.default,
                                k=int(K.default), seed=0)  # fmt: skip
    params = default_params(DEFAULT_RULE)
    rule = make_rule(DEFAULT_RULE, **params)
    request = DecodeRequest(DEFAULT_PROMPT, AppSettings(sampling=sampling), rule, DECODE_MAX_NEW,
                            True)  # fmt: skip
    label = rule.label
    print(f"{pair.verifier_name} + {pair.feature_draft_name or pair.draft_name}, {label}, "
          f"{sampling}, {DECODE_MAX_NEW} new tokens", flush=True)  # fmt: skip
    rows = {}
    for phase in ("quiet", "loaded"):
        procs = []
        if phase == "loaded":
            procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load_procs)]
        try:
            rows[phase] = [race_once(pair, request, label) for _ in range(args.races)]
        finally:
            for p in procs:
                p.terminate()
                p.wait()
        for s, lo, hi, warm in rows[phase]:
            w = ", ".join(f"{k} {v:.2f} s" for k, v in warm.items())
            print(f"{phase}: {s:.2f}× (spread {lo:.2f}–{hi:.2f}); warm-ups {w}", flush=True)
    quiet = statistics.median(r[0] for r in rows["quiet"])
    loaded = statistics.median(r[0] for r in rows["loaded"])
    held = sum(lo <= quiet <= hi for _, lo, hi, _ in rows["loaded"])
    print(f"\nmedian quiet {quiet:.2f}×, loaded {loaded:.2f}×; {held} of {len(rows['loaded'])} "
          "loaded races' spreads hold the quiet median")  # fmt: skip


if __name__ == "__main__":
    main()
