"""The Decode page's runs and its views of a trace: live counters, round tables, positions
for the Playground and the token inspector. A run keeps everything measured about it (its
replay, its speed comparison), so nothing outlives the run it describes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cactus_core.app.decode.rescue import q_zero_caption, rejected_drafts
from cactus_core.app.shared.limits import check_prompt_chars, check_prompt_tokens
from cactus_core.app.shared.metrics import Headline, SpeedComparison, prob_text
from cactus_core.app.shared.positions import Position, display_indices, trace_row_position
from cactus_core.app.shared.rule_rows import compare_rules
from cactus_core.app.shared.settings import AppSettings
from cactus_core.app.shared.tables import MISSING, cell
from cactus_core.app.shared.transcript import FATE_LABELS, num, show_text
from cactus_core.app.shared.tree_figure import TreeFrame
from cactus_core.app.shared.tree_view import candidate_lines, tree_bars, tree_row_position
from cactus_core.engine.decoding.trace import decided_positions, round_verdict
from cactus_core.maths.rules import Rule, lossless_rule, rule_from_values
from cactus_core.maths.tree import TreeVerdict

if TYPE_CHECKING:  # transformers is slow to import; only a decode needs it
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder
    from cactus_core.engine.decoding.generation import DecodeStream, GenerationOutput
    from cactus_core.engine.decoding.replay import Replay
    from cactus_core.engine.decoding.trace import RoundTrace, Trace
    from cactus_core.engine.loading.pair import ModelPair


@dataclass(frozen=True)
class DecodeRequest:
    """What Generate decodes: the prompt, the sidebar's settings and the rule picked."""

    prompt: str
    settings: AppSettings
    rule: Rule
    max_new_tokens: int
    chat_template: bool

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise ValueError("Enter a prompt first.")
        check_prompt_chars(self.prompt)

    def check_length(self, pair: ModelPair) -> None:
        """ValueError naming the app's cap (limits.MAX_PROMPT_TOKENS) when the prompt's own
        tokens (without the chat template's few) are more, before any model call: a prefill
        of thousands of tokens would hold the server for minutes with nothing on screen."""
        ids = pair.tokenizer(self.prompt, add_special_tokens=False)["input_ids"]
        check_prompt_tokens(len(ids))

    @property
    def rule_name(self) -> str:
        return self.rule.name

    def decoder(
        self, pair: ModelPair, record_trace: bool = True, measure_kl: bool = True
    ) -> SpeculativeDecoder:
        from cactus_core.engine.decoding.decoder import SpeculativeDecoder

        return SpeculativeDecoder(
            pair,
            self.rule,
            record_trace=record_trace,
            measure_kl=measure_kl,
            **self.settings.decoder_kwargs(),
        )

    def generate_kwargs(self) -> dict[str, Any]:
        return {
            "max_new_tokens": self.max_new_tokens,
            "seed": self.settings.seed,
            "chat_template": self.chat_template,
        }

    def stream(self, pair: ModelPair) -> DecodeStream:
        """The rounds as they finish; the stream's `.output` holds the result once exhausted."""
        self.check_length(pair)
        return self.decoder(pair).rounds(self.prompt, **self.generate_kwargs())


@dataclass
class DecodeRun:
    """One Generate click: the request, the decoder's output (trace and stats), and what was
    measured about this run since (a replay, a speed comparison)."""

    run_id: int
    request: DecodeRequest
    output: GenerationOutput
    comparison: SpeedComparison | None = None
    replay: Replay | None = None
    # The race against verifier-only that measured `comparison` (an app.race.Race: typed
    # loosely because race.py builds on this module).
    race: Any = None

    @property
    def trace(self) -> Trace:
        return self.output.trace

    @property
    def prompt(self) -> str:
        return self.request.prompt

    @property
    def settings(self) -> AppSettings:
        return self.request.settings

    @property
    def rule_name(self) -> str:
        return self.request.rule_name

    def caption(self) -> str:
        stats, meta = self.output.stats, self.trace.meta
        return (
            f"Run {self.run_id}: {meta['rule_label']} · {drafting_text(meta)} · "
            f"T = {meta['temperature']:g} · top-k {meta['top_k']} · top-p {meta['top_p']:g} · "
            f"seed {meta['seed']} · {stats.new_tokens} tokens in {stats.rounds} rounds, "
            f"stopped by {stats.stop_reason} · {meta['verifier']} verifying {meta['draft']}"
        )

    def truncation_caption(self) -> str | None:
        """How many rejected drafts (every rejected candidate of a tree) had q_n = 0: the
        same drafts "Why drafts get rejected" lists."""
        return q_zero_caption(rejected_drafts(self.trace.rounds, self.trace.text))


def drafting_text(meta: dict[str, Any]) -> str:
    """How a run drafted: "k = 4", or its tree's shape."""
    tree = meta.get("tree")
    if not tree:
        return f"k = {meta['k']}"
    return (
        f"draft tree of {tree['nodes']} nodes, depth ≤ {tree['depth']} ({tree['root_branch']} "
        f"at the root, {tree['branch']} per node, {tree['width']} expanded per depth)"
    )


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
    return f"Replayed under {rule_from_values(replay.rule, replay.rule_params).label}."


@dataclass(frozen=True)
class LiveStats:
    tokens: int
    tokens_per_call: float
    acceptance_rate: float | None
    tokens_per_s: float
    emitted_kl: float
    verifier_calls: int = 0


def live_stats(rounds: list[RoundTrace], elapsed_s: float) -> LiveStats:
    """The counters while rounds stream in, with the same definitions as GenerationStats."""
    tokens = sum(len(r.emitted_ids) for r in rounds)
    calls = len(rounds)
    decided = sum(_decided(r) for r in rounds)
    accepted = sum(r.num_accepted for r in rounds)  # 0 for a verifier-only step
    kl_sum = 0.0
    for r in rounds:
        for pos in decided_positions(r):
            if pos.kl_pi_q is not None:
                kl_sum += pos.kl_pi_q
    return LiveStats(
        tokens=tokens,
        tokens_per_call=tokens / calls if calls else 0.0,
        acceptance_rate=accepted / decided if decided else None,
        tokens_per_s=tokens / elapsed_s if elapsed_s > 0 else 0.0,
        emitted_kl=kl_sum / tokens if tokens else 0.0,
        verifier_calls=calls,
    )


def _decided(rnd: RoundTrace) -> int:
    """Drafted tokens of a round that got a decision: every candidate the walk tried (a
    chain's up to its first rejection; none in a verifier-only step)."""
    return sum(f in ("accepted", "rejected") for f in round_verdict(rnd).fates)


def final_stats(output: GenerationOutput) -> LiveStats:
    """The finished run's counters, in the live counters' shape."""
    s = output.stats
    return LiveStats(
        tokens=s.new_tokens,
        tokens_per_call=s.tokens_per_call,
        acceptance_rate=s.acceptance_rate,
        tokens_per_s=s.tokens_per_s,
        emitted_kl=s.mean_emitted_kl,
        verifier_calls=s.verifier_calls,
    )


def round_label(rnd: RoundTrace, flipped: bool) -> str:
    """A round's expander label: how many drafts passed and how it ended."""
    accepted = f"{rnd.num_accepted}/{rnd.k} accepted" if rnd.k else "verifier only"
    ending = "bonus" if rnd.k and rnd.num_accepted == rnd.k else "recovered"
    if rnd.tree is not None:
        accepted = f"{rnd.num_accepted} accepted in a {len(rnd.tree['tokens'])}-node tree"
        ending = rnd.tree["last"]
    label = f"Round {rnd.index + 1} · {accepted} · +{len(rnd.emitted_ids)} ({ending})"
    return label + (" · flips under replay" if flipped else "")


def timeline(rounds: list[RoundTrace]) -> tuple[list[int], list[int], list[bool]]:
    """Accepted drafts, drafted tokens and whether a bonus was drawn, per round."""
    return (
        [r.num_accepted for r in rounds],
        [r.k for r in rounds],
        [r.k > 0 and r.num_accepted == r.k for r in rounds],
    )


def round_table(rnd: RoundTrace) -> list[dict[str, object]]:
    """One row per drafted slot of a round, for st.dataframe (h_n is in the inspector)."""
    rows = []
    for j in range(rnd.k):
        pos = rnd.positions[j] if j < len(rnd.positions) else None
        rows.append(
            {
                "drafted": show_text(rnd.draft_text[j]),
                "fate": rnd.draft_fates[j],
                "p_n": MISSING if pos is None or pos.p_n is None else prob_text(pos.p_n),
                "q_n": MISSING if pos is None or pos.q_n is None else prob_text(pos.q_n),
                "a(n)": cell(rnd.accept_probs[j]),  # "–" for a draft never judged
                "u": cell(rnd.accept_coins[j]),
            }
        )
    return rows


def trace_position(trace: Trace, round_index: int, slot: int) -> Position:
    """A drafted position of a trace as a Position over a reduced vocabulary
    (`positions.trace_row_position`)."""
    rnd = trace.rounds[round_index]
    if not 0 <= slot < rnd.k:
        raise ValueError(f"slot {slot} is not a drafted slot of round {round_index} (k = {rnd.k})")
    if rnd.tree is not None:
        return tree_row_position(trace, rnd, slot)
    pos = rnd.positions[slot]
    note = (
        f"Round {round_index + 1}, slot {slot + 1} of the last decode run "
        f"(drafted {show_text(rnd.draft_text[slot])!r}, {rnd.draft_fates[slot]})."
    )
    return trace_row_position(pos, trace.text, pos.draft_id, note)


@dataclass(frozen=True)
class DecodeChoice:
    title: str
    round_index: int
    slot: int

    def position(self, trace: Trace) -> Position:
        return trace_position(trace, self.round_index, self.slot)


def decode_positions(trace: Trace) -> list[DecodeChoice]:
    """Every judged drafted position of a trace (accepted or rejected), for a picker."""
    out = []
    for rnd in trace.rounds:
        for j in range(rnd.k):
            fate = rnd.draft_fates[j]
            if fate == "dropped" or j >= len(rnd.positions):
                continue
            text = show_text(rnd.draft_text[j])
            out.append(
                DecodeChoice(
                    f"round {rnd.index + 1}, slot {j + 1}: {text!r} ({fate})", rnd.index, j
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
    mark: str = "drafted n"  # what the highlighted bar is
    tree: TreeFrame | None = None  # a tree round: the whole round's tree


def judging_rule(trace: Trace) -> Rule:
    """The rule the decoder judged with: exact match (the lossless rule) at T = 0, else the
    trace's rule."""
    if float(trace.meta["temperature"]) == 0.0:
        return lossless_rule()
    return trace.rule


def inspect_token(trace: Trace, round_index: int, slot: int, top: int = 12) -> Inspection:
    """The inspector for slot `slot` of round `round_index`.

    A drafted slot (accepted, rejected or dropped) shows p, q, h and the residual there, the
    coin against a(n) and both KLs. The recovered token lives at the rejected draft's slot,
    so it shows that slot with the recovered token marked. A bonus (or verifier-only) token
    shows q, the distribution it was drawn from.
    """
    rnd = trace.rounds[round_index]
    if rnd.tree is not None:
        return _inspect_tree(trace, rnd, slot, top)
    if rnd.k == 0 or slot >= rnd.k:
        return _inspect_emitted(trace, rnd, top)
    return _inspect_draft(trace, rnd, slot, top)


def _inspect_emitted(trace: Trace, rnd: RoundTrace, top: int) -> Inspection:
    pos = rnd.positions[-1] if rnd.positions else None
    fate = rnd.emitted_fates[-1] if rnd.emitted_fates else "bonus"
    text = rnd.emitted_text[-1] if rnd.emitted_text else trace.text(rnd.next_id)
    title = f"Round {rnd.index + 1}: {show_text(text)!r}, {FATE_LABELS[fate]}"
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
        mark="emitted",
    )


def _draft_notes(trace: Trace, rnd: RoundTrace, slot: int, position: Position) -> list[str]:
    fate, m = rnd.draft_fates[slot], rnd.num_accepted
    notes = []
    if fate == "rejected" and len(rnd.emitted_ids) > m:
        notes.append(
            f"Rejected, so the round ended with {show_text(rnd.emitted_text[m])!r} drawn from "
            f"the residual r_n (coin u' = {rnd.sample_coin:.3f})."
        )
    if fate == "dropped":
        notes.append("Drafted after a rejection in this round: never judged, never emitted.")
    if rnd.positions[slot].q_n == 0.0:
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
    return notes


def _inspect_draft(trace: Trace, rnd: RoundTrace, slot: int, top: int) -> Inspection:
    pos = rnd.positions[slot]
    position = trace_position(trace, rnd.index, slot)
    row = compare_rules(position, [judging_rule(trace)])[0]
    shown = [i for i in display_indices(position, top) if position.labels[i] != "(rest)"]
    title = f"Round {rnd.index + 1}, slot {slot + 1}: {show_text(rnd.draft_text[slot])!r}, "
    return Inspection(
        title=title + FATE_LABELS[rnd.draft_fates[slot]],
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
        notes=_draft_notes(trace, rnd, slot, position),
    )


def _inspect_tree(trace: Trace, rnd: RoundTrace, slot: int, top: int) -> Inspection:
    """A token of a tree round: where it sits in the tree, every candidate the walk tried at
    the row it was drawn at, and that row's bars (`tree_view`) when the trace kept them."""
    v = TreeVerdict.from_dict(rnd.tree)
    m = len(v.path)
    slot = min(slot, m)
    token = trace.text(v.emitted[slot])
    fate = "accepted" if slot < m else v.last
    title = f"Round {rnd.index + 1}, token {slot + 1}: {show_text(token)!r}, {FATE_LABELS[fate]}"
    row = v.path_rows[slot]
    if slot < m:
        notes = [f"Accepted at depth {slot + 1}; the candidates there, in the order tried:"]
    elif v.last == "recovered":
        notes = [
            f"Every candidate here was rejected; the last residual gave {show_text(token)!r} "
            f"(coin {num(v.emit_coin)}). The candidates, in the order tried:"
        ]
    else:
        notes = [
            f"The walk reached a leaf, so the verifier's q there gave the bonus "
            f"{show_text(token)!r} (coin {num(v.emit_coin)}); no rule applies to it."
        ]
    notes += candidate_lines(trace, v, row)
    prev = trace.rounds[rnd.index - 1].emitted_ids[-1] if rnd.index > 0 else None
    root = trace.text(prev) if prev is not None else "(prompt)"
    labels = [trace.text(t) for t in v.tokens]
    frame = TreeFrame(v, labels, root, token if slot == m else trace.text(v.emitted[-1]))
    bars = tree_bars(trace, rnd, slot, judging_rule(trace), top)
    if bars is None:
        notes.append("This trace kept no rows at the tree's nodes, so no bars.")
        return Inspection(title, [], {}, None, notes=notes, tree=frame)
    if bars.kl_pi_q is not None and bars.kl_h_q is not None:
        notes.append(
            f"At this node KL(h ‖ q) = {bars.kl_h_q:.4f} and KL(pi ‖ q) = {bars.kl_pi_q:.4f} "
            "nats (pi: the exact law of the token emitted here, whatever the candidates)."
        )
    if "h" in bars.series:
        notes.append(
            "Bars: p, q, and the rule's h and residual for the first candidate (the later "
            "ones are judged against residuals), from the trace's top rows of p and q."
        )
    return Inspection(
        title,
        bars.labels,
        bars.series,
        bars.highlight,
        kl_h_q=bars.kl_h_q,
        kl_pi_q=bars.kl_pi_q,
        notes=notes,
        mark="emitted",
        tree=frame,
    )
