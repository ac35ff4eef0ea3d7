"""The tuner: the parameter of a rule whose mean emitted KL per token meets a budget,
interpolated from a sweep and confirmed by running it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cactus_core.experiments.frontier import Estimate, interpolate_param_for_budget
from cactus_core.experiments.sweep import (
    Progress,
    SettingResult,
    SweepResult,
    run_sweep,
)
from cactus_core.experiments.sweep_cache import SweepCache
from cactus_core.experiments.sweep_config import Setting, SweepConfig, settings_from_grids
from cactus_core.maths.rules import DEFAULT_RULE, RULES, rule_class

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

# Rules whose swept parameter trades emitted KL for acceptance monotonically.
TUNABLE_RULES: tuple[str, ...] = tuple(name for name, cls in RULES.items() if cls.tunable)


@dataclass
class TuneResult:
    """The parameter that meets a KL budget, and the confirming run's measurements."""

    rule: str
    param: str
    value: float
    kl_budget: float
    measured_kl: Estimate
    tokens_per_call: Estimate
    confirmed: bool  # the value comes from a confirming run (not a fallback grid point)
    tries: list[tuple[float, float]] = field(default_factory=list)  # (value, measured KL)
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def setting(self) -> Setting:
        return Setting.of(self.rule, **{self.param: self.value})

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            self.param: self.value,
            "kl_budget": self.kl_budget,
            "measured_emitted_kl": self.measured_kl.to_dict(),
            "tokens_per_call": self.tokens_per_call.to_dict(),
            "confirmed": self.confirmed,
            "tries": [{"value": v, "emitted_kl": _json_num(k)} for v, k in self.tries],
            "sampling": self.sampling,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def cli_flags(self) -> str:
        """The flags that reproduce this setting with `python -m cactus_core generate`."""
        s = self.sampling
        flags = [f"--rule {self.rule}", f"--{self.param.replace('_', '-')} {self.value:.6g}"]
        if s:
            flags += [
                f"--k {s['k']}",
                f"--temperature {s['temperature']:g}",
                f"--top-k {s['top_k']}",
                f"--top-p {s['top_p']:g}",
            ]
        return " ".join(flags)


def _json_num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def tune(
    pair: ModelPair,
    config: SweepConfig,
    kl_budget: float,
    rule: str = DEFAULT_RULE,
    sweep: SweepResult | None = None,
    cache: SweepCache | None = None,
    max_confirm: int = 4,
    on_progress: Callable[[Progress], None] | None = None,
) -> TuneResult:
    """The rule's parameter whose mean emitted KL per token meets kl_budget, confirmed.

    Interpolates the measured curve (KL against the parameter, from `sweep` or from a sweep of
    config's settings for this rule), then runs that value on the same prompts and seeds. If
    the confirming run overshoots the budget, it brackets and tries again, up to max_confirm
    runs in all; failing that it returns the largest value whose run met the budget
    (confirmed=False; at parameter 0 the Cactus rules are lossless, so with 0 in the grid one
    always exists).
    """
    if rule not in TUNABLE_RULES:
        raise ValueError(f"the tuner works on {', '.join(TUNABLE_RULES)}; got {rule!r}")
    if not (math.isfinite(kl_budget) and kl_budget >= 0):
        raise ValueError(f"KL budget must be a number >= 0, got {kl_budget}")
    swept = rule_class(rule).swept()
    assert swept is not None  # every tunable rule has a parameter
    param = swept.name
    if sweep is None:
        own = [s for s in config.settings if s.rule == rule]
        if not own:
            own = settings_from_grids({rule: swept.grid})
        sweep = run_sweep(pair, replace(config, settings=tuple(own)), cache, on_progress)
    known: dict[float, SettingResult] = {
        float(s.setting.value): s for s in sweep.settings if s.setting.rule == rule
    }
    if not known:
        raise ValueError(f"the sweep has no {rule} settings to interpolate")

    def kl_of(res: SettingResult) -> float:
        return res.estimate("emitted_kl").mean

    tries: list[tuple[float, float]] = []
    grid = sorted(known)
    value = interpolate_param_for_budget(grid, [kl_of(known[v]) for v in grid], kl_budget)
    for overshoots in range(max_confirm):
        if value not in known:
            known[value] = _confirm(pair, config, Setting.of(rule, **{param: value}), cache)
        kl_now = kl_of(known[value])
        tries.append((value, kl_now))
        if kl_now <= kl_budget:
            return _tuned(rule, param, value, kl_budget, known[value], True, tries, config)
        # Overshot: bracket the budget between the largest value known to fit and the
        # smallest one above it known not to, and take a regula falsi step. KL is concave in
        # delta, so plain regula falsi creeps up from above; halving the kept end's weight
        # per overshoot (the Illinois rule) makes the next try land on the fitting side.
        fitting = [v for v in known if kl_of(known[v]) <= kl_budget]
        if not fitting:
            break
        lo = max(fitting)
        hi = min(v for v in known if v > lo)
        f_lo = (kl_of(known[lo]) - kl_budget) * 0.5 ** (overshoots + 1)
        f_hi = kl_of(known[hi]) - kl_budget
        if not math.isfinite(f_hi) or f_hi <= f_lo:
            value = 0.5 * (lo + hi)
        else:
            value = lo + (hi - lo) * (-f_lo) / (f_hi - f_lo)
        if value in known:
            break
    fits = [v for v, res in known.items() if kl_of(res) <= kl_budget]
    if not fits:
        raise ValueError(
            f"no {rule} setting meets an emitted KL of {kl_budget:g} nats per token; "
            f"add a smaller {param} to the grid"
        )
    value = max(fits)
    return _tuned(rule, param, value, kl_budget, known[value], False, tries, config)


def _tuned(
    rule: str,
    param: str,
    value: float,
    kl_budget: float,
    res: SettingResult,
    confirmed: bool,
    tries: list[tuple[float, float]],
    config: SweepConfig,
) -> TuneResult:
    s = config.decoding()
    sampling = {k: s[k] for k in ("k", "temperature", "top_k", "top_p", "max_new_tokens", "seed")}
    return TuneResult(
        rule, param, value, kl_budget, res.estimate("emitted_kl"),
        res.estimate("tokens_per_call"), confirmed, tries, sampling,
    )  # fmt: skip


def _confirm(
    pair: ModelPair, config: SweepConfig, setting: Setting, cache: SweepCache | None
) -> SettingResult:
    """One setting on the sweep's prompts and seeds (the baseline chunks come from the cache)."""
    return run_sweep(pair, replace(config, settings=(setting,)), cache).settings[0]
