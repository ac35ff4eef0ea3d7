"""A compact, committable copy of a train_feature_draft run that `--resume` continues.

Copies the run's `last/` draft (config.json, model.safetensors), `train_log.json` and
`state.pt` (step, epoch, batch within it, data-order rng, eval log), keeping the optimiser's
Adam moments only if the whole copy stays under --max-mib. Without them a resumed run restarts
Adam with a new warm-up (`RunState.start`).

    python -m training.compact_checkpoint --run /work/data/ckV5 \\
        --out training/checkpoints/feature_draft_v5 --max-mib 35
    # resume: copy it back to a run folder, regenerate the same data, then --resume
    cp -r training/checkpoints/feature_draft_v5 /work/data/ckV5
    python -m training.train_feature_draft ... --out /work/data/ckV5 --steps N --resume
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch


def _mib(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 2**20


def compact(run: Path, out: Path, max_mib: float) -> dict:
    (out / "last").mkdir(parents=True, exist_ok=True)
    files = []
    for name in ("config.json", "model.safetensors"):
        shutil.copy2(run / "last" / name, out / "last" / name)
        files.append(out / "last" / name)
    shutil.copy2(run / "train_log.json", out / "train_log.json")
    files.append(out / "train_log.json")
    state = torch.load(run / "state.pt", weights_only=False)
    torch.save(state, out / "state.pt")
    kept = _mib([*files, out / "state.pt"]) <= max_mib
    if not kept:
        state["optimiser"] = None
        torch.save(state, out / "state.pt")
    files.append(out / "state.pt")
    return {"optimiser_kept": kept, "mib": _mib(files), "step": state["step"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", type=Path, required=True, help="a train_feature_draft --out folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-mib", type=float, default=35.0)
    args = ap.parse_args()
    res = compact(args.run, args.out, args.max_mib)
    print(
        f"step {res['step']}: {res['mib']:.1f} MiB, optimiser "
        f"{'kept' if res['optimiser_kept'] else 'left out (over the limit)'}"
    )


if __name__ == "__main__":
    main()
