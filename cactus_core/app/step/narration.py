"""The Step through page's sentences: one or two plain sentences per step, built only from the
numbers passed in, each written with `num` so that a test can find every number it states."""

from __future__ import annotations

from dataclasses import dataclass

from cactus_core.app.shared.transcript import num, tok


def _slots(slots: list[int]) -> str:
    return ", ".join(str(s + 1) for s in slots)


def draft_sentence(slot: int, k: int, token: str, p_n: float, top_token: str, top_p: float) -> str:
    head = f"Draft token {slot + 1} of {k}: the draft proposed {tok(token)} with p = {num(p_n)}."
    if top_token == token:
        return head + " It was the draft's own top choice here."
    return (
        f"{head} It was drawn, not picked: the draft's top choice was {tok(top_token)} "
        f"(p = {num(top_p)})."
    )


def verify_sentence(
    p_n: list[float], q_n: list[float], call: int, bonus_token: str, bonus_q: float
) -> str:
    k = len(p_n)
    pairs = "; ".join(f"{num(p)} → {num(q)}" for p, q in zip(p_n, q_n, strict=True))
    head = (
        f"The verifier scored all {k + 1} positions in one forward pass (verifier call {call}): "
        f"the {k} drafts, p_n → q_n in order: {pairs}; and the bonus position after them, "
        f"where its top choice is {tok(bonus_token)} (q = {num(bonus_q)})."
    )
    below = [j for j in range(k) if q_n[j] < p_n[j]]
    zeros = [j for j in range(k) if q_n[j] == 0]
    if not below:
        return head + " It gives every draft at least the draft's own p, q_n ≥ p_n."
    tail = f" It gives less than the draft did (q_n < p_n) at position(s) {_slots(below)}"
    if zeros:
        tail += f", and nothing at all (q_n = 0, outside its top-k / top-p) at {_slots(zeros)}"
    return head + tail + "."


def decide_sentence(
    token: str,
    p_n: float,
    q_n: float,
    a_sps: float,
    rule: str | None,
    h_n: float,
    a: float,
    u: float,
    accepted: bool,
    sps_accepted: bool,
) -> str:
    """The decision on one draft, with what lossless sampling decides on the same coin; `rule`
    None when the deciding rule is lossless sampling itself."""
    out = (
        f"The draft proposed {tok(token)} with p = {num(p_n)}; the verifier gives it "
        f"q = {num(q_n)}. Lossless speculative sampling would accept it with probability "
        f"{num(a_sps)}."
    )
    if rule is not None:
        if q_n == 0:
            out += f" {rule} cannot help: no rule emits a token the verifier gives q_n = 0."
        else:
            sure = ", so it accepts for sure" if a >= 1 else ""
            out += (
                f" {rule} verifies against h_n = {num(h_n)} and accepts with probability "
                f"a(n) = {num(a)}{sure}."
            )
    verdict = "accepted" if accepted else "rejected"
    if rule is None:
        same = ""
    elif accepted == sps_accepted:
        same = ", as lossless would have"
    else:
        same = f", where lossless would have {'accepted' if sps_accepted else 'rejected'}"
    return out + f" The coin came up u = {num(u)}: {verdict}{same}."


def residual_sentence(
    rejected: str, recovered: str, r_prob: float | None, coin: float, dropped: int
) -> str:
    """After the first rejection; `r_prob` None for a rule that decides on the whole draft,
    whose residual is its own (not a per-token (h − p)+)."""
    if r_prob is None:
        out = (
            f"{tok(rejected)} was not kept, so the verifier draws a replacement from the rule's "
            f"residual for the whole draft: the coin {num(coin)} picks {tok(recovered)}."
        )
    else:
        out = (
            f"{tok(rejected)} was rejected, so the verifier draws a replacement from the "
            f"residual (h − p)+, normalised: the coin {num(coin)} picks {tok(recovered)}, which "
            f"the residual gives r = {num(r_prob)}."
        )
    if dropped:
        out += f" The {dropped} draft(s) after the rejection are dropped unjudged."
    return out


def bonus_sentence(k: int, token: str, q: float, coin: float) -> str:
    return (
        f"All {k} drafts passed, so the verifier's pass pays for one more token: the bonus, "
        f"drawn from q at position {k + 1}. The coin {num(coin)} picks {tok(token)} "
        f"(q = {num(q)})."
    )


def summary_sentence(
    emitted: int,
    calls: int,
    tokens_per_call: float,
    emitted_kl: float | None,
    accepted: int,
    k: int,
) -> str:
    """emitted_kl None: a rule whose pi no round gives (it overrides sps)."""
    kl = (
        f"an emitted KL of {num(emitted_kl)} nats per token"
        if emitted_kl is not None
        else "an emitted KL that a Frontier sweep estimates (this rule's pi depends on the "
        "whole round)"
    )
    return (
        f"This round kept {accepted} of {k} drafts and emitted {emitted} token(s). After "
        f"{calls} verifier call(s): {num(tokens_per_call)} tokens per call, and {kl}."
    )


def round_level_sentence(rule: str, keeps: str) -> str:
    """keeps: which drafts the rule's round keeps (`Rule.card.round_in_words`)."""
    return (
        f"{rule} decides on the whole draft at once: every draft gets a coin, and {keeps}. The "
        "per-token view of h does not apply; each step shows the rule's chance at that token "
        "and its coin."
    )


def round_level_decide_sentence(
    token: str,
    p_n: float,
    q_n: float,
    a_sps: float,
    rule: str,
    a: float,
    u: float,
    kept: bool,
    sps_accepted: bool,
    keeps: str,
) -> str:
    """One token of a rule that decides on the whole draft (`Rule.caps.round_level`); keeps: which
    drafts its round keeps (`Rule.card.round_in_words`)."""
    passes = "passes" if u < a else "fails"
    fate = "kept" if kept else "not kept"
    sps = "accepted" if sps_accepted else "rejected"
    return (
        f"The draft proposed {tok(token)} with p = {num(p_n)}; the verifier gives it "
        f"q = {num(q_n)}. {rule} gives this token the chance {num(a)} and its coin came up "
        f"u = {num(u)}: the coin {passes}, and the token is {fate} ({keeps}). Token by token, "
        f"lossless sampling would accept it with probability {num(a_sps)}: on this coin, {sps}."
    )


# -- draft trees -------------------------------------------------------------------------------
def tree_draft_sentence(nodes: int, depth: int, root: list[tuple[str, float]]) -> str:
    """The tree as drafted: its size, and the root's candidates (token, p) in drawn order."""
    cands = ", ".join(f"{tok(t)} (p = {num(p)})" for t, p in root)
    return (
        f"The draft grew a tree of {nodes} node(s), {depth} deep, instead of a chain. At the "
        f"root it drew {len(root)} candidate(s) without replacement, in this order: {cands}. "
        "Deeper, it expanded the nodes whose whole path it found most likely, each with "
        "children drawn the same way. The tree's shape never depends on a node's own draw, "
        "which is what keeps the verification exact."
    )


def tree_depth_sentence(depth: int, nodes: list[tuple[str, float, str]]) -> str:
    """A deeper level of the tree as drafted: each node (token, p at its parent, the token it
    hangs under), in the order drawn."""
    listed = "; ".join(f"{tok(t)} after {tok(up)} (p = {num(p)})" for t, p, up in nodes)
    return f"At depth {depth} the draft drew {len(nodes)} node(s): {listed}."


def tree_verify_sentence(nodes: int, call: int) -> str:
    return (
        f"The verifier scored all {nodes + 1} rows, the root and each of the {nodes} node(s), "
        f"in one forward pass (verifier call {call}): a tree attention mask lets each node see "
        "only its own ancestors, and positions count depth, so every row is the verifier's q "
        "after that node's own path."
    )


@dataclass(frozen=True)
class Candidate:
    """One child as the walk judged it: token, p at its parent, p among the candidates left,
    q, what it was judged against (h for the first, the residual after), a(n), coin, fate."""

    token: str
    p: float
    p_left: float
    q: float
    h: float
    a: float
    u: float
    fate: str


def tree_decide_sentence(after: str | None, cands: list[Candidate], rule: str | None) -> str:
    """A node's children tried in turn (recursive rejection sampling); `after` None at the
    root; `rule` None when the deciding rule is lossless sampling itself."""
    where = "At the root" if after is None else f"After {tok(after)}"
    judged = [c for c in cands if c.fate != "unreached"]
    out = [f"{where}, {len(cands)} candidate(s) wait, tried in the order they were drawn."]
    for i, c in enumerate(judged):
        head = f"{tok(c.token)}: p = {num(c.p)}, q = {num(c.q)}"
        if i == 0:
            target = "q itself" if rule is None else f"{rule}'s h_n = {num(c.h)}"
            body = f"{head}; judged against {target}, a(n) = {num(c.a)}"
        else:
            body = (
                f"{head}; p among the candidates left = {num(c.p_left)}, judged against the "
                f"residual r = {num(c.h)}, a(n) = {num(c.a)}"
            )
        out.append(f"{body}; the coin came up u = {num(c.u)}: {c.fate}.")
    if judged and judged[-1].fate == "rejected":
        out.append("Every candidate was rejected, so the token comes from the last residual.")
    left = len(cands) - len(judged)
    if left:
        out.append(f"The {left} candidate(s) after the accepted one are never tried.")
    return " ".join(out)


def optimum_sentence(candidates: int, rrs: float, optimum: float) -> str:
    """A tree row's lossless acceptance against the best possible (`replay.row_optimum`)."""
    return (
        f"Losslessly, with {candidates} candidate(s) drawn here, recursive rejection sampling "
        f"accepts one with chance {num(rrs)} on average over the draws, and no lossless "
        f"verifier can beat {num(optimum)} (the optimal-transport bound)."
    )


def traversal_sentence(
    token: str, depth: int, after: str | None, w: float, u: float, accepted: bool, had_kids: bool
) -> str:
    """One event of traversal verification (`block` on a tree): a node judged once nothing is
    left under it; `after` None for a child of the root."""
    where = "a child of the root" if after is None else f"after {tok(after)}"
    out = [
        f"Traversal verification judges the tree from its leaves. {tok(token)} (depth {depth}, "
        f"{where}) has nothing left under it, so it is judged now: its chance w = {num(w)} is "
        "how much of the verifier's mass along the path to it the draft has not over-drawn"
        + (", lowered as the candidates under it were rejected." if had_kids else ".")
    ]
    if accepted:
        out.append(
            f"The coin came up u = {num(u)}: accepted, and with it the whole path from the "
            f"root to {tok(token)}, {depth} token(s)."
        )
    else:
        out.append(
            f"The coin came up u = {num(u)}: rejected. It is removed; its parent now aims at "
            "its residual, with a new weight, and the next candidate is judged."
        )
    return " ".join(out)


def tree_residual_sentence(token: str, coin: float, tried: int, r_prob: float | None) -> str:
    out = (
        f"All {tried} candidate(s) here were rejected. The residual after the last rejection, "
        f"normalised, gives the token instead: the coin {num(coin)} picks {tok(token)}"
    )
    return out + ("." if r_prob is None else f", which the residual gives r = {num(r_prob)}.")


def tree_bonus_sentence(depth: int, token: str, q: float, coin: float) -> str:
    return (
        f"The walk reached a node without children at depth {depth}, so the verifier's pass "
        f"pays for one more token: the bonus, drawn from q there. The coin {num(coin)} picks "
        f"{tok(token)} (q = {num(q)})."
    )


def tree_summary_sentence(
    emitted: int,
    accepted: int,
    nodes: int,
    judged: int,
    calls: int,
    tokens_per_call: float,
    emitted_kl: float,
) -> str:
    return (
        f"This round walked {accepted} node(s) deep in a tree of {nodes}, judged {judged} "
        f"candidate(s) and emitted {emitted} token(s). After {calls} verifier call(s): "
        f"{num(tokens_per_call)} tokens per call, and an emitted KL of {num(emitted_kl)} nats "
        "per token. At every node the emitted token follows the rule's own pi for that node's "
        "p and q, as a chain's would."
    )
