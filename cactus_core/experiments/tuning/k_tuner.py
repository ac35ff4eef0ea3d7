"""The k tuner: tokens per call and speedup for every draft length k = 1..12, predicted from a
run's acceptance at each draft position and the pair's measured costs.

Per-position acceptance follows vLLM's definitions (DESIGN.md, "Per-position acceptance"):
alpha_j, the conditional acceptance at position j, is drafts accepted at j ÷ drafts that
reached j. A round of k drafts then emits on average

    E(k) = 1 + sum_{j=1..k} alpha_1·…·alpha_j    tokens per verifier call

(the products are vLLM's unconditional rates; the 1 is the recovered or bonus token). Its cost,
in the wall time of the pair on this device, is

    T(k) = v(k + 1) + f + k·d + o

with v(w) the verifier's forward over w tokens, d one draft step, f the draft's fixed part of a
round (reading the accepted path back in), and o the rest of a round (the verifier's
probabilities and the rule, the coins, the host sync, the Python of the loop); verifier-only
decoding takes v(1) + o_1 per token. So speedup(k) = E(k)·(v(1) + o_1) / T(k): the decoding
phase's speedup, with the prefill (the same whatever k) left out, as `speedup` defines it
(`speedup.predicted`). `PairCosts` measures v(1..13),
f, d, o and o_1 once per pair, device and thread count and caches them on disk with the pair's
identity.

Every cost is the decoder's own: short sps runs at k = 1..12 time its verify pass over k + 1
tokens, its draft and the rest of its rounds (a bare forward timed alone grew with the width
more than the decoder's verify pass did: v(9) 451 ms against the decoder's 207 ms on the
embedded pair). On a busy machine one run can take twice as long as the next, so every cost is
the median of several samples taken interleaved (`cost_sample`: each sample runs every k once,
in alternating order), and a load swing lands on all widths alike instead of on a few.

Positions past those a run measured (a run at k = 4 measures 1..4) are extrapolated: they
take the last measured position's conditional rate, pooled with the positions before it until
at least MIN_TAIL_DRAFTS drafts stand behind it (a short run reaches its last position
rarely). A prediction says which k are extrapolated.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cactus_core.experiments.estimates.speedup import decoding_seconds, predicted
from cactus_core.experiments.sweeps.config import BASELINE

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

K_RANGE: tuple[int, ...] = tuple(range(1, 13))
# Drafts behind the rate that extrapolated positions repeat (see `extend_rates`).
MIN_TAIL_DRAFTS = 50
COSTS_FORMAT = 2  # 2: the draft's per-round part f apart from its step d


# ------------------------------------------------------------------------------ costs


@dataclass(frozen=True)
class PairCosts:
    """The pair's measured costs on one device, in milliseconds."""

    identity: str
    device: str
    threads: int
    verify_ms: tuple[float, ...]  # v(w) for w = 1 .. len: one verifier forward over w tokens
    draft_ms: float  # d: one draft step
    round_overhead_ms: float  # o: the rest of a speculative round
    plain_overhead_ms: float  # o_1: the rest of a verifier-only step
    draft_round_ms: float = 0.0  # f: the draft's part of a round that does not grow with k
    samples: int = 1  # interleaved samples behind the medians

    def verify(self, width: int) -> float:
        """v(width) in ms; past the measured widths, a straight line through the last two."""
        v = self.verify_ms
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        if width <= len(v):
            return v[width - 1]
        slope = v[-1] - v[-2] if len(v) >= 2 else 0.0
        return v[-1] + slope * (width - len(v))

    @property
    def c(self) -> float:
        """The draft step relative to one verifier token, d ÷ v(1)."""
        return self.draft_ms / self.verify_ms[0]

    def draft_round(self, k: int) -> float:
        """The draft's share of a round: f + k·d."""
        return self.draft_round_ms + k * self.draft_ms

    def round_ms(self, k: int) -> float:
        """T(k) = v(k + 1) + f + k·d + o."""
        return self.verify(k + 1) + self.draft_round(k) + self.round_overhead_ms

    @property
    def plain_ms(self) -> float:
        """A verifier-only token: v(1) + o_1."""
        return self.verify_ms[0] + self.plain_overhead_ms

    def to_dict(self) -> dict[str, Any]:
        return {"format": COSTS_FORMAT, **asdict(self), "verify_ms": list(self.verify_ms)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PairCosts:
        if d.get("format") != COSTS_FORMAT:
            raise ValueError(f"costs format {d.get('format')!r}, expected {COSTS_FORMAT}")
        body = {k: v for k, v in d.items() if k != "format"}
        body["verify_ms"] = tuple(float(x) for x in body["verify_ms"])
        return cls(**body)


def costs_path(identity: str, device: str, threads: int, root: Path | None = None) -> Path:
    """Where a pair's costs on a device are cached (next to the sweep cache)."""
    if root is None:
        env = os.environ.get("CACTUS_CACHE_DIR")
        root = (Path(env) if env else Path.home() / ".cache" / "cactus-lab") / "costs"
    key = hashlib.sha256(f"{identity}|{device}|{threads}".encode()).hexdigest()[:24]
    return root / f"{key}.json"


def cached_costs(pair: ModelPair, root: Path | None = None) -> PairCosts | None:
    """The pair's cached costs on its device and the current thread count, or None."""
    return cached_costs_for(pair.identity, str(pair.device), root)


def cached_costs_for(identity: str, device: str, root: Path | None = None) -> PairCosts | None:
    """The cached costs of the pair with this identity (no model loaded), or None (also for a
    file of an older format: it is measured again)."""
    import torch

    path = costs_path(identity, device, torch.get_num_threads(), root)
    try:
        return PairCosts.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_costs(costs: PairCosts, root: Path | None = None) -> Path:
    """Cache measured costs under their pair's identity, device and thread count."""
    path = costs_path(costs.identity, costs.device, costs.threads, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(costs.to_dict(), indent=1), encoding="utf-8")
    return path


@dataclass(frozen=True)
class CostSample:
    """One interleaved pass over the costs, in ms: what `combine_costs` takes medians of."""

    verify_ms: tuple[float, ...]  # the decoder's verify pass over w = 1 .. max_width tokens
    draft_round_ms: tuple[float, ...]  # the draft's time per round at k = 1 .. max_width - 1
    rest_ms: tuple[float, ...]  # the rest of a round at each k
    plain_rest_ms: float  # the rest of a verifier-only step


class CostProbe:
    """What `cost_sample` times: the decoder itself (sps, no recording) at every k, on one
    prompt, so that each cost is the decoder's own (its verify pass with the probabilities and
    the decisions, its draft with the accepted path read back), not a bare forward's."""

    def __init__(
        self, pair: ModelPair, prompt: str | None = None, new_tokens: int = 16, max_width: int = 13
    ) -> None:
        from cactus_core.engine.decoding.decoder import SpeculativeDecoder
        from cactus_core.engine.loading.prompts import builtin_prompts

        if max_width < 3:
            raise ValueError(f"max_width must be >= 3, got {max_width}")
        self.pair = pair
        self.prompt = prompt or builtin_prompts()[0]
        self.new_tokens = new_tokens
        self.ks = tuple(range(1, max_width))
        self.decoders = {
            k: SpeculativeDecoder(pair, "sps", k=k, record_trace=False, measure_kl=False)
            for k in self.ks
        }
        self.passes = 0
        self.decoders[1].generate(self.prompt, max_new_tokens=4, seed=0)  # warm-up


def _per_round_ms(stats: Any) -> tuple[float, float, float]:
    """(verify pass, draft, the rest) per round of one run, in ms, the prefill left out."""
    rounds = max(stats.rounds, 1)
    rest = decoding_seconds(stats) - stats.verify_s - stats.draft_s
    return tuple(1000 * x / rounds for x in (stats.verify_s, stats.draft_s, rest))  # type: ignore[return-value]


def cost_sample(
    probe: CostProbe, seed: int = 0, on_run: Callable[[], None] | None = None
) -> CostSample:
    """One pass: a short verifier-only run and a short sps run at every k (forward on one pass,
    backward on the next, so that a drift in the load does not pile onto the long drafts); each
    run's per-round verify pass is v(k + 1) (v(1) from the verifier-only run)."""
    order = probe.ks if probe.passes % 2 == 0 else probe.ks[::-1]
    probe.passes += 1
    dec = probe.decoders[1]
    tick = on_run or (lambda: None)
    plain = dec.generate_autoregressive(probe.prompt, max_new_tokens=probe.new_tokens, seed=seed)
    tick()
    v1, _, plain_rest = _per_round_ms(plain.stats)
    got = {}
    for k in order:
        out = probe.decoders[k].generate(probe.prompt, max_new_tokens=probe.new_tokens, seed=seed)
        tick()
        got[k] = _per_round_ms(out.stats)
    return CostSample(
        verify_ms=(v1, *(got[k][0] for k in probe.ks)),
        draft_round_ms=tuple(got[k][1] for k in probe.ks),
        rest_ms=tuple(got[k][2] for k in probe.ks),
        plain_rest_ms=plain_rest,
    )


def combine_costs(pair: ModelPair, samples: Sequence[CostSample]) -> PairCosts:
    """The medians of interleaved samples as the pair's costs: v(w) made non-decreasing, and
    the draft's time per round against k fitted by least squares as f + k·d."""
    import torch

    if not samples:
        raise ValueError("no cost samples to combine")

    def med(xs: Sequence[float]) -> float:
        return float(statistics.median(xs))

    def column(name: str) -> list[float]:
        return [med(col) for col in zip(*(getattr(s, name) for s in samples), strict=True)]

    verify_ms = monotone(column("verify_ms"))
    draft = column("draft_round_ms")
    ks = np.arange(1, len(draft) + 1, dtype=np.float64)
    d, f = (float(x) for x in np.polyfit(ks, np.asarray(draft), 1))
    if d <= 0.0 or f < 0.0:  # no growth with k, or none left over: charge it all per step
        d, f = max(float(np.dot(ks, draft) / np.dot(ks, ks)), 0.0), 0.0
    return PairCosts(
        identity=pair.identity,
        device=str(pair.device),
        threads=torch.get_num_threads(),
        verify_ms=verify_ms,
        draft_ms=d,
        round_overhead_ms=max(med([r for s in samples for r in s.rest_ms]), 0.0),
        plain_overhead_ms=max(med([s.plain_rest_ms for s in samples]), 0.0),
        draft_round_ms=f,
        samples=len(samples),
    )


def monotone(xs: Sequence[float]) -> tuple[float, ...]:
    """The non-decreasing sequence nearest xs in least squares (pool adjacent violators). A
    forward over more tokens does at least the work of one over fewer, but on a busy CPU even
    medians of five samples can dip (v(9) a quarter below v(7), seen once)."""
    blocks: list[list[float]] = []  # [sum, count] of pooled runs
    for x in xs:
        blocks.append([float(x), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return tuple(t / c for t, c in blocks for _ in range(int(c)))


def cost_runs(max_width: int = 13, reps: int = 5) -> int:
    """The short runs `measure_costs` makes: a warm-up, then per sample one verifier-only run
    and one sps run at each k = 1 .. max_width - 1."""
    return 1 + reps * max_width


def measure_costs(
    pair: ModelPair,
    max_width: int = 13,
    reps: int = 5,
    prompt: str | None = None,
    new_tokens: int = 16,
    on_progress: Callable[[int, int], None] | None = None,
) -> PairCosts:
    """The medians of `reps` interleaved `cost_sample`s: v(1..max_width), f, d, o and o_1.
    on_progress(runs done, runs in all) after each of the `cost_runs` short runs."""
    total, done = cost_runs(max_width, reps), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    probe = CostProbe(pair, prompt, new_tokens, max_width)
    tick()  # the probe's warm-up
    return combine_costs(pair, [cost_sample(probe, seed=i, on_run=tick) for i in range(reps)])


_MEASURING = threading.Lock()


def shared_costs(
    pair: ModelPair,
    refresh: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    root: Path | None = None,
) -> PairCosts:
    """The pair's costs for everyone on this server: one measurement at a time, and a caller
    that waited for another's finds its result in the cache instead of measuring again (two
    visitors clicking at once cost one measurement). refresh measures even when cached."""
    with _MEASURING:
        if not refresh:
            got = cached_costs(pair, root)
            if got is not None:
                return got
        costs = measure_costs(pair, on_progress=on_progress)
        store_costs(costs, root)
        return costs


# ------------------------------------------------------------------------------ prediction


@dataclass(frozen=True)
class KPrediction:
    """Tokens per call and speedup for each k, the best k, and which k are extrapolated."""

    ks: tuple[int, ...]
    rates: tuple[float, ...]  # alpha_j used at positions 1 .. max(ks)
    measured_positions: int  # rates[:measured_positions] were measured
    tokens_per_call: tuple[float, ...]
    speedup: tuple[float, ...]
    pooled: bool = False  # the rates are one pooled acceptance rate, not per position

    @property
    def best_k(self) -> int:
        return self.ks[int(np.argmax(self.speedup))]

    def extrapolated(self, k: int) -> bool:
        return self.pooled or k > self.measured_positions

    def at(self, k: int) -> tuple[float, float]:
        """(tokens per call, speedup) at k."""
        i = self.ks.index(k)
        return self.tokens_per_call[i], self.speedup[i]

    def how(self) -> str:
        """In words: what is measured and how the rest is extrapolated."""
        m = self.measured_positions
        if self.pooled:
            return (
                f"No per-position counts: every position takes the pooled acceptance rate "
                f"({self.rates[0]:.3f}), so every k is modelled (the geometric model)."
            )
        if m >= max(self.ks):
            return f"Every position up to k = {max(self.ks)} was measured."
        return (
            f"Positions 1–{m} measured; k > {m} extrapolated with the conditional rate of the "
            f"last positions ({self.rates[m]:.3f}) at every later position."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": list(self.ks),
            "tokens_per_call": list(self.tokens_per_call),
            "speedup": list(self.speedup),
            "extrapolated": [self.extrapolated(k) for k in self.ks],
            "best_k": self.best_k,
            "rates": list(self.rates),
            "measured_positions": self.measured_positions,
            "pooled": self.pooled,
            "how": self.how(),
        }


def extend_rates(
    rates: Sequence[float | None],
    k_max: int,
    reached: Sequence[int] | None = None,
) -> tuple[tuple[float, ...], int]:
    """Conditional rates at positions 1..k_max: the measured ones (up to the first position
    no round reached), then one rate repeated; and how many were measured. The repeated rate is
    the last position's, or, when fewer than MIN_TAIL_DRAFTS drafts reached it (`reached`,
    per position), the rate pooled over the last positions that together had that many."""
    measured: list[float] = []
    for r in rates:
        if r is None or not math.isfinite(r):
            break
        measured.append(min(max(float(r), 0.0), 1.0))
    if not measured:
        raise ValueError("no measured per-position acceptance to predict from")
    tail = measured[-1]
    if reached is not None:
        n = list(reached[: len(measured)])
        acc, got, j = 0.0, 0, len(measured)
        while j > 0 and got < MIN_TAIL_DRAFTS:
            j -= 1
            acc += measured[j] * n[j]
            got += n[j]
        tail = acc / got if got else tail
    out = measured[:k_max] + [tail] * max(0, k_max - len(measured))
    return tuple(out), min(len(measured), k_max)


def expected_tokens(rates: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum_{j<=k} prod_{i<=j} alpha_i."""
    total, run = 1.0, 1.0
    for a in rates[:k]:
        run *= a
        total += run
    return total


def predict_k(
    rates: Sequence[float | None],
    costs: PairCosts,
    ks: Sequence[int] = K_RANGE,
    pooled: bool = False,
    reached: Sequence[int] | None = None,
) -> KPrediction:
    """Tokens per call and speedup at each k from conditional per-position rates (alpha_1,
    alpha_2, …; None where no round reached the position) and the pair's costs. pooled: the
    one rate given is a pooled acceptance rate (a record without per-position counts), used at
    every position."""
    ks = tuple(sorted(set(int(k) for k in ks)))
    if not ks or ks[0] < 1:
        raise ValueError(f"k must be >= 1, got {ks}")
    full, measured = extend_rates(rates, max(ks), reached)
    tpc = tuple(expected_tokens(full, k) for k in ks)
    speed = tuple(
        predicted(t, costs.round_ms(k), costs.plain_ms) for t, k in zip(tpc, ks, strict=True)
    )
    return KPrediction(ks, full, measured, tpc, speed, pooled)


def predict_row(row: Mapping[str, Any], costs: PairCosts) -> KPrediction | None:
    """A sweep or reference row's k prediction: from its per-position rates when it has
    them, else from its pooled acceptance (every k then extrapolated); None without either."""
    rates = row.get("acceptance_by_position")
    if rates and rates[0] is not None:
        return predict_k(rates, costs, reached=row.get("position_reached"))
    acc = row.get("acceptance_rate")
    if acc is None or not math.isfinite(float(acc)):
        return None
    return predict_k([float(acc)], costs, pooled=True)


def row_speedup(row: Mapping[str, Any], costs: PairCosts, k: int) -> float | None:
    """The predicted speedup of a row's setting at its own k: what the Frontier, the tuner's
    table and the k tuner all show for it. None for verifier-only or a row without rates."""
    if row.get("rule") == BASELINE:
        return 1.0
    pred = predict_row(row, costs)
    return None if pred is None else pred.at(k)[1]


def measuring_now() -> bool:
    """Whether a `shared_costs` measurement is running in this process."""
    return _MEASURING.locked()
