"""The Playground's numbers: every rule side by side at one position, with the widgets'
parameters read from the rules' metadata, and the Taylor closed form against the exact root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from cactus_core.app.shared.figures import display_token
from cactus_core.app.shared.metrics import Headline
from cactus_core.app.shared.param_groups import (  # noqa: F401 - the Playground's names
    ParamGroup,
    headline_group,
    playground_params,
    playground_rules,
)
from cactus_core.app.shared.positions import Position, display_indices, truncation_warning
from cactus_core.app.shared.rule_rows import RuleRow, compare_rules, rule_table  # noqa: F401
from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import (
    DEFAULT_RULE,
    LOSSLESS_RULE,
    RULES,
    Cactus,
    CactusExact,
    make_rule,
)
from cactus_core.maths.rules.table import rule_anchor


def _change(diff: float, against: str) -> str | None:
    """A card's change of a probability, in percentage points (82.4% against 43.8% is +38.6
    points, not +38.6%), or none when it rounds to nothing (no green arrow for +0.0)."""
    return None if abs(diff) < 0.0005 else f"{100 * diff:+.1f} points vs {against}"


def headlines(position: Position, rows: Sequence[RuleRow]) -> list[Headline]:
    """The default rule against the lossless one at this position."""
    by_name = {r.name: r for r in rows}
    base, main = by_name[LOSSLESS_RULE], by_name[DEFAULT_RULE]
    token = display_token(position.labels[position.drafted])
    gain = main.expected_acceptance - base.expected_acceptance
    gain_n = main.accept_drafted - base.accept_drafted
    return [
        Headline(f"{base.label}: expected acceptance", f"{base.expected_acceptance:.1%}"),
        Headline(
            f"{main.label}: expected acceptance",
            f"{main.expected_acceptance:.1%}",
            _change(gain, base.name),
        ),
        Headline(
            f"a(n) for n = {token}",
            f"{main.accept_drafted:.1%}",
            _change(gain_n, base.name),
        ),
        Headline(
            f"{main.name}: KL(h ‖ q) / KL(pi ‖ q)",
            f"{main.kl_h_q:.3f} / {main.kl_pi_q:.3f}",
            help="nats. h is what this draft is verified against; pi is what is actually emitted.",
        ),
    ]


@dataclass(frozen=True)
class Note:
    """What the Playground says about the position on screen, from the numbers it shows."""

    text: str
    warning: bool = False


def _kl_text(x: float) -> str:
    return f"{x:.3f}"  # as the headline card writes KL


def position_note(position: Position, rows: Sequence[RuleRow], delta: float) -> Note | None:
    """The preset's note, worded from this position's numbers at the default rule's `delta`
    (every comparison is made on the values as the cards round them, so the words never
    contradict the screen). A draft outside q's support gets the truncation warning, and
    nothing else: one alert, not two."""
    warning = truncation_warning(position)
    if warning:
        return Note(warning, warning=True)
    by_name = {r.name: r for r in rows}
    base, main = by_name[LOSSLESS_RULE], by_name[DEFAULT_RULE]
    n = position.drafted
    token = repr(display_token(position.labels[n]))
    pn, qn = float(position.p[n]), float(position.q[n])
    at = f"At δ = {delta:g}"
    if position.story == "worked":
        return Note(
            f"Lossless acceptance of {token} is q_n / p_n = {qn:.2f} / {pn:.2f} = "
            f"{base.accept_drafted:.2%}. {at}, {main.name} accepts it with "
            f"{main.accept_drafted:.1%}, and KL(h ‖ q) = {_kl_text(main.kl_h_q)} nats."
        )
    if position.story == "bet":
        return Note(
            f"The draft bets {pn:.0%} on {token}, which the verifier gives {qn:.0%}. {at}, "
            f"{main.name} accepts it with {main.accept_drafted:.1%} (lossless: "
            f"{base.accept_drafted:.1%}), and the emitted text drifts by KL(π ‖ q) = "
            f"{_kl_text(main.kl_pi_q)} nats."
        )
    if position.story == "drift":
        kl_pi = float(_kl_text(main.kl_pi_q))
        if delta == 0:
            text = f"{at}, {main.name} is lossless: π = q, and KL(π ‖ q) = {_kl_text(0.0)} nats."
            return Note(text)
        if kl_pi > delta:
            return Note(
                f"KL(π ‖ q) = {_kl_text(main.kl_pi_q)} nats is more than δ = {delta:g}: δ "
                "bounds h at the drafted token, but a rejection draws from a residual that "
                "mixes over every possible draft, so the emitted π drifts from q by more "
                "than δ."
            )
        return Note(
            f"KL(π ‖ q) = {_kl_text(main.kl_pi_q)} nats is within δ = {delta:g} here. δ "
            "bounds h at the drafted token only; π mixes the residual over every possible "
            "draft, so at a smaller δ it can drift from q by more than δ."
        )
    if position.story == "nucleus":
        cut = [
            display_token(t)
            for t, x in zip(position.labels, position.q.tolist(), strict=True)
            if x == 0
        ]
        return Note(
            f"{token} is inside the verifier's nucleus (q_n = {qn:.2f}). Top-p cut "
            f"{', '.join(cut)} from q: drafted, they would be rejected whatever δ is."
        )
    return Note(position.note) if position.note else None


def rule_words(position: Position, row: RuleRow) -> list[str]:
    """What the focused rule does, in words (its own sentence and where docs/rules.md says
    more), and why its residual sits on the drafted token, when it does at this position."""
    cls = RULES[row.name]
    lines = [f"**{row.name}**: {cls.card.in_words} More in `{rule_anchor(row.name)}`."]
    if cls.card.residual_in_words and float(row.residual[position.drafted]) > 0:
        lines.append(cls.card.residual_in_words)
    return lines


@dataclass(frozen=True)
class PlaygroundFigures:
    """What the Playground's four tabs plot, cut to the tokens a figure shows."""

    labels: list[str]
    drafted: int  # index of the drafted token among `labels`
    hidden: int  # tokens left out of the figures
    focus: dict[str, torch.Tensor]  # p, q, and the focused rule's h, residual, pi
    accept: dict[str, torch.Tensor]  # a(n) for every shown n, per rule label
    pis: dict[str, torch.Tensor]  # q, then pi per rule label


def playground_figures(
    position: Position, rows: Sequence[RuleRow], focus: RuleRow
) -> PlaygroundFigures:
    shown = display_indices(position)
    series = {"p": position.p, "q": position.q, "h": focus.h}
    series |= {"residual": focus.residual, "pi": focus.pi}
    return PlaygroundFigures(
        labels=[position.labels[i] for i in shown],
        drafted=shown.index(position.drafted),
        hidden=len(position.labels) - len(shown),
        focus={k: v[shown] for k, v in series.items()},
        accept={r.label: r.accept_all[shown] for r in rows},
        pis={"q": position.q[shown]} | {r.label: r.pi[shown] for r in rows},
    )


# ---------------------------------------------------------------------------------------------
# The closed form against the exact root


@dataclass(frozen=True)
class TaylorGap:
    delta: float  # the chosen delta
    deltas: list[float]
    kl_taylor: list[float]  # KL(h ‖ q) with the closed form
    kl_exact: list[float]  # KL(h ‖ q) with the exact root
    h_taylor: float  # h_n at the chosen delta
    h_exact: float
    kl_taylor_now: float
    kl_exact_now: float

    @property
    def names(self) -> tuple[str, str]:
        """The two curves' legend entries."""
        return (f"{Cactus.name} (Taylor closed form)", f"{CactusExact.name} (binary-KL root)")

    @property
    def overshoot(self) -> float | None:
        """How far the closed form's KL(h ‖ q) exceeds delta now (None when it does not)."""
        over = self.kl_taylor_now - self.delta
        return over if over >= 5e-5 else None  # the card writes 4 decimals: no "+0.0000"


def _lump(position: Position) -> tuple[torch.Tensor, torch.Tensor]:
    """The two-token lump (n, everything else) of p and q, float64."""
    n = position.drafted
    qn, pn = float(position.q[n]), float(position.p[n])
    q2 = torch.tensor([qn, max(0.0, 1.0 - qn)], dtype=torch.float64)
    p2 = torch.tensor([pn, max(0.0, 1.0 - pn)], dtype=torch.float64)
    return p2 / p2.sum(), q2 / q2.sum()


def _h_and_kl(name: str, delta: float, p2: torch.Tensor, q2: torch.Tensor) -> tuple[float, float]:
    param = RULES[name].swept()
    h = make_rule(name, **{param.name: delta}).adjusted_target(q2, p2, torch.tensor(0))
    return float(h[0]), float(kl(h, q2))


@lru_cache(maxsize=64)
def _gap_curve(pn: float, qn: float, grid: int, high: float) -> tuple[list, list, list]:
    p2 = torch.tensor([pn, 1.0 - pn], dtype=torch.float64)
    q2 = torch.tensor([qn, 1.0 - qn], dtype=torch.float64)
    deltas = [high * i / (grid - 1) for i in range(grid)]
    kt = [_h_and_kl(Cactus.name, d, p2, q2)[1] for d in deltas]
    ke = [_h_and_kl(CactusExact.name, d, p2, q2)[1] for d in deltas]
    return deltas, kt, ke


def taylor_gap(
    position: Position, delta: float, grid: int = 31, high: float | None = None
) -> TaylorGap:
    """KL(h ‖ q) of the closed form and the exact root over a delta grid (up to the widgets'
    top, by default), and both at the chosen delta.

    For the Cactus family h is q rescaled off n, so h_n and KL(h ‖ q) depend only on q_n (the
    KL is the binary KL(h_n ‖ q_n)). The rules therefore run on the two-token lump (n, rest),
    which gives the same numbers as the full vocabulary at any V. The curve does not depend on
    the chosen delta and is cached per position.
    """
    high = Cactus.swept().ui[1] if high is None else high
    p2, q2 = _lump(position)
    deltas, kt, ke = _gap_curve(float(p2[0]), float(q2[0]), grid, high)
    ht, klt = _h_and_kl(Cactus.name, delta, p2, q2)
    he, kle = _h_and_kl(CactusExact.name, delta, p2, q2)
    return TaylorGap(delta, list(deltas), list(kt), list(ke), ht, he, klt, kle)
