"""A small memo of per-position results keyed on the exact rows they came from.

The decoder asks for the same positions' answer more than once in a round: cactus-budget's
per-position delta is solved when the rule decides (one row at a time with the lazy head), again
when the emitted KL is measured, and again for the trace. Each solve is a search over exact
emitted distributions, so remembering the last few rows' answers makes the later asks free. A
hit needs the rows equal entry for entry (float64), never a hash, so a reused answer is always
the answer for those rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

_Entry = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (p row, q row, the value)


class RowMemo:
    """fn(p, q) [N, V] -> [N], remembered per row for the last `size` rows of each key."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()  # a sweep scores on a worker thread beside the decoder
        # (key, row sum of q) -> [(p row, q row, value)]: the sum picks the few rows to compare
        self._rows: OrderedDict[tuple[Hashable, float], list[_Entry]] = OrderedDict()
        self._count = 0

    def __call__(
        self,
        key: Hashable,
        p: torch.Tensor,
        q: torch.Tensor,
        fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        p64, q64 = p.double(), q.double()
        if q64.shape[0] > self.size:  # a sweep's batch of positions, not a decoder's re-ask
            return fn(p64, q64)
        sums = q64.sum(-1).tolist()
        out: list[torch.Tensor | None] = [None] * len(sums)
        with self._lock:
            for i, s in enumerate(sums):
                for p_row, q_row, value in self._rows.get((key, s), ()):
                    if torch.equal(q_row, q64[i]) and torch.equal(p_row, p64[i]):
                        out[i] = value
                        break
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            index = torch.tensor(missing, device=q.device)
            fresh = fn(p64[index], q64[index])
            with self._lock:
                for j, i in enumerate(missing):
                    out[i] = fresh[j]
                    self._remember((key, sums[i]), (p64[i].clone(), q64[i].clone(), fresh[j]))
        done = [v for v in out if v is not None]  # every row: found or fresh
        return torch.stack(done) if done else torch.zeros(0, dtype=torch.float64)

    def _remember(self, slot: tuple[Hashable, float], entry: _Entry) -> None:
        self._rows.setdefault(slot, []).append(entry)
        self._rows.move_to_end(slot)
        self._count += 1
        while self._count > self.size:
            _, dropped = self._rows.popitem(last=False)
            self._count -= len(dropped)
