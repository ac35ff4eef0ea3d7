"""What a rule is: its metadata (`Param`, `RuleCard`, `Capabilities`) and its protocol.

Notation (the paper's): p is the draft's distribution, q the verifier's, n the drafted token,
h the distribution the rule verifies against, pi the emitted distribution. Hugging Face and
vLLM call the draft q and the target p.

Shapes: `...` is any leading shape of positions (vLLM's [B, k], one position [], a batch of
rows [N]) and V the vocabulary. Every method takes q and p in the work dtype (float32, or
float64 for float64 input) unless it says it validates and converts.

The protocol every rule implements, in two layers:

- Whole-row view (what tests, the Playground and the docs use; each validates its input):
  `adjusted_target(q, p, n)` h^(n) [..., V]; `accept_probs(q, p, n)` a(n) [...];
  `residual(q, p, n)` r_n [..., V], normalised; `accept_probs_all(p, q)` a(n) for every
  possible n [..., V]; `emitted(p, q)` pi [..., V].
- Decode-loop view (what `verify` uses, with no validation and no Python loop over positions):
  `position_stats(q, p)` -> RowStats, a tuple of tensors shaped like the positions [...]
  holding what a(n) needs from whole rows (a threshold, a per-position delta, clip bounds),
  empty for pointwise rules (`caps.needs_rows` False); a `Drafted` value holds what one decision
  reads (q_n, p_n, those stats, and the whole rows and n where the caller has them);
  `accept(drafted)` a(n) [...], `target(drafted)` h^(n) [..., V] and
  `residual_weights(drafted)` the unnormalised residual [..., V], a fresh tensor the caller
  may edit in place. A ratio rule's a(n) is one hop from the rule: `accept` is
  min(1, h_n / p_n) with the rule's own `h_n(drafted)`.

Every rule rejects a draft with q_n = 0 (also one with p_n = 0, a draft not sampled from the p
passed in): the verifier must never emit a token it gives probability 0. `accept_all`
applies that rule-wide in the base class (subclasses define `_accept_all`), and so does
`accept` for ratio rules; a rule that overrides `accept` keeps the zero with `where_q_positive`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast, overload

import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.validation import (
    check_int,
    check_number,
    check_pair,
    check_shape,
    id_checks,
    raise_if_any,
    work_dtype,
)

RowStats = tuple[torch.Tensor, ...]
NO_STATS: RowStats = ()
# Upper end of the unbounded parameters (delta, budgets): far past where anything changes.
UNBOUNDED = 1e9
# The mantissas of a log slider's steps in one decade (Param.log_steps): ten, each 1.2 to 1.33
# times the one before, so an arrow key moves the value by a step that shows (42 a decade
# moved δ by 0.0001 at its low end).
_LOG_MANTISSAS = ("1.0", "1.2", "1.5", "2.0", "2.5", "3.0", "4.0", "5.0", "6.0", "8.0")
# Significant digits a log parameter keeps from a link or a tuner (Param.keep).
KEPT_DIGITS = 4


# A parameter's value type: a whole number (k_top) or a real one (delta).
Value = TypeVar("Value", int, float)


@dataclass(frozen=True)
class Param(Generic[Value]):
    """One parameter of a rule: how make_rule checks it, how widgets show it, how sweeps vary it.

    A rule declares it as a class attribute named like it (`delta = Param("delta", ...)`), which
    is its one home: the class's `params_spec` lists its parameters in declaration order, and on
    a rule the attribute reads the rule's value (`make_rule("cactus", delta=1.0).delta` is 1.0,
    typed like the default), on the class the `Param` itself (`Cactus.delta.grid`)."""

    name: str  # keyword of make_rule
    symbol: str  # as labels and widgets write it
    default: Value
    low: float  # what make_rule accepts
    high: float
    ui: tuple[float, float]  # the widgets' range (inside [low, high])
    grid: tuple[float, ...]  # the sweep's default values, in the order a sweep lists them
    help: str
    integer: bool = False
    log: bool = False  # spaced logarithmically in curves (from ui[1]/1000 when ui[0] = 0)
    unit: str = ""

    @property
    def step(self) -> float:
        """A widget step: whole numbers for integers, else 1/300 of the range, rounded to 1-2-5."""
        if self.integer:
            return 1.0
        raw = (self.ui[1] - self.ui[0]) / 300
        mag = 10 ** math.floor(math.log10(raw))
        return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))

    @property
    def label(self) -> str:
        return f"{self.symbol} ({self.unit})" if self.unit else self.symbol

    def show(self, value: float) -> str:
        """'δ=0.5', or 'KL≤0.1' (or 'H₃≥0.3') when the symbol is itself a relation."""
        sep = "" if self.symbol[-1] in "≤<=≥>" else "="
        return f"{self.symbol}{sep}{value:g}"

    def coerce(self, value: float) -> Value:
        """A form's number as this parameter takes it (widgets hand back floats, also for a
        whole-number parameter)."""
        return cast(Value, int(value) if self.integer else float(value))

    def check(self, rule: str, value: object) -> float | int:
        return check_number(rule, self.name, value, self.low, self.high, self.integer)

    @functools.cached_property
    def log_steps(self) -> tuple[float, ...]:
        """A log parameter's widget values, () for a linear one: 0 when the range starts there,
        then every decade from `log_floor` to ui[1] in the same ten steps of two significant
        digits (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0), so that equal slider travel
        is an equal factor and every label is short. The grid and the default are always among
        them (a sweep's point and the start value are reachable); `options` adds a value set
        from elsewhere (a link, the tuner)."""
        if not self.log or self.integer:
            return ()
        lo, hi = self.ui
        floor = lo if lo > 0 else self.log_floor
        out = {0.0} if lo <= 0 else set()
        for exp in range(math.floor(math.log10(floor)), math.ceil(math.log10(hi)) + 1):
            # Built from text, so 0.3 is the literal 0.3 (3 * 0.1 is 0.30000000000000004).
            out |= {float(f"{m}e{exp}") for m in _LOG_MANTISSAS}
        out |= {float(v) for v in (*self.grid, self.default)}
        return tuple(sorted(v for v in out if v == 0.0 or floor <= v <= hi))

    @property
    def log_floor(self) -> float:
        """The smallest positive widget value of a log parameter whose range starts at 0: the
        power of ten at or below its smallest positive grid value (the grid says where the
        parameter starts to matter; below it the slider would move nothing), else ui[1]/1000."""
        positive = [v for v in self.grid if v > 0] or [self.ui[1] / 1000]
        return 10.0 ** math.floor(math.log10(min(positive)) + 1e-9)

    def snap(self, value: float) -> float | int:
        """The widget value nearest `value`: a log step (nearest in log, with 0 a decade below
        the first positive step), a multiple of `step` from ui[0], or a whole number."""
        if self.integer:
            return round(value)
        steps: tuple[float, ...] = self.log_steps
        if not steps:
            base = self.ui[0]
            return round(base + round((value - base) / self.step) * self.step, 10)
        positive = [v for v in steps if v > 0]
        zero_at = positive[0] / 10
        axis = [math.log(v if v > 0 else zero_at) for v in steps]
        x = math.log(max(value, zero_at))
        return steps[min(range(len(steps)), key=lambda i: abs(axis[i] - x))]

    def keep(self, value: float) -> float:
        """A log parameter's value from a link or the tuner, kept as given to KEPT_DIGITS
        significant digits (a tuned δ of 0.05236 stays 0.05236; the slider adds it to its
        steps, `options`), where `snap` would move it to the nearest step. A value nearer the
        slider's 0 than its first positive step (on snap's log axis) is that 0: 1e-300 is δ = 0,
        not a step of its own."""
        steps: tuple[float, ...] = self.log_steps
        positive = [v for v in steps if v > 0]
        if steps and steps[0] == 0.0 and positive and value < positive[0] / math.sqrt(10):
            return 0.0
        return float(f"{value:.{KEPT_DIGITS}g}")

    def options(self, current: float | None = None) -> tuple[float, ...]:
        """The log slider's values: its steps, and `current` among them when it is not one."""
        steps: tuple[float, ...] = self.log_steps
        if current is None or current in steps:
            return steps
        return tuple(sorted({*steps, float(current)}))

    def show_step(self, value: float) -> str:
        """A widget value as its label writes it: 0.0012, 0.21, 3."""
        return f"{value:g}"

    def __set_name__(self, owner: type, attribute: str) -> None:
        if attribute != self.name:
            raise TypeError(
                f"{owner.__name__}.{attribute} holds the parameter {self.name!r}: a rule's "
                "parameter attribute is named like its parameter"
            )

    @overload
    def __get__(self, rule: None, owner: type | None = None) -> Param[Value]: ...

    @overload
    def __get__(self, rule: Rule, owner: type | None = None) -> Value: ...

    def __get__(self, rule: Rule | None, owner: type | None = None) -> Param[Value] | Value:
        if rule is None:
            return self
        return cast(Value, rule.params[self.name])

    def values(self, count: int) -> list[float]:
        """count values spanning the widget range (log-spaced for `log`), for curves."""
        lo, hi = self.ui
        if self.integer:
            pts = torch.logspace(math.log10(max(lo, 1)), math.log10(hi), count)
            return sorted({float(round(v)) for v in pts.tolist()})
        if self.log:
            start = lo if lo > 0 else hi / 1000
            head = [] if lo > 0 else [0.0]
            n = count - len(head)
            pts = torch.logspace(math.log10(start), math.log10(hi), n, dtype=torch.float64)
            return head + pts.tolist()
        return torch.linspace(lo, hi, count, dtype=torch.float64).tolist()


@dataclass(frozen=True)
class Rows:
    """The whole rows behind a decision: q, p [..., V] and the drafted ids n [...]."""

    q: torch.Tensor
    p: torch.Tensor
    n: torch.Tensor


@dataclass(frozen=True)
class Drafted:
    """What a rule judges a drafted token on, at positions [...]: q_n and p_n, the rows'
    `position_stats` (empty for a pointwise rule) and, where the caller has them, the whole
    rows (`Rows`): `target` and `residual_weights` read those, `accept` never does."""

    qn: torch.Tensor  # [...]
    pn: torch.Tensor  # [...]
    stats: RowStats = NO_STATS  # each [...]
    q: torch.Tensor | None = None  # [..., V]
    p: torch.Tensor | None = None  # [..., V]
    n: torch.Tensor | None = None  # [...]

    @property
    def rows(self) -> Rows:
        """The whole rows; ValueError where the caller passed only q_n and p_n."""
        if self.q is None or self.p is None or self.n is None:
            raise ValueError("this needs the whole rows q, p and the drafted ids n")
        return Rows(self.q, self.p, self.n)


@dataclass(frozen=True)
class RuleCard:
    """How a rule is shown and cited: everything the pages, the charts and docs/rules.md say
    about it, none of which the maths reads. A family sets what its members share and each
    member `replace`s the rest."""

    description: str = ""  # one line: what it verifies against
    # One plain sentence for a student: what the rule does, without symbols it does not explain
    # (the Playground shows it beside a focused rule; docs/rules.md lists it under the rule).
    in_words: str = ""
    citation: str = ""
    guarantee: str = ""  # what it promises about pi or acceptance, in one line
    # How charts draw it: its family (one marker each) and its own colour, none shared.
    family: str = ""
    colour: str = ""
    shown_first: bool = False  # a chart of every rule opens with it shown
    # Said where the rule is picked when it decodes measurably slower than its family (a
    # search per position): what it costs, with the benchmark that measured it.
    speed_note: str = ""
    # Said where the rule's residual puts mass on the drafted token itself, which no rule of the
    # form a(n) = min(1, h_n / p_n) does: why it can.
    residual_in_words: str = ""
    # a round-level rule: which of a round's drafts it keeps, as a clause for the Step page
    round_in_words: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What a rule can do beyond a(n) = min(1, h_n / p_n) position by position: the flags
    `verify`, the tree verifier, the sweeps and the pages branch on."""

    lossless: bool = False  # pi = q for every p
    needs_rows: bool = False  # a(n) needs whole rows, not only (p_n, q_n)
    # decides on the whole round (`verify` hands it all k + 1 rows), not position by position;
    # its per-position methods then describe a round with k = 1
    round_level: bool = False
    # a round-level rule that has a tree form: it judges a draft tree by traversal verification
    # (`maths.traversal`) instead of being refused there
    judges_trees_by_traversal: bool = False
    # keeps sps's coin and only ever turns an sps rejection into an acceptance of the drafted
    # token, on evidence a position does not hold (later drafts, hidden states): its
    # `verify_round` reports sps's a(n) as the per-draft chances, and its emitted law on a
    # decode is estimated (`experiments.estimates.override`), not read off `emitted`
    overrides_sps: bool = False
    # a round-level rule that decides from the verifier's hidden states at the drafts
    # (`verify_round`'s hidden), which only a decoder's verify pass has: a trace's replay, vLLM
    # and the Playground's rows cannot run it
    reads_hidden: bool = False
    tunable: bool = False  # its first parameter trades KL for acceptance monotonically


class Rule:
    """An acceptance rule with its parameters. Subclasses set `name`, `card`, `caps` (where
    it differs from the default), their `Param`s and the hooks; everything else (validation,
    q_n = 0, labels) lives here."""

    name: ClassVar[str]
    card: ClassVar[RuleCard]  # how it is shown and cited
    caps: ClassVar[Capabilities] = Capabilities()  # what verify and the app may ask of it
    # Its parameters (`Param` class attributes), in declaration order, inherited ones first:
    # set by __init_subclass__, never by hand.
    params_spec: ClassVar[tuple[Param[Any], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: dict[str, Param[Any]] = {}
        for klass in reversed(cls.__mro__):
            found |= {k: v for k, v in vars(klass).items() if isinstance(v, Param)}
        cls.params_spec = tuple(found.values())

    def __init__(self, **params: Any) -> None:
        given = {p.name: params.get(p.name, p.default) for p in self.params_spec}
        self.params: dict[str, float | int] = {
            p.name: p.check(self.name, given[p.name]) for p in self.params_spec
        }

    def could_override(self, q: torch.Tensor, k: int) -> torch.Tensor:
        """For a rule that `overrides_sps`: where, among a round's first d drafts (verifier
        rows q [d, V], k drafts in the round), it could accept a draft sps rejected ->
        bool [d]."""
        raise NotImplementedError(f"rule {self.name!r} never overrides sps")

    def check_hidden(self, hidden_size: int) -> None:
        """For a rule that `reads_hidden`: ValueError unless it can read a verifier's hidden
        states of this size."""

    def data_identity(self) -> dict[str, str]:
        """What besides the code and the parameters decides the rule's numbers (a file it
        reads, by digest), for the sweep cache's keys; none for a rule of formulas alone."""
        return {}

    # -- metadata ------------------------------------------------------------------------------
    @classmethod
    def swept(cls) -> Param[Any] | None:
        """The parameter a sweep varies (the first one), or None for a rule without any."""
        return cls.params_spec[0] if cls.params_spec else None

    @classmethod
    def decisions_replay_exactly(cls, params: dict[str, float | int], kept: int) -> bool:
        """Whether a(n) is the same from rows that keep only the top `kept` entries (a trace's
        replay rows): yes for pointwise rules, whatever the tail."""
        return not cls.caps.needs_rows

    @property
    def label(self) -> str:
        values = ", ".join(p.show(self.params[p.name]) for p in self.params_spec)
        return f"{self.name} {values}" if values else self.name

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"make_rule({self.name!r}{', ' if args else ''}{args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and (self.name, self.params) == (other.name, other.params)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.params.items()))))

    # -- decode-loop protocol (no validation) --------------------------------------------------
    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        """What a(n) needs from the whole rows q, p [..., V]: tensors [...] (empty if pointwise)."""
        return NO_STATS

    def drafted(self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor) -> Drafted:
        """The `Drafted` value of rows q, p [..., V] (work dtype) at drafted ids n [...]."""
        stats = self.position_stats(q, p) if self.caps.needs_rows else NO_STATS
        return Drafted(gather(q, n), gather(p, n), stats, q, p, n)

    def h_n(self, d: Drafted) -> torch.Tensor:
        """h_n [...], what a ratio rule raises (or lowers) q_n to at the drafted token."""
        raise NotImplementedError(f"{self.name} is not a ratio rule: it defines accept itself")

    def accept(self, d: Drafted) -> torch.Tensor:
        """a(n) [...] = min(1, h_n / p_n), 0 wherever q_n = 0."""
        return where_q_positive(min1_ratio(self.h_n(d), d.pn), d.qn)

    def target(self, d: Drafted) -> torch.Tensor:
        """h^(n) [..., V], fresh, from the whole rows of `d`."""
        raise NotImplementedError

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        """max(0, h − p) [..., V], unnormalised and fresh. A row with no mass there has h = p,
        so its draft is only rejected through rounding; such rows fall back to p."""
        return fallback_(self.target(d).sub_(d.rows.p).clamp_min_(0.0), d.rows.p)

    def accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        """a(n) for every possible draft n [..., V]; 0 wherever q = 0."""
        return self._accept_all(p, q, stats) * (q > 0).to(q.dtype)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The exact emitted pi [..., V] (no validation: see `emitted_distribution`)."""
        raise NotImplementedError

    def emitted_kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """KL(pi ‖ q) [...] of the exact emitted pi (no validation: see `emitted_kl`). A rule
        that can get it from less than pi over the whole vocabulary overrides this."""
        return kl(self.emitted(p, q), q)

    def verify_round(
        self,
        p: torch.Tensor,
        n: torch.Tensor,
        q: torch.Tensor,
        uniforms: torch.Tensor,
        sample_uniforms: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A `round_level` rule's decision on whole drafts: (num_accepted [B], its per-draft
        chances [B, k], the token emitted after the accepted drafts [B]), from p [B, k, V],
        n [B, k], q [B, k+1, V] and the round's coins. A rule that `reads_hidden` also takes
        hidden [B, k+1, H], the verifier's final hidden states at the k + 1 rows."""
        raise NotImplementedError(f"{self.name} decides position by position")

    # -- hooks ---------------------------------------------------------------------------------
    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        raise NotImplementedError

    def _accept_all_and_emitted(
        self, p: torch.Tensor, q: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.accept_all(p, q, self.position_stats(q, p)), self.emitted(p, q)

    # -- whole-row protocol (validated) --------------------------------------------------------
    def _prepare(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor | None, validate: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        check_pair(p, q, validate)
        if n is not None:
            check_int("n", n)
            check_shape("n", n, q.shape[:-1])
            if validate:
                raise_if_any(id_checks("n", n, q.shape[-1]))
            n = n.long()
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        return q.to(dtype), p.to(dtype), n

    def _prepare_drafted(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, p, _ = self._prepare(q, p, n, validate)
        return q, p, n.long()

    def adjusted_target(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """h^(n) [..., V] for verifier q, draft p [..., V] and drafted ids n [...]."""
        return self.target(self.drafted(*self._prepare_drafted(q, p, n, validate)))

    def accept_probs(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """a(n) [...]: the chance of accepting the drafted n."""
        return self.accept(self.drafted(*self._prepare_drafted(q, p, n, validate)))

    def residual(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """r_n [..., V]: the normalised distribution sampled when n is rejected."""
        w = self.residual_weights(self.drafted(*self._prepare_drafted(q, p, n, validate)))
        return w / w.sum(-1, keepdim=True)

    def accept_probs_all(
        self, p: torch.Tensor, q: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """a(n) for every possible draft n: p, q [..., V] -> [..., V]."""
        q, p, _ = self._prepare(q, p, None, validate)
        return self.accept_all(p, q, self.position_stats(q, p))

    def accept_probs_all_and_emitted(
        self, p: torch.Tensor, q: torch.Tensor, validate: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(a(n) for every n, pi), both [..., V]: what the Playground redraws on each move.
        Rules whose h costs a solve (the exact root, the budget search) solve it once for both."""
        q, p, _ = self._prepare(q, p, None, validate)
        return self._accept_all_and_emitted(p, q)


def fallback_(w: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Rows of w (non-negative) with no mass become `fallback`, in place. Arithmetic rather
    than torch.where: where over [B, V] is slow on CPU and this runs in every verify."""
    empty = (w.sum(-1, keepdim=True) <= 0).to(w.dtype)
    return w.addcmul_(fallback, empty)


def where_q_positive(a: torch.Tensor, qn: torch.Tensor) -> torch.Tensor:
    """a(n) with 0 wherever q_n = 0 (every rule's one invariant), in place on a fresh a."""
    return a.mul_((qn > 0).to(a.dtype))


def min1_ratio(h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """min(1, h/p), with p = 0 counted as accepted (q_n = 0 is rejected by `Rule.accept`)."""
    return torch.where(p <= h, torch.ones_like(h), h / p)


def gather(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """x [..., V] at ids n [...] -> [...]."""
    return x.gather(-1, n.unsqueeze(-1)).squeeze(-1)
