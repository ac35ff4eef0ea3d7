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
phase's speedup, with the prefill (the same whatever k) left out. `PairCosts` measures v(1..13),
f, d, o and o_1 once per pair, device and thread count and caches them on disk with the pair's
identity.

On a busy machine one forward can take twice as long as the next, so every cost is the median of
several samples taken interleaved (`cost_sample`: each sample times every width once, in
alternating order, and two short decoder runs at k = 2 and k = 6 that separate f from d), and a
load swing lands on all widths alike instead of on a few.

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
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

K_RANGE: tuple[int, ...] = tuple(range(1, 13))
# Drafts behind the rate that extrapolated positions repeat (see `extend_rates`).
MIN_TAIL_DRAFTS = 50
COSTS_FORMAT = 2  # 2: the draft's per-round part f apart from its step d
# The two draft lengths whose runs separate the draft's per-round part from its per-step cost.
CALIBRATION_KS = (2, 6)


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

    def relative_verify(self) -> list[float]:
        """v(w) ÷ v(1) for the measured widths."""
        return [x / self.verify_ms[0] for x in self.verify_ms]

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


def pair_costs(
    pair: ModelPair, root: Path | None = None, refresh: bool = False, **measure: Any
) -> PairCosts:
    """The pair's costs: from the cache, or measured (`measure_costs`) and cached."""
    if not refresh:
        got = cached_costs(pair, root)
        if got is not None:
            return got
    costs = measure_costs(pair, **measure)
    store_costs(costs, root)
    return costs


def store_costs(costs: PairCosts, root: Path | None = None) -> Path:
    """Cache measured costs under their pair's identity, device and thread count."""
    path = costs_path(costs.identity, costs.device, costs.threads, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(costs.to_dict(), indent=1), encoding="utf-8")
    return path


@dataclass(frozen=True)
class CostSample:
    """One interleaved pass over the costs, in ms: what `combine_costs` takes medians of."""

    verify_ms: tuple[float, ...]  # one forward at each width 1 .. max_width
    draft_round_ms: tuple[float, ...]  # the draft's time per round at each CALIBRATION_KS
    rest_ms: tuple[float, ...]  # per round at each CALIBRATION_KS, less v(k + 1) and the draft
    plain_rest_ms: float  # per verifier-only step, less v(1)


class CostProbe:
    """What `cost_sample` times, set up once: the verifier's cache at a fixed prefix (the
    prompt plus `new_tokens`), and the decoder that runs the calibration rounds."""

    def __init__(self, pair: ModelPair, prompt: str | None = None, new_tokens: int = 32) -> None:
        import torch

        from cactus_core.engine.decoding.decoder import SpeculativeDecoder
        from cactus_core.engine.loading.pairing import head_vocab
        from cactus_core.engine.loading.prompts import builtin_prompts
        from cactus_core.engine.runtime.kv_cache import SequenceCache

        self.pair = pair
        self.prompt = prompt or builtin_prompts()[0]
        self.new_tokens = new_tokens
        self.decoders = {
            k: SpeculativeDecoder(pair, "sps", k=k, record_trace=False, measure_kl=False)
            for k in CALIBRATION_KS
        }
        vocab = min(head_vocab(pair.verifier), head_vocab(pair.draft))
        prefix = pair.encode_prompt(self.prompt) + list(range(200, 200 + new_tokens))
        with torch.inference_mode():
            self.cache = SequenceCache(pair.verifier, vocab)
            self.cache.prefill([prefix])
        self.kept = self.cache.lengths[0]
        self.passes = 0
        self.decoders[CALIBRATION_KS[0]].generate(self.prompt, max_new_tokens=8, seed=0)  # warm

    def forward_ms(self, width: int) -> float:
        """One verifier forward over `width` tokens at the fixed prefix, rolled back after."""
        import torch

        device = self.pair.verifier.device
        ids = torch.arange(300, 300 + width, device=device)[None]
        with torch.inference_mode():
            t0 = time.perf_counter()
            self.cache.step(ids, None, width)
            if device.type == "cuda":
                torch.cuda.synchronize()
            ms = 1000 * (time.perf_counter() - t0)
            self.cache.keep([self.kept])
        return ms


def cost_sample(probe: CostProbe, max_width: int = 13, seed: int = 0) -> CostSample:
    """One pass: every width once (forward, then backward on the next pass, so that a drift in
    the load does not pile onto the wide ones), then a short sps run at each CALIBRATION_KS and
    a verifier-only run of the decoder itself (no recording). What a round spends beyond
    v(k + 1) and its draft is the round's rest o; likewise o_1 for a verifier-only step."""
    if max_width < max(CALIBRATION_KS) + 1:
        raise ValueError(f"max_width must be >= {max(CALIBRATION_KS) + 1}, got {max_width}")
    widths = list(range(1, max_width + 1))
    order = widths if probe.passes % 2 == 0 else widths[::-1]
    probe.passes += 1
    got = {w: probe.forward_ms(w) for w in order}
    verify_ms = tuple(got[w] for w in widths)
    draft, rest = [], []
    for k, dec in probe.decoders.items():
        s = dec.generate(probe.prompt, max_new_tokens=probe.new_tokens, seed=seed).stats
        rounds = max(s.rounds, 1)
        decode_ms = 1000 * (s.wall_s - s.prefill_s - s.record_s) / rounds
        draft.append(1000 * s.draft_s / rounds)
        rest.append(decode_ms - draft[-1] - verify_ms[k])
    dec = probe.decoders[CALIBRATION_KS[0]]
    b = dec.generate_autoregressive(probe.prompt, max_new_tokens=probe.new_tokens, seed=seed).stats
    plain = 1000 * (b.wall_s - b.prefill_s - b.record_s) / max(b.rounds, 1) - verify_ms[0]
    return CostSample(verify_ms, tuple(draft), tuple(rest), plain)


def combine_costs(pair: ModelPair, samples: Sequence[CostSample]) -> PairCosts:
    """The medians of interleaved samples as the pair's costs. The draft's time per round at
    the two CALIBRATION_KS gives its step d (the slope) and its per-round part f."""
    import torch

    if not samples:
        raise ValueError("no cost samples to combine")

    def med(xs: Sequence[float]) -> float:
        return float(statistics.median(xs))

    verify_ms = tuple(med(col) for col in zip(*(s.verify_ms for s in samples), strict=True))
    (ka, kb) = CALIBRATION_KS
    da = med([s.draft_round_ms[0] for s in samples])
    db = med([s.draft_round_ms[1] for s in samples])
    d = max((db - da) / (kb - ka), 0.0)
    f = max(da - ka * d, 0.0)
    if d == 0.0:  # the draft did not grow with k: charge it per step rather than not at all
        d, f = da / ka, 0.0
    rest = med([r for s in samples for r in s.rest_ms])
    return PairCosts(
        identity=pair.identity,
        device=str(pair.device),
        threads=torch.get_num_threads(),
        verify_ms=verify_ms,
        draft_ms=d,
        round_overhead_ms=max(rest, 0.0),
        plain_overhead_ms=max(med([s.plain_rest_ms for s in samples]), 0.0),
        draft_round_ms=f,
        samples=len(samples),
    )


def measure_costs(
    pair: ModelPair,
    max_width: int = 13,
    reps: int = 5,
    prompt: str | None = None,
    new_tokens: int = 32,
) -> PairCosts:
    """The medians of `reps` interleaved `cost_sample`s (v(1..max_width), f, d, o, o_1)."""
    probe = CostProbe(pair, prompt, new_tokens)
    return combine_costs(pair, [cost_sample(probe, max_width, seed=i) for i in range(reps)])


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
    speed = tuple(t * costs.plain_ms / costs.round_ms(k) for t, k in zip(tpc, ks, strict=True))
    return KPrediction(ks, full, measured, tpc, speed, pooled)
