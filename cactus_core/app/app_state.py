"""The app's logic without Streamlit: settings, presets, table checks and per-position tables.

Pages hold widgets and layout only; every number they show comes from a function here (or
from the rules, decoder and trace modules these call), so it can be unit-tested without a
browser or a script runner.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import Rule, make_rule

# ---------------------------------------------------------------------------------------------
# Settings shared by every page (the sidebar)


@dataclass(frozen=True)
class AppSettings:
    """What the sidebar holds. verifier None: the embedded pair; draft None: the embedded draft
    (it needs a verifier with SmolLM2's tokenizer)."""

    verifier: str | None = None
    draft: str | None = None
    device: str = "auto"
    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 1.0
    k: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if self.verifier is None and self.draft is not None:
            raise ValueError("a draft needs a verifier; leave both empty for the embedded pair")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be ≥ 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be ≥ 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.k < 1:
            raise ValueError(f"k must be ≥ 1, got {self.k}")

    @property
    def pair_key(self) -> tuple[str | None, str | None, str]:
        """What identifies a loaded pair: the cache key for the process-wide model cache."""
        return (self.verifier, self.draft, self.device)

    @property
    def pair_label(self) -> str:
        if self.verifier is None:
            return "embedded pair"
        return f"{self.verifier} + {self.draft or 'the embedded draft'}"


# ---------------------------------------------------------------------------------------------
# Rule parameters: what the widgets offer (ranges inside what make_rule accepts)


@dataclass(frozen=True)
class ParamSpec:
    name: str
    label: str
    low: float
    high: float
    default: float
    step: float
    help: str
    integer: bool = False


_DELTA = ParamSpec(
    "delta", "delta (nats)", 0.0, 3.0, 0.5, 0.01, "Divergence budget; 0 is lossless sps."
)
_BUDGET = ParamSpec(
    "budget",
    "budget, KL(pi ‖ q) per position (nats)",
    0.0,
    1.0,
    0.05,
    0.005,
    "Bound on the divergence of the emitted distribution at every position.",
)
RULE_PARAMS: dict[str, tuple[ParamSpec, ...]] = {
    "sps": (),
    "cactus": (_DELTA,),
    "cactus-exact": (_DELTA,),
    "cactus-budget": (_BUDGET,),
    "tas": (
        ParamSpec("epsilon", "epsilon", 0.0, 1.0, 0.09, 0.01, "Accept if q_n exceeds this…"),
        ParamSpec("alpha", "alpha", 0.0, 1.0, 0.3, 0.01, "…or alpha·exp(−H(q)), the smaller."),
    ),
    "topk": (
        ParamSpec(
            "k_top", "k_top", 1, 100, 5, 1, "Accept drafts among q's top k_top.", integer=True
        ),
    ),
    "interp": (ParamSpec("alpha", "alpha", 0.0, 1.0, 0.5, 0.01, "h = alpha·p + (1 − alpha)·q."),),
    "optimal": (_BUDGET,),
}

RULE_DESCRIPTIONS: dict[str, str] = {
    "sps": "lossless speculative sampling: a(n) = min(1, q_n / p_n)",
    "cactus": "Cactus, the paper's closed form (second-order Taylor) for h_n",
    "cactus-exact": "Cactus with the exact binary-KL root for h_n",
    "cactus-budget": "Cactus with a per-position delta so that KL(pi ‖ q) ≤ budget",
    "tas": "threshold acceptance on q_n (epsilon, alpha·exp(−H(q)))",
    "topk": "accept a draft in q's top k_top",
    "interp": "verify against h = alpha·p + (1 − alpha)·q",
    "optimal": "verify against pi*, the best acceptance at KL(pi ‖ q) = budget",
}


def default_params(name: str) -> dict[str, float]:
    """The widgets' starting values for a rule."""
    if name not in RULE_PARAMS:
        raise ValueError(f"unknown rule {name!r}; allowed: {', '.join(RULE_PARAMS)}")
    return {s.name: (int(s.default) if s.integer else float(s.default)) for s in RULE_PARAMS[name]}


def build_rule(name: str, params: dict[str, float] | None = None) -> Rule:
    """make_rule with the app's defaults filled in for any parameter not given."""
    merged = default_params(name)
    merged.update(params or {})
    return make_rule(name, **merged)


# ---------------------------------------------------------------------------------------------
# Playground inputs: presets and the editable table


@dataclass(frozen=True, eq=False)
class Position:
    """One position: token labels, draft p, verifier q (each [V], sums to 1) and the draft n.

    Equal content means equal positions (hash and == use a fingerprint of the numbers), so a
    Position can key the per-rule cache below.
    """

    labels: tuple[str, ...]
    p: torch.Tensor
    q: torch.Tensor
    drafted: int
    note: str = ""
    notices: tuple[str, ...] = field(default_factory=tuple)
    fingerprint: str = field(init=False, repr=False, default="")

    def __post_init__(self) -> None:
        if not 0 <= self.drafted < len(self.labels):
            raise ValueError(f"drafted index {self.drafted} outside 0..{len(self.labels) - 1}")
        if self.p.shape != (len(self.labels),) or self.q.shape != (len(self.labels),):
            raise ValueError("p, q and labels must have the same length")
        digest = hashlib.sha1()
        digest.update(self.p.detach().cpu().float().numpy().tobytes())
        digest.update(self.q.detach().cpu().float().numpy().tobytes())
        digest.update(repr((self.labels, self.drafted)).encode())
        object.__setattr__(self, "fingerprint", digest.hexdigest())

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Position) and self.fingerprint == other.fingerprint


def _position(labels, p, q, drafted: str, note: str) -> Position:
    return Position(
        labels=tuple(labels),
        p=torch.tensor(p, dtype=torch.float32),
        q=torch.tensor(q, dtype=torch.float32),
        drafted=list(labels).index(drafted),
        note=note,
    )


PRESETS: dict[str, Position] = {
    "Worked example (reference README)": _position(
        ["decode", "generate", "output"],
        [0.05, 0.80, 0.15],
        [0.30, 0.35, 0.35],
        "generate",
        "Lossless acceptance is .35/.80 = 43.75%. At delta = 0.21 Cactus accepts 82.4% with "
        "KL(h ‖ q) ≈ 0.197 nats.",
    ),
    "Confident verifier, draft disagrees": _position(
        ["the", "a", "this", "that"],
        [0.10, 0.15, 0.05, 0.70],
        [0.70, 0.20, 0.06, 0.04],
        "that",
        "The draft bets on a token the verifier gives 4%. A small delta buys a lot of "
        "acceptance here, and a lot of divergence too.",
    ),
    "Flat verifier, peaky draft": _position(
        ["red", "blue", "green", "black", "white", "grey"],
        [0.85, 0.05, 0.04, 0.03, 0.02, 0.01],
        [0.20, 0.18, 0.17, 0.16, 0.15, 0.14],
        "red",
        "The emitted pi drifts from q by more than delta: the residual mixes over every "
        "possible draft.",
    ),
    "Outside the verifier's nucleus (top-p)": _position(
        ["Paris", "the", "a", "London", "Rome"],
        [0.30, 0.10, 0.05, 0.40, 0.15],
        [0.62, 0.25, 0.13, 0.0, 0.0],
        "London",
        "Top-p cut London from q, so q_n = 0: h_n = 0 and it is rejected whatever delta is.",
    ),
}


def parse_table(labels: Sequence[object], p: Sequence[object], q: Sequence[object]) -> Position:
    """Check an edited table of tokens, p and q, and turn it into a Position.

    Raises ValueError with a message meant for the user (negative, NaN, all-zero, too few
    rows, repeated or empty tokens). Columns that are valid but do not sum to 1 are
    normalised, and a notice says so.
    """
    if not (len(labels) == len(p) == len(q)):
        raise ValueError("every row needs a token, a p value and a q value")
    if len(labels) < 2:
        raise ValueError("the table needs at least two tokens")
    names = [("" if x is None else str(x)).strip() for x in labels]
    if any(not n for n in names):
        raise ValueError("every row needs a token name")
    if len(set(names)) != len(names):
        raise ValueError("token names must be distinct")
    notices = []
    cols = {}
    for col, values in (("p", p), ("q", q)):
        try:
            arr = torch.tensor(
                [float("nan") if v is None else float(v) for v in values], dtype=torch.float64
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"column {col} must hold numbers") from err
        if not torch.isfinite(arr).all():
            raise ValueError(f"column {col} has an empty, NaN or infinite entry")
        if (arr < 0).any():
            raise ValueError(f"column {col} has a negative entry; probabilities are ≥ 0")
        total = float(arr.sum())
        if total <= 0:
            raise ValueError(f"column {col} is all zeros; it needs some probability mass")
        if abs(total - 1.0) > 1e-6:
            notices.append(f"{col} summed to {total:.4g}; normalised to 1.")
        cols[col] = (arr / total).to(torch.float32)
    return Position(
        labels=tuple(names), p=cols["p"], q=cols["q"], drafted=0, notices=tuple(notices)
    )


def with_drafted(position: Position, drafted: int) -> Position:
    """The same position with another drafted token."""
    return Position(
        labels=position.labels,
        p=position.p,
        q=position.q,
        drafted=drafted,
        note=position.note,
        notices=position.notices,
    )


# ---------------------------------------------------------------------------------------------
# Playground computations: every rule side by side at one position


@dataclass(frozen=True)
class RuleRow:
    """One rule at one position. Vectors are [V] float32 on the CPU."""

    name: str
    label: str
    accept_drafted: float  # a(n) for the drafted n
    expected_acceptance: float  # Σ_n p(n)·a(n)
    kl_h_q: float  # KL(h ‖ q) for the drafted n
    kl_pi_q: float  # KL(pi ‖ q), pi exact
    h: torch.Tensor
    residual: torch.Tensor
    accept_all: torch.Tensor  # a(n) for every possible n
    pi: torch.Tensor


def playground_rules(
    delta: float,
    budget: float = 0.05,
    interp_alpha: float = 0.5,
    tas_epsilon: float = 0.09,
    tas_alpha: float = 0.3,
    k_top: int = 5,
) -> list[Rule]:
    """Every rule, with delta shared by the two Cactus closed forms."""
    return [
        make_rule("sps"),
        make_rule("cactus", delta=delta),
        make_rule("cactus-exact", delta=delta),
        make_rule("cactus-budget", budget=budget),
        make_rule("optimal", budget=budget),
        make_rule("interp", alpha=interp_alpha),
        make_rule("tas", epsilon=tas_epsilon, alpha=tas_alpha),
        make_rule("topk", k_top=k_top),
    ]


def compare_rules(position: Position, rules: Sequence[Rule]) -> list[RuleRow]:
    """Each rule's h, a(n), residual, pi and divergences at one position.

    Rows are cached per (position, rule), so when one slider moves only the rules it feeds are
    recomputed; the rest come back at once.
    """
    return [_rule_row(position, rule) for rule in rules]


# A row holds six [V] float32 vectors (1.2 MB at V = 49,152); 48 rows bound the cache.
@lru_cache(maxsize=48)
def _rule_row(position: Position, rule: Rule) -> RuleRow:
    p, q = position.p, position.q
    n = torch.tensor(position.drafted)
    h = rule.adjusted_target(q, p, n)
    accept_all, pi = rule.accept_probs_all_and_emitted(p, q)
    return RuleRow(
        name=rule.name,
        label=rule.label,
        accept_drafted=float(accept_all[position.drafted]),
        # Σ_n p(n)·a(n), as divergence.expected_acceptance, reusing the a(n) already computed
        expected_acceptance=float((p * accept_all).sum()),
        kl_h_q=float(kl(h, q)),
        kl_pi_q=float(kl(pi, q)),
        h=h,
        residual=rule.residual(q, p, n),
        accept_all=accept_all,
        pi=pi,
    )


def rule_table(rows: Sequence[RuleRow]) -> list[dict[str, object]]:
    """Rows for st.dataframe: one dict per rule."""
    return [
        {
            "rule": r.label,
            "a(n), drafted": r.accept_drafted,
            "expected acceptance": r.expected_acceptance,
            "KL(h ‖ q)": r.kl_h_q,
            "KL(pi ‖ q)": r.kl_pi_q,
        }
        for r in rows
    ]


@dataclass(frozen=True)
class TaylorGap:
    deltas: list[float]
    kl_taylor: list[float]  # KL(h ‖ q) with the closed form
    kl_exact: list[float]  # KL(h ‖ q) with the exact root
    h_taylor: float  # h_n at the chosen delta
    h_exact: float
    kl_taylor_now: float
    kl_exact_now: float


def _lump(position: Position) -> tuple[torch.Tensor, torch.Tensor]:
    """The two-token lump (n, everything else) of p and q, float64."""
    n = position.drafted
    qn, pn = float(position.q[n]), float(position.p[n])
    q2 = torch.tensor([qn, max(0.0, 1.0 - qn)], dtype=torch.float64)
    p2 = torch.tensor([pn, max(0.0, 1.0 - pn)], dtype=torch.float64)
    return p2 / p2.sum(), q2 / q2.sum()


def _h_and_kl(name: str, delta: float, p2: torch.Tensor, q2: torch.Tensor) -> tuple[float, float]:
    h = make_rule(name, delta=delta).adjusted_target(q2, p2, torch.tensor(0))
    return float(h[0]), float(kl(h, q2))


@lru_cache(maxsize=64)
def _gap_curve(pn: float, qn: float, grid: int, high: float) -> tuple[list, list, list]:
    p2 = torch.tensor([pn, 1.0 - pn], dtype=torch.float64)
    q2 = torch.tensor([qn, 1.0 - qn], dtype=torch.float64)
    deltas = [high * i / (grid - 1) for i in range(grid)]
    kt = [_h_and_kl("cactus", d, p2, q2)[1] for d in deltas]
    ke = [_h_and_kl("cactus-exact", d, p2, q2)[1] for d in deltas]
    return deltas, kt, ke


def taylor_gap(position: Position, delta: float, grid: int = 26, high: float = 2.0) -> TaylorGap:
    """KL(h ‖ q) of cactus and cactus-exact over a delta grid, and both at the chosen delta.

    For the Cactus family h is q rescaled off n, so h_n and KL(h ‖ q) depend only on q_n (the
    KL is the binary KL(h_n ‖ q_n)). The rules therefore run on the two-token lump (n, rest),
    which gives the same numbers as the full vocabulary at any V. The curve does not depend on
    the chosen delta and is cached per position.
    """
    p2, q2 = _lump(position)
    deltas, kt, ke = _gap_curve(float(p2[0]), float(q2[0]), grid, high)
    ht, klt = _h_and_kl("cactus", delta, p2, q2)
    he, kle = _h_and_kl("cactus-exact", delta, p2, q2)
    return TaylorGap(list(deltas), list(kt), list(ke), ht, he, klt, kle)


def truncation_warning(position: Position) -> str | None:
    """The design-notes fact, stated for this position when it applies."""
    n = position.drafted
    if float(position.q[n]) > 0:
        return None
    return (
        f"q puts no mass on the drafted token {position.labels[n]!r} (it sits outside the "
        "verifier's top-k / top-p nucleus), so h_n = 0 for every Cactus delta and the draft is "
        "always rejected. Only a rule that verifies against something other than q's support "
        "(interp, optimal, tas/topk's thresholds) can change that."
    )


# ---------------------------------------------------------------------------------------------
# Decode helpers: metric definitions, modelled speedup, token rendering

METRIC_HELP: dict[str, str] = {
    "tokens per call": (
        "Emitted tokens ÷ verifier forward passes, including the recovered or bonus token "
        "(vLLM's mean acceptance length). At most k + 1."
    ),
    "acceptance rate": (
        "Accepted draft tokens ÷ draft tokens that got an accept/reject decision; drafts after "
        "a rejection in the same round get none."
    ),
    "tokens/s": "Emitted tokens ÷ wall-clock seconds of the generation, on this machine.",
    "emitted KL": (
        "Mean over positions of KL(pi ‖ q) in nats, computed exactly from the full p and q, "
        "not estimated from samples."
    ),
    "speedup": (
        "Tokens/s of speculative decoding ÷ tokens/s of verifier-only sampling, same prompt and "
        "settings, measured back to back here."
    ),
    "modelled speedup": (
        "Tokens per call ÷ (1 + k·c), c = the cost of a draft step relative to a verifier step. "
        "A model of other hardware, not a measurement."
    ),
}


def modelled_speedup(tokens_per_call: float, k: int, c: float) -> float:
    """tokens per call ÷ (1 + k·c): the speedup if a draft step costs c verifier steps."""
    if c < 0 or not math.isfinite(c):
        raise ValueError(f"draft cost ratio c must be a finite number ≥ 0, got {c}")
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    return tokens_per_call / (1.0 + k * c)


FATE_STYLE: dict[str, str] = {
    "accepted": "background:#d8f0e6;border-bottom:2px solid #009E73;",
    "rejected": (
        "background:#fbe3d6;color:#8a3200;text-decoration:line-through;"
        "border-bottom:2px solid #D55E00;"
    ),
    "recovered": "background:#fcefcf;border-bottom:2px solid #E69F00;",
    "bonus": "background:#d6e8f5;border-bottom:2px solid #0072B2;",
    # verifier-only steps (when the context leaves no room to draft) and never-judged drafts
    "sampled": "border-bottom:2px solid #999999;",
    "dropped": "color:#999999;text-decoration:line-through;",
}
FATE_LABELS: dict[str, str] = {
    "accepted": "accepted draft",
    "rejected": "rejected draft (not emitted)",
    "recovered": "recovered (drawn from the residual)",
    "bonus": "bonus (all k accepted; drawn from q)",
    "sampled": "sampled by the verifier alone",
    "dropped": "dropped (drafted after a rejection, never judged)",
}
_LEGEND_FATES = ("accepted", "rejected", "recovered", "bonus")


@dataclass(frozen=True)
class TokenView:
    """One token as the transcript shows it."""

    text: str
    fate: str  # accepted | rejected | recovered | bonus
    round: int
    slot: int
    flipped: bool = False


def _visible(text: str, fate: str) -> str:
    # A struck-through space is invisible; rejected whitespace gets a visible stand-in.
    if fate == "rejected":
        text = text.replace(" ", "␣").replace("\n", "↵")
    return html.escape(text) if text else "∅"


def legend_html() -> str:
    """The fate legend, styled like the transcript."""
    items = [
        f'<span style="{FATE_STYLE[f]}padding:1px 4px;border-radius:3px;">{FATE_LABELS[f]}</span>'
        for f in _LEGEND_FATES
    ]
    items.append(
        '<span style="outline:2px dashed #6a1b9a;padding:1px 4px;border-radius:3px;">'
        "fate flips under replay</span>"
    )
    return (
        '<div style="display:flex;flex-wrap:wrap;gap:8px;font-size:0.9em;">'
        + "".join(items)
        + "</div>"
    )


def transcript_html(prompt_text: str, tokens: Sequence[TokenView]) -> str:
    """The decoded text with every token coloured by fate (a block of HTML, no scripts)."""
    parts = [
        '<div class="cactus-transcript" style="white-space:pre-wrap;overflow-wrap:anywhere;'
        "line-height:1.9;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;"
        "font-size:0.92em;padding:10px 12px;"
        'border:1px solid #dfe5da;border-radius:8px;background:#ffffff;">'
    ]
    if prompt_text:
        parts.append(f'<span style="color:#7a857a;">{html.escape(prompt_text)}</span>')
    for t in tokens:
        style = FATE_STYLE.get(t.fate)
        if style is None:
            raise ValueError(f"unknown fate {t.fate!r}; expected one of {', '.join(FATE_STYLE)}")
        if t.flipped:
            style += "outline:2px dashed #6a1b9a;"
        title = html.escape(f"round {t.round + 1}, slot {t.slot + 1}: {FATE_LABELS[t.fate]}")
        parts.append(
            f'<span title="{title}" style="{style}border-radius:3px;">{_visible(t.text, t.fate)}'
            "</span>"
        )
    parts.append("</div>")
    return "".join(parts)


def chip_label(t: TokenView) -> str:
    """A Markdown label for a clickable token chip (st.pills), coloured by fate."""
    text = t.text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"
    # Markdown would read these as formatting.
    for ch in "\\`*_[]<>#~$:|":
        text = text.replace(ch, "\\" + ch)
    colour = {
        "accepted": "green",
        "rejected": "red",
        "recovered": "orange",
        "bonus": "blue",
        "sampled": "gray",
        "dropped": "gray",
    }[t.fate]
    body = f"~~{text}~~" if t.fate in ("rejected", "dropped") else text
    symbol = {
        "accepted": "✓",
        "rejected": "✗",
        "recovered": "↺",
        "bonus": "★",
        "sampled": "•",
        "dropped": "–",
    }[t.fate]
    mark = "⟲ " if t.flipped else ""
    return f"{mark}{symbol} :{colour}-background[:{colour}[{body}]]"


def display_indices(position: Position, top: int = 12) -> list[int]:
    """Which tokens a figure shows: all of them for a small vocabulary, else the `top` with the
    most mass under p or q, always including the drafted token, in vocabulary order."""
    v = len(position.labels)
    if v <= top:
        return list(range(v))
    score = torch.maximum(position.p, position.q)
    idx = set(torch.topk(score, top).indices.tolist())
    idx.add(position.drafted)
    return sorted(idx)


# ---------------------------------------------------------------------------------------------
# Decode runs: what the Decode page keeps in session state, and views of a trace


@dataclass
class SpeedComparison:
    """Speculative against verifier-only decoding, same prompt and settings, back to back."""

    speculative_tokens_per_s: float
    verifier_only_tokens_per_s: float
    tokens_per_call: float
    k: int
    c_measured: float  # draft step ÷ verifier step, wall time on this machine

    @property
    def speedup(self) -> float:
        if self.verifier_only_tokens_per_s <= 0:
            return 0.0
        return self.speculative_tokens_per_s / self.verifier_only_tokens_per_s

    def verdict(self) -> str:
        s = self.speedup
        if s < 1:
            return (
                f"Speculation is slower here: {s:.2f}× the verifier-only speed "
                f"({self.speculative_tokens_per_s:.1f} against "
                f"{self.verifier_only_tokens_per_s:.1f} tokens/s)."
            )
        return (
            f"Speculation is faster here: {s:.2f}× ({self.speculative_tokens_per_s:.1f} against "
            f"{self.verifier_only_tokens_per_s:.1f} tokens/s)."
        )


def draft_cost_ratio(stats) -> float:
    """c measured: mean wall time of a draft forward ÷ that of a verifier forward (0 if
    either is unknown)."""
    if not (stats.draft_calls and stats.verifier_calls and stats.verify_s > 0):
        return 0.0
    return (stats.draft_s / stats.draft_calls) / (stats.verify_s / stats.verifier_calls)


@dataclass
class DecodeRun:
    """One Generate click: the inputs and the decoder's output (trace and stats)."""

    run_id: int
    prompt: str
    settings: AppSettings
    rule_name: str
    rule_params: dict
    max_new_tokens: int
    chat_template: bool
    output: object  # decoder.GenerationOutput
    comparison: SpeedComparison | None = None
    replay: object | None = None  # trace.Replay

    @property
    def trace(self):
        return self.output.trace


def flipped_slots(replay) -> dict[int, set[int]]:
    """Round index -> drafted slots whose fate changes under the replay."""
    if replay is None:
        return {}
    return {r.index: set(r.flipped) for r in replay.rounds if r.flipped}


def round_tokens(
    rnd, flips: set[int] | None = None, include_dropped: bool = True
) -> list[TokenView]:
    """The tokens of one round in reading order: accepted drafts, the rejected draft, the
    dropped drafts after it (if asked), then the recovered or bonus token."""
    flips = flips or set()
    views: list[TokenView] = []
    m, emitted = rnd.num_accepted, len(rnd.emitted_ids)
    for j in range(rnd.k):
        fate = rnd.draft_fates[j]
        if fate == "accepted" and j >= emitted:
            break  # cut by EOS or the token budget
        if fate == "rejected" and emitted <= m:
            break  # the recovered token was cut, so the rejection never showed
        if fate == "dropped" and not include_dropped:
            continue
        views.append(TokenView(rnd.draft_text[j], fate, rnd.index, j, j in flips))
    if emitted > m:
        fate = rnd.emitted_fates[m]
        text = rnd.emitted_text[m] if m < len(rnd.emitted_text) else ""
        views.append(TokenView(text, fate, rnd.index, m if fate != "sampled" else 0))
    return views


def transcript_tokens(rounds, replay=None) -> list[TokenView]:
    """Every round's tokens for the transcript (dropped drafts left out)."""
    flips = flipped_slots(replay)
    out: list[TokenView] = []
    for rnd in rounds:
        out.extend(round_tokens(rnd, flips.get(rnd.index), include_dropped=False))
    return out


@dataclass(frozen=True)
class LiveStats:
    tokens: int
    tokens_per_call: float
    acceptance_rate: float | None
    tokens_per_s: float
    emitted_kl: float


def live_stats(rounds, elapsed_s: float) -> LiveStats:
    """The counters while rounds stream in, with the same definitions as GenerationStats."""
    tokens = sum(len(r.emitted_ids) for r in rounds)
    calls = len(rounds)
    decided = sum(min(r.num_accepted + 1, r.k) for r in rounds if r.k)
    accepted = sum(r.num_accepted for r in rounds if r.k)
    kl_sum = 0.0
    for r in rounds:
        for pos in r.positions[: min(len(r.emitted_ids), r.k)]:
            if pos.kl_pi_q is not None:
                kl_sum += pos.kl_pi_q
    return LiveStats(
        tokens=tokens,
        tokens_per_call=tokens / calls if calls else 0.0,
        acceptance_rate=accepted / decided if decided else None,
        tokens_per_s=tokens / elapsed_s if elapsed_s > 0 else 0.0,
        emitted_kl=kl_sum / tokens if tokens else 0.0,
    )


def round_table(rnd) -> list[dict[str, object]]:
    """One row per drafted slot of a round, for st.dataframe (h_n is in the inspector)."""
    rows = []
    for j in range(rnd.k):
        pos = rnd.positions[j] if j < len(rnd.positions) else None
        rows.append(
            {
                "drafted": _show(rnd.draft_text[j]),
                "fate": rnd.draft_fates[j],
                "p_n": None if pos is None else pos.p_n,
                "q_n": None if pos is None else pos.q_n,
                "a(n)": rnd.accept_probs[j],
                "u": rnd.accept_coins[j],
            }
        )
    return rows


def _show(text: str) -> str:
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def trace_position(trace, round_index: int, slot: int) -> Position:
    """A drafted position of a trace as a Position over a reduced vocabulary.

    The trace keeps the top-M entries of p and q (plus the drafted token's exact p_n, q_n).
    The reduced vocabulary is their union plus one "(rest)" token holding each row's remaining
    mass, so rule maths on it is exact for the kept tokens' own a(n) and approximate elsewhere.
    """
    rnd = trace.rounds[round_index]
    if not 0 <= slot < rnd.k:
        raise ValueError(f"slot {slot} is not a drafted slot of round {round_index} (k = {rnd.k})")
    pos = rnd.positions[slot]
    ids: list[int] = []
    for i in list(pos.replay_q_ids) + list(pos.replay_p_ids):
        if i not in ids:
            ids.append(i)
    p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
    q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
    pv = torch.tensor([p.get(i, 0.0) for i in ids], dtype=torch.float64)
    qv = torch.tensor([q.get(i, 0.0) for i in ids], dtype=torch.float64)
    labels = [trace.text(i) for i in ids]
    rest_p, rest_q = max(0.0, 1.0 - float(pv.sum())), max(0.0, 1.0 - float(qv.sum()))
    if rest_p > 1e-6 or rest_q > 1e-6:
        pv = torch.cat([pv, torch.tensor([rest_p], dtype=torch.float64)])
        qv = torch.cat([qv, torch.tensor([rest_q], dtype=torch.float64)])
        labels.append("(rest)")
    return Position(
        labels=tuple(labels),
        p=(pv / pv.sum()).float(),
        q=(qv / qv.sum()).float(),
        drafted=ids.index(pos.draft_id),
        note=f"Round {round_index + 1}, slot {slot + 1} of the last decode run "
        f"(drafted {_show(rnd.draft_text[slot])!r}, {rnd.draft_fates[slot]}).",
    )


@dataclass(frozen=True)
class DecodeChoice:
    title: str
    round_index: int
    slot: int

    def position(self, trace) -> Position:
        return trace_position(trace, self.round_index, self.slot)


def decode_positions(trace) -> list[DecodeChoice]:
    """Every judged drafted position of a trace (accepted or rejected), for a picker."""
    out = []
    for rnd in trace.rounds:
        for j in range(rnd.k):
            fate = rnd.draft_fates[j]
            if fate == "dropped" or j >= len(rnd.positions):
                continue
            out.append(
                DecodeChoice(
                    f"round {rnd.index + 1}, slot {j + 1}: {_show(rnd.draft_text[j])!r} ({fate})",
                    rnd.index,
                    j,
                )
            )
    return out


@dataclass
class Inspection:
    """What the token inspector shows for one token of a round."""

    title: str
    labels: list[str]
    series: dict[str, list[float]]
    highlight: int | None
    accept_prob: float | None = None
    coin: float | None = None
    kl_h_q: float | None = None
    kl_pi_q: float | None = None
    p_n: float | None = None
    q_n: float | None = None
    h_n: float | None = None
    notes: list[str] = field(default_factory=list)


def judging_rule(trace) -> Rule:
    """The rule the decoder judged with: exact match (sps) at T = 0, else the trace's rule."""
    if float(trace.meta["temperature"]) == 0.0:
        return make_rule("sps")
    return trace.rule


def inspect_token(trace, round_index: int, slot: int, top: int = 12) -> Inspection:
    """The inspector for slot `slot` of round `round_index`.

    A drafted slot (accepted, rejected or dropped) shows p, q, h and the residual there, the
    coin against a(n) and both KLs. The recovered token lives at the rejected draft's slot,
    so it shows that slot with the recovered token marked. A bonus (or verifier-only) token
    shows q, the distribution it was drawn from.
    """
    rnd = trace.rounds[round_index]
    m = rnd.num_accepted
    if rnd.k == 0 or slot >= rnd.k:
        pos = rnd.positions[-1] if rnd.positions else None
        fate = rnd.emitted_fates[-1] if rnd.emitted_fates else "bonus"
        text = rnd.emitted_text[-1] if rnd.emitted_text else trace.text(rnd.next_id)
        title = f"Round {round_index + 1}: {_show(text)!r}, {FATE_LABELS[fate]}"
        if pos is None or not pos.q_ids:
            return Inspection(title, [], {}, None, notes=["This trace kept no rows here."])
        labels = [trace.text(i) for i in pos.q_ids[:top]]
        hi = pos.q_ids.index(rnd.next_id) if rnd.next_id in pos.q_ids[:top] else None
        return Inspection(
            title,
            labels,
            {"q": list(pos.q_probs[:top])},
            hi,
            notes=["No rule applies to this token: it is drawn from q itself."],
        )
    pos = rnd.positions[slot]
    fate = rnd.draft_fates[slot]
    position = trace_position(trace, round_index, slot)
    rule = judging_rule(trace)
    row = compare_rules(position, [rule])[0]
    shown = [i for i in display_indices(position, top) if position.labels[i] != "(rest)"]
    notes = []
    recovered = None
    if fate == "rejected" and len(rnd.emitted_ids) > m:
        recovered = rnd.emitted_text[m]
        notes.append(
            f"Rejected, so the round ended with {_show(recovered)!r} drawn from the residual "
            "r_n (coin u' = " + f"{rnd.sample_coin:.3f})."
        )
    if fate == "dropped":
        notes.append("Drafted after a rejection in this round: never judged, never emitted.")
    if pos.q_n == 0.0:
        notes.append(
            "q_n = 0: the verifier's truncation (top-k / top-p) cut this token, so no delta "
            "can accept it."
        )
    if position.labels[-1] == "(rest)":
        notes.append(
            "Bars and the residual use the trace's top rows of p and q (the rest of the "
            "vocabulary lumped); a(n), u and both KLs are the decoder's exact values."
        )
    if float(trace.meta["temperature"]) == 0.0:
        notes.append("T = 0: p and q are one-hot and every rule is exact-match verification.")
    title = f"Round {round_index + 1}, slot {slot + 1}: {_show(rnd.draft_text[slot])!r}, "
    title += FATE_LABELS[fate]
    return Inspection(
        title=title,
        labels=[position.labels[i] for i in shown],
        series={
            "p": position.p[shown].tolist(),
            "q": position.q[shown].tolist(),
            "h": row.h[shown].tolist(),
            "residual": row.residual[shown].tolist(),
        },
        highlight=shown.index(position.drafted),
        accept_prob=rnd.accept_probs[slot],
        coin=rnd.accept_coins[slot],
        kl_h_q=pos.kl_h_q,
        kl_pi_q=pos.kl_pi_q,
        p_n=pos.p_n,
        q_n=pos.q_n,
        h_n=pos.h_n,
        notes=notes,
    )
