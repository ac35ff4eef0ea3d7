"""What a replay costs in divergence: the emitted KL(pi ‖ q) of the run and of its replay under
another rule, per round and per token, on the same rounds.

KL(pi ‖ q) at a position depends on p, q and the rule, not on the coins, so the replay's
emitted KL is the replay rule's exact KL at each position it emits from. The run's own numbers
are the decoder's (exact, from the full rows); the replay's come from the rows the trace keeps
(exact when their tails are empty, which `ReplayKL.exact` reports).
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from cactus_core.app.shared.metrics import Headline
from cactus_core.engine.decoding.replay import Replay, position_rows
from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace, Trace
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import make_rule
from cactus_core.maths.tree_verdict import TreeVerdict

RUN_COLOUR, REPLAY_COLOUR = "#848482", "#008856"


@dataclass(frozen=True)
class ReplayKL:
    """Emitted KL in nats per emitted token: per replayed round and over all of them."""

    rounds: list[int]  # round numbers, 1-based (verifier-only steps have no replay)
    run: list[float]  # per round, the run as decoded
    replay: list[float]  # per round, under the replay's rule
    run_mean: float
    replay_mean: float
    exact: bool

    def cards(self) -> list[tuple[str, str, str | None]]:
        """Metric cards (label, value, change): the replay's mean beside the run's."""
        change = self.replay_mean - self.run_mean
        return [
            ("emitted KL, the run (nats/token)", f"{self.run_mean:.4f}", None),
            (
                "emitted KL, the replay (nats/token)",
                f"{self.replay_mean:.4f}",
                None if abs(change) < 5e-5 else f"{change:+.4f} vs the run",
            ),
        ]


def _emitted_from(rnd: RoundTrace, verdict: TreeVerdict) -> list[PositionTrace]:
    """The recorded positions a round emits from under a verdict: its rows on the walk with
    candidates, each emitting the chain's pi of its row (a bonus after them is drawn from q:
    KL 0)."""
    return [rnd.positions[r] for r in verdict.decided_rows if rnd.positions[r].draft_id is not None]


def tree_replay_note(trace: Trace) -> str | None:
    """What a replay of a run whose trees branch does and when it is exact; None otherwise."""
    if not any(r.branching for r in trace.rounds):
        return None
    return (
        "Tree rounds replay node by node: the same tree, the same q at every node and the same "
        "coins, walked under the other rule. The replay is exact when the trace's rows hold all "
        "the mass (top-k or a top-p nucleus within the trace's kept rows). Otherwise a node's "
        "first candidate is judged exactly for rules whose a(n) needs only p_n and q_n, while "
        "later candidates and the last token read residuals of the cut rows and are approximate."
    )


def replay_kl(trace: Trace, replay: Replay) -> ReplayKL:
    """The run's and the replay's emitted KL on the replayed rounds."""
    rule = make_rule(replay.rule, **replay.rule_params)
    vocab = int(trace.meta["vocab_size"])
    greedy = float(trace.meta.get("temperature", 1.0)) == 0.0
    by_index = {r.index: r for r in trace.rounds}
    rounds, run, rep = [], [], []
    run_sum = rep_sum = 0.0
    run_tokens = rep_tokens = 0
    exact = True
    for rr in replay.rounds:
        rnd = by_index[rr.index]
        before = sum(pos.kl_pi_q or 0.0 for pos in _emitted_from(rnd, rr.before))
        after = 0.0
        if not greedy:  # at T = 0 every rule is exact match: pi = q
            for pos in _emitted_from(rnd, rr.after):
                p, q, ok = position_rows(pos, vocab)
                exact &= ok
                after += float(kl(emitted_distribution(rule, p, q), q))
        rounds.append(rr.index + 1)
        run.append(before / rr.tokens_before)
        rep.append(after / rr.tokens_after)
        run_sum, run_tokens = run_sum + before, run_tokens + rr.tokens_before
        rep_sum, rep_tokens = rep_sum + after, rep_tokens + rr.tokens_after
    return ReplayKL(
        rounds=rounds,
        run=run,
        replay=rep,
        run_mean=run_sum / run_tokens if run_tokens else 0.0,
        replay_mean=rep_sum / rep_tokens if rep_tokens else 0.0,
        exact=exact,
    )


def replay_kl_figure(data: ReplayKL, run_label: str, replay_label: str) -> go.Figure:
    """Per round, the emitted KL per token of the run and of the replay, side by side."""
    fig = go.Figure()
    fig.add_bar(x=data.rounds, y=data.run, name=f"the run ({run_label})", marker_color=RUN_COLOUR)
    fig.add_bar(
        x=data.rounds, y=data.replay, name=f"replay ({replay_label})", marker_color=REPLAY_COLOUR
    )
    fig.update_layout(
        title="Emitted KL per token, by round",
        barmode="group",
        xaxis_title="round",
        yaxis_title="KL(π ‖ q), nats/token",
        height=280,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"},
    )
    return fig


def replay_headlines(replay: Replay) -> list[Headline]:
    """What a replay changed, as metric cards."""
    change = replay.tokens_per_call_after - replay.tokens_per_call_before
    return [
        Headline("flipped drafts", str(replay.flips)),
        Headline(
            "tokens per call",
            f"{replay.tokens_per_call_after:.2f}",
            # no green arrow for a change that rounds to nothing
            None if abs(change) < 0.005 else f"{change:+.2f} vs the run",
        ),
    ]


def replay_caption(replay: Replay) -> str:
    """Which rule the replay judged under, in full (a metric card cut its label short)."""
    return f"Replayed under {make_rule(replay.rule, **replay.rule_params).label}."
