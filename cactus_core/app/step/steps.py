"""A step of Step through: its kind, narration, the numbers it states and its picture's data
(`Bars`, a tree round's `TreeFrame`). `step_view` takes a chain round apart into these and
`tree_steps` a tree round."""

from __future__ import annotations

from dataclasses import dataclass, field

from cactus_core.app.shared.tree_figure import TreeFrame

STEP_KINDS = ("draft", "verify", "decide", "residual", "bonus", "sampled", "summary")
STEP_TITLES = {
    "draft": "The draft proposes",
    "verify": "The verifier scores every position in one pass",
    "decide": "The rule decides",
    "residual": "Rejected: a token from the residual",
    "bonus": "All passed: the bonus token",
    "sampled": "The verifier alone",
    "summary": "The round in numbers",
}


@dataclass(frozen=True)
class Bars:
    """Grouped bars: one value per label in each series (keys as figures.distribution_bars)."""

    labels: list[str]
    series: dict[str, list[float]]
    highlight: int | None = None
    title: str = ""
    mark: str = "drafted n"  # what the highlighted token is


@dataclass(frozen=True)
class Step:
    kind: str
    round_index: int
    slot: int | None  # the drafted position it is about, if one
    narration: str
    numbers: dict[str, float] = field(default_factory=dict)
    bars: Bars | None = None
    coin: tuple[float, float] | None = None  # (a(n), u) of a decision
    sps_coin: tuple[float, float] | None = None  # (lossless a(n), the same u)
    frame: TreeFrame | None = None  # a branching round's tree, told as far as this step

    @property
    def title(self) -> str:
        where = f", token {self.slot + 1}" if self.slot is not None else ""
        return f"Round {self.round_index + 1}{where}: {STEP_TITLES[self.kind]}"
