"""Verifying a draft tree: several candidates per node, and still exactly the verifier's law.

A draft tree (`DraftTree`) holds N drafted nodes in topological order. Node i has a token and a
parent (−1: the root, the last committed token; otherwise an earlier node). Row 0 of
`draft_probs` is p at the root and row i + 1 is p after node i; q (`target_probs`) has the same
N + 1 rows, the layout of the verifier's one tree-masked pass. A node's children are its
candidates, tried in their index order, which is the order they were drawn in.

The walk (`verify_tree`): start at the root; at the current node try its children one after
another by recursive rejection sampling (RRS) with drafts sampled without replacement (Chen et
al., Recursive Speculative Decoding, arXiv 2402.14160; the multi-candidate scheme of SpecInfer,
arXiv 2305.09781, with the draft renormalised after each candidate as in SpecTr, arXiv
2310.15141). With p_1 = p at the node and r_1 = q there, candidate c_i is

    accepted with chance  a_i = min(1, r_i(c_i) / p_i(c_i)),
    on rejection          r_{i+1} = normalise(max(0, r_i − p_i)),
                          p_{i+1} = p_i with c_i removed, renormalised.

An accepted candidate is emitted and the walk moves to it. If every child is rejected, the
token emitted is drawn from the last residual r_{m+1} (recovered) and the round ends; if the walk
reaches a node without children, it ends with a draw from q there (bonus).

Why it is exact. Fix the history before candidate i (the earlier candidates, hence r_i and
p_i). Given it, c_i is a draw from p_i (that is what drawing without replacement means), so
the token emitted from step i on has the law r_i: the acceptance gives min(p_i, r_i)(x), a
rejection happens with chance sum_x max(0, r_i − p_i)(x) = Z and is followed (by induction over
i, the last step being a plain draw from r_{m+1}) by a token with law r_{i+1}, whatever c_i was,
so the total is min(p_i, r_i) + Z·r_{i+1} = r_i. At i = 1 that is q. The walk then continues at
the emitted token with the subtree grown under it, so each emitted token follows q given the
tokens before it: the whole output follows the verifier. This needs one thing from the drafter:
given everything drawn before it, a node's candidates are a draw without replacement from p at
that node, so **whether a node is in the tree must not depend on its own sampled value** (nor
on a later sibling's). Expanding a node because of its ancestors' or earlier siblings' values
is fine; EAGLE-2's final re-ranking, which keeps a node for its own probability, is not.

A candidate that p gives no mass to (possible only at T = 0, where the draft's extra children
are its top tokens after a one-hot p has run out) was put there deterministically; it is judged
as a draw from the point mass on itself, a_i = r_i(c_i), r_{i+1} = r_i without c_i, renormalised,
which keeps the induction above. At T = 0 (one-hot p and q) every step is then exact match: a
candidate is accepted iff it is the verifier's argmax, and a rejection emits that argmax.

A per-token relaxed rule (make_rule) judges the first candidate exactly as it judges a chain's
draft: accepted with the rule's a(c_1) (for the ratio rules min(1, h(c_1)/p(c_1)) with h the
rule's `adjusted_target`), and on rejection r_2 is the rule's residual r_{c_1}. Later candidates
are judged by plain RRS against that residual. By the argument above, given that c_1 = n was
rejected the emitted token has the law r_n, so at every node

    pi(x) = p(x)·a(x) + sum_n p(n)·(1 − a(n))·r_n(x),

the chain's per-position pi (`emitted_distribution(rule, p, q)`), whatever the number of
children. Exact KL, the frontier and replay therefore carry over from chains, node by node. The
later candidates raise the acceptance without moving pi. Lossless block verification (`block`)
judges a tree by its tree form, traversal verification (`maths.traversal`): leaves first, a
whole path at once, exact too, with the same coin layout. Other round-level rules (`fly`)
decide on a whole chain at once and have no tree form: they are refused.

Coins (`uniforms`, one layout per tree, so a verdict replays exactly under another rule or
delta): [N + D + 1], D = the tree's depth. uniforms[i] (i < N) is node i's accept coin, passed
iff uniforms[i] < a(node i); uniforms[N + d] is the inverse-CDF coin of the recovered or bonus
token emitted after d accepted nodes. The children themselves are drawn by the drafter
(`sample_without_replacement`, one coin per child).

Shapes: N nodes, V vocabulary, B trees of one shape in `verify_tree_batch` (the walk runs over
the batch at once: a Python loop over depths and over a node's children only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import inverse_cdf_
from cactus_core.maths.traversal import traversal_expected_accepted, traverse_batch
from cactus_core.maths.tree_verdict import (
    FATES,
    LAST_KINDS,
    TreeBatchResult,
    TreeVerdict,
    check_parents,
    children_of,
    coin_count,
    node_depths,
)
from cactus_core.maths.validation import (
    check_float,
    check_int,
    check_shape,
    id_checks,
    prob_checks,
    raise_if_any,
    uniform_checks,
    work_dtype,
)

_UNREACHED, _ACCEPTED, _REJECTED = 0, 1, 2
_FATE_CODES = {_ACCEPTED: "accepted", _REJECTED: "rejected", _UNREACHED: "unreached"}


def _kids_table(parents: list[int], device: torch.device) -> torch.Tensor:
    """[N + 1, M] children of each row, padded with −1 (M = the widest node, at least 1)."""
    kids = children_of(parents)
    width = max(1, max(len(k) for k in kids))
    table = torch.full((len(kids), width), -1, dtype=torch.long)
    for r, k in enumerate(kids):
        table[r, : len(k)] = torch.tensor(k, dtype=torch.long)
    return table.to(device)


@dataclass(eq=False)
class DraftTree:
    """A drafted tree: tokens [N] int64, parents [N] int64 (−1 = child of the root, else an
    earlier node), draft_probs [N + 1, V] (p at the root, then after each node). Siblings are
    distinct tokens, in the order they were drawn. Checked on construction (shape, ids,
    parents); `verify_tree` also checks that the rows are probabilities."""

    tokens: torch.Tensor  # [N]
    parents: torch.Tensor  # [N]
    draft_probs: torch.Tensor  # [N + 1, V]

    def __post_init__(self) -> None:
        check_int("tree tokens", self.tokens)
        check_int("tree parents", self.parents)
        check_float("tree draft_probs", self.draft_probs)
        if self.tokens.dim() != 1 or self.tokens.numel() < 1:
            raise ValueError(
                f"tree tokens must be [N] with N ≥ 1, got shape {list(self.tokens.shape)}"
            )
        n = self.tokens.shape[0]
        check_shape("tree parents", self.parents, (n,))
        if self.draft_probs.dim() != 2 or self.draft_probs.shape[0] != n + 1:
            raise ValueError(
                f"tree draft_probs must be [N + 1, V] = [{n + 1}, V], "
                f"got shape {list(self.draft_probs.shape)}"
            )
        parents = self.parents.tolist()
        check_parents(parents)
        raise_if_any(id_checks("tree tokens", self.tokens, self.draft_probs.shape[-1]))
        _sibling_check(self.tokens[None], parents)

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def depth(self) -> int:
        return max(node_depths(self.parents.tolist()))


def _sibling_check(tokens: torch.Tensor, parents: list[int]) -> None:
    """tokens [B, N]: siblings must be distinct (they are drawn without replacement)."""
    pairs = [
        (a, b) for kids in children_of(parents) for i, a in enumerate(kids) for b in kids[i + 1 :]
    ]
    if not pairs:
        return
    left = tokens[:, [a for a, _ in pairs]]
    right = tokens[:, [b for _, b in pairs]]
    if bool((left == right).any()):
        raise ValueError(
            "tree siblings must be distinct tokens (children are drawn without replacement)"
        )


# -- drawing the children ----------------------------------------------------------------------
def sample_without_replacement(
    p: torch.Tensor,
    coins: torch.Tensor | None = None,
    count: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw candidates without replacement: p [..., V] -> ids [..., m], in the order drawn.

    Draw j is an inverse-CDF draw with coins[..., j] from p with the earlier draws removed
    (renormalised), so the same coins give the same ids. When p has fewer tokens than m with
    mass, the remaining slots are −1. coins [..., m] in [0, 1), or `count` fresh coins from
    `generator`.
    """
    check_float("p", p)
    if coins is None:
        if count is None or count < 1:
            raise ValueError("sample_without_replacement needs coins or a count ≥ 1")
        coins = torch.rand((*p.shape[:-1], count), generator=generator, device=p.device)
    check_float("coins", coins)
    check_shape("coins", coins, (*p.shape[:-1], coins.shape[-1]))
    left = p.to(work_dtype(p)).clamp_min(0).clone()  # [..., V]
    out = torch.full(coins.shape, -1, dtype=torch.long, device=p.device)  # [..., m]
    for j in range(coins.shape[-1]):
        has = left.sum(-1) > 0  # [...]
        ids = inverse_cdf_(left.clone(), coins[..., j])  # [...]
        out[..., j] = torch.where(has, ids, -1)
        # a row without mass drew nothing: its scatter of zero changes nothing
        left.scatter_(-1, ids.unsqueeze(-1), 0.0)
    return out


# -- the walk ----------------------------------------------------------------------------------
def _check_rule(rule: Rule) -> None:
    if not isinstance(rule, Rule):
        raise ValueError(f"rule must come from make_rule(...), got {type(rule).__name__}")
    if rule.caps.round_level and not rule.caps.judges_trees_by_traversal:
        raise ValueError(
            f"rule {rule.name!r} decides on a whole chain at once and cannot judge a tree; "
            "use a per-token rule (any rule but the round-level ones)"
        )


def verify_tree_batch(
    rule: Rule,
    tokens: torch.Tensor,
    parents: list[int] | torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> TreeBatchResult:
    """Walk B trees of one shape at once (module docstring): tokens [B, N], parents [N],
    draft_probs and target_probs [B, N + 1, V], uniforms [B, N + D + 1] (drawn from
    `generator` when None)."""
    _check_rule(rule)
    parents = parents.tolist() if isinstance(parents, torch.Tensor) else list(parents)
    check_parents(parents)
    check_int("tokens", tokens)
    check_float("draft_probs", draft_probs)
    check_float("target_probs", target_probs)
    if tokens.dim() != 2 or tokens.shape[1] != len(parents) or not parents:
        raise ValueError(
            f"tokens must be [B, N] with N = len(parents) ≥ 1, got shape {list(tokens.shape)}"
        )
    b, n = tokens.shape
    v = draft_probs.shape[-1]
    check_shape("draft_probs", draft_probs, (b, n + 1, v))
    check_shape("target_probs", target_probs, (b, n + 1, v))
    width = coin_count(parents)
    device = draft_probs.device
    if uniforms is None:
        uniforms = torch.rand((b, width), generator=generator, device=device, dtype=torch.float64)
    check_float("uniforms", uniforms)
    check_shape("uniforms", uniforms, (b, width))
    if validate:
        checks = prob_checks("draft_probs", draft_probs) + prob_checks("target_probs", target_probs)
        checks += id_checks("tokens", tokens, v) + uniform_checks("uniforms", uniforms)
        raise_if_any(checks)
        _sibling_check(tokens, parents)
    dtype = torch.promote_types(work_dtype(draft_probs), work_dtype(target_probs))
    if rule.caps.judges_trees_by_traversal:
        return traverse_batch(
            tokens.long(), parents, draft_probs.to(dtype), target_probs.to(dtype), uniforms
        )
    return _walk(
        rule, tokens.long(), parents, draft_probs.to(dtype), target_probs.to(dtype), uniforms
    )


def _walk(
    rule: Rule,
    tokens: torch.Tensor,
    parents: list[int],
    p: torch.Tensor,
    q: torch.Tensor,
    uniforms: torch.Tensor,
) -> TreeBatchResult:
    b, n = tokens.shape
    depth = max(node_depths(parents))
    device, dtype = p.device, p.dtype
    kids = _kids_table(parents, device)  # [N + 1, M]
    u_accept = uniforms[:, :n].to(dtype)  # [B, N]
    u_emit = uniforms[:, n:]  # [B, D + 1]
    nan = torch.full((b, n), math.nan, dtype=dtype, device=device)
    a_all, h_all, pl_all = nan.clone(), nan.clone(), nan.clone()
    fates = torch.zeros((b, n), dtype=torch.long, device=device)
    path = torch.full((b, depth), -1, dtype=torch.long, device=device)
    last = torch.zeros(b, dtype=torch.long, device=device)
    recovered = torch.zeros(b, dtype=torch.bool, device=device)
    cur = torch.zeros(b, dtype=torch.long, device=device)  # [B] current row (0 = root)
    alive = torch.ones(b, dtype=torch.bool, device=device)  # [B] still walking
    for d in range(depth + 1):
        row_kids = kids[cur]  # [B, M]
        p_row, q_row = _rows(p, cur), _rows(q, cur)  # [B, V]
        chosen, r = _judge_children(
            rule, tokens, row_kids, alive, p_row, q_row, u_accept, (a_all, h_all, pl_all, fates)
        )
        stop = alive & (chosen < 0)
        leaf = row_kids[:, 0] < 0  # [B]
        weights = torch.where(leaf.unsqueeze(-1), q_row, r)  # [B, V]
        drawn = inverse_cdf_(weights.clone(), u_emit[:, d])  # [B]
        last = torch.where(stop, drawn, last)
        recovered = torch.where(stop, ~leaf, recovered)
        if d < depth:
            path[:, d] = torch.where(alive & (chosen >= 0), chosen, -1)
        alive = alive & (chosen >= 0)
        cur = (chosen + 1).clamp_min(0)
    num_accepted = (path >= 0).sum(-1)  # [B]
    path_tokens = tokens.gather(1, path.clamp_min(0))  # [B, D]
    emitted = torch.cat([torch.where(path >= 0, path_tokens, -1), path.new_full((b, 1), -1)], 1)
    emitted = emitted.scatter(1, num_accepted.unsqueeze(-1), last.unsqueeze(-1))
    return TreeBatchResult(
        path, num_accepted, emitted, last, recovered, fates, a_all, h_all, pl_all, uniforms
    )


def _judge_children(
    rule: Rule,
    tokens: torch.Tensor,
    row_kids: torch.Tensor,
    alive: torch.Tensor,
    p_row: torch.Tensor,
    q_row: torch.Tensor,
    u_accept: torch.Tensor,
    record: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """RRS over the children row_kids [B, M] of each tree's current node (p_row, q_row
    [B, V]): (the accepted child [B] or −1, the residual [B, V] after the last rejection).
    Writes a(n), h, p_left and the fates of the judged children into `record` in place."""
    a_all, h_all, pl_all, fates = record
    b = p_row.shape[0]
    chosen = torch.full((b,), -1, dtype=torch.long, device=p_row.device)
    trying = alive.clone()  # [B] no child accepted yet
    r = q_row
    left = p_row.clone()  # [B, V] p without the candidates tried, unnormalised
    for i in range(row_kids.shape[1]):
        node = row_kids[:, i]  # [B]
        judged = trying & (node >= 0)
        safe = node.clamp_min(0)
        c = _at(tokens, safe)  # [B]
        if i == 0:
            # the rule's own decision, exactly as on a chain's draft
            d = rule.drafted(q_row, p_row, c)
            a = rule.accept(d)
            h = _at(rule.target(d), c)
            w = rule.residual_weights(d)  # [B, V]
            r_next = w / w.sum(-1, keepdim=True)
            pl = d.pn
        else:
            mass = left.sum(-1)  # [B]
            pc = torch.where(mass > 0, _at(left, c) / mass.clamp_min(1e-300), 0.0)
            point = pc <= 0  # a deterministic candidate: judged as a draw from δ_c
            rc = _at(r, c)
            a = torch.where(point, rc, torch.clamp_max(rc / pc.clamp_min(1e-300), 1.0))
            h, pl = rc, torch.where(point, 1.0, pc)
            drawn_from = left / mass.clamp_min(1e-300).unsqueeze(-1)  # p_i [B, V]
            if bool(point.any()):
                hot = torch.nn.functional.one_hot(c, r.shape[-1]).to(r.dtype)
                drawn_from = torch.where(point.unsqueeze(-1), hot, drawn_from)
            r_next = _next_residual(r, drawn_from)
        passed = judged & (_at(u_accept, safe) < a)
        for dest, values in ((a_all, a), (h_all, h), (pl_all, pl)):
            _write(dest, safe, judged, values)
        fate = torch.where(passed, _ACCEPTED, _REJECTED)
        _write(fates, safe, judged, fate)
        chosen = torch.where(passed, node, chosen)
        rejected = (judged & ~passed).unsqueeze(-1)
        r = torch.where(rejected, r_next, r)
        left = torch.where(rejected, _drop(left, c), left)
        trying = trying & ~passed
    return chosen, r


def expected_accepted(
    rule: Rule, tokens: torch.Tensor, parents: list[int], p: torch.Tensor, q: torch.Tensor
) -> torch.Tensor:
    """[B]: each tree's expected number of accepted drafts over the coins, exactly (tokens
    [B, N], p and q [B, N + 1, V]): the walk's chance of accepting each child given the ones
    before it were rejected, summed up the tree; `block`'s traversal (`maths.traversal`)."""
    _check_rule(rule)
    if rule.caps.judges_trees_by_traversal:
        return traversal_expected_accepted(tokens.long(), parents, p, q)
    b, n = tokens.shape
    kids = children_of(parents)
    table = _kids_table(parents, p.device)  # [N + 1, M]
    nan = torch.full((b, n), math.nan, dtype=q.dtype, device=q.device)
    a, scratch, fates = nan.clone(), (nan.clone(), nan.clone()), torch.zeros_like(nan).long()
    never = torch.ones((b, n), dtype=q.dtype, device=q.device)  # coins no chance passes
    alive = torch.ones(b, dtype=torch.bool, device=q.device)
    for r, children in enumerate(kids):
        if children:
            row_kids = table[r].expand(b, -1)
            _judge_children(
                rule, tokens.long(), row_kids, alive, p[:, r], q[:, r], never, (a, *scratch, fates)
            )
    below = torch.zeros((b, n + 1), dtype=q.dtype, device=q.device)  # E[accepted] under a row
    for r in reversed(range(n + 1)):
        reach = torch.ones(b, dtype=q.dtype, device=q.device)
        for c in kids[r]:
            below[:, r] += reach * a[:, c] * (1 + below[:, c + 1])
            reach = reach * (1 - a[:, c])
    return below[:, 0]


def _next_residual(r: torch.Tensor, p_i: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, r − p_i)) [B, V]; a row with no mass there (r = p_i: a rejection only
    through rounding) keeps r."""
    w = (r - p_i).clamp_min(0.0)
    total = w.sum(-1, keepdim=True)
    return torch.where(total > 0, w / total.clamp_min(1e-300), r)


def _drop(left: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """p without the candidate c [B] (unnormalised): what later candidates were drawn from."""
    return left.scatter(-1, c.unsqueeze(-1), 0.0)


def _at(x: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """x [B, K] at one column per row col [B] -> [B]."""
    return x.gather(1, col.unsqueeze(-1)).squeeze(1)


def _rows(x: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    """x [B, R, V] at one row per tree row [B] -> [B, V]."""
    b, r, v = x.shape
    flat = x.reshape(b * r, v)
    return flat.index_select(0, torch.arange(b, device=x.device) * r + row)


def _write(
    dest: torch.Tensor, col: torch.Tensor, mask: torch.Tensor, values: torch.Tensor | float
) -> None:
    """dest [B, N] at column col [B] := values [B] where mask [B], in place."""
    old = _at(dest, col)
    dest.scatter_(1, col.unsqueeze(-1), torch.where(mask, values, old).to(dest.dtype).unsqueeze(-1))


# -- one tree ----------------------------------------------------------------------------------
def verify_tree(
    rule: Rule,
    tree: DraftTree,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> TreeVerdict:
    """Walk one tree under `rule` (module docstring): target_probs [N + 1, V] (q at the root,
    then after each node), uniforms [N + D + 1] (the coin layout; drawn from `generator` when
    None). Same coins, same verdict."""
    if not isinstance(tree, DraftTree):
        raise ValueError(f"tree must be a DraftTree, got {type(tree).__name__}")
    check_float("target_probs", target_probs)
    check_shape("target_probs", target_probs, tuple(tree.draft_probs.shape))
    parents = tree.parents.tolist()
    width = coin_count(parents)
    if uniforms is not None:
        check_float("uniforms", uniforms)
        check_shape("uniforms", uniforms, (width,))
        uniforms = uniforms[None]
    res = verify_tree_batch(
        rule,
        tree.tokens[None],
        parents,
        tree.draft_probs[None],
        target_probs[None],
        uniforms,
        generator,
        validate=validate,
    )
    rows = torch.tensor([pa + 1 for pa in parents], device=target_probs.device)
    at = (rows, tree.tokens.long())
    m = int(res.num_accepted[0])
    coins = res.uniforms[0].double().tolist()
    return TreeVerdict(
        tokens=tree.tokens.tolist(),
        parents=parents,
        path=res.path[0, :m].tolist(),
        emitted=res.emitted[0, : m + 1].tolist(),
        last="recovered" if bool(res.recovered[0]) else "bonus",
        accept_probs=res.accept_probs[0].tolist(),
        coins=coins[: len(parents)],
        fates=[_FATE_CODES[f] for f in res.fates[0].tolist()],
        p=tree.draft_probs[at].double().tolist(),
        q=target_probs[at].double().tolist(),
        h=res.h[0].tolist(),
        p_left=res.p_left[0].tolist(),
        emit_coins=coins[len(parents) :],
    )


def row_residual(rule: Rule, p: torch.Tensor, q: torch.Tensor, rejected: list[int]) -> torch.Tensor:
    """The residual a row's next token is drawn from once its candidates `rejected` (token
    ids, in the order tried) were all rejected: the rule's r_n after the first, then plain RRS
    (the module's walk) after each later one. p, q [V] -> [V], normalised."""
    if not rejected:
        raise ValueError("row_residual needs at least one rejected candidate")
    first = torch.tensor(rejected[0], device=p.device)
    r = rule.residual(q, p, first, validate=False)[None]  # [1, V]
    left = _drop(p[None].to(r.dtype), first[None])  # [1, V]
    for token in rejected[1:]:
        c = torch.tensor([token], device=p.device)
        mass = left.sum(-1, keepdim=True)
        if float(mass) <= 0 or float(_at(left, c)) <= 0:  # a deterministic candidate: δ_c
            drawn_from = torch.nn.functional.one_hot(c, r.shape[-1]).to(r.dtype)
        else:
            drawn_from = left / mass
        r = _next_residual(r, drawn_from)
        left = _drop(left, c)
    return r[0]


def unjudged_first_accepts(
    rule: Rule, verdict: TreeVerdict, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> dict[int, float]:
    """a(n) of the first candidates of rows the walk did not decide at, which have none (NaN),
    from the rows draft_probs, target_probs [R, V] (R ≥ the rows with children): what the rule
    would have judged each by, as `verify` reports for a chain's drafts after its rejection.
    A row's later candidates are judged against residuals, never by a(n): they keep NaN."""
    firsts = {kids[0] for kids in verdict.children if kids}
    missing = [i for i, a in enumerate(verdict.accept_probs) if math.isnan(a) and i in firsts]
    if not missing or rule.caps.round_level:  # a round-level rule has no per-node a(n)
        return {}
    dev = target_probs.device
    rows = torch.tensor([verdict.parents[i] + 1 for i in missing], dtype=torch.long, device=dev)
    n = torch.tensor([verdict.tokens[i] for i in missing], dtype=torch.long, device=dev)
    a = rule.accept_probs(target_probs[rows], draft_probs[rows], n, validate=False)  # [d]
    return dict(zip(missing, a.tolist(), strict=True))


def tree_emitted(rule: Rule, tree: DraftTree, target_probs: torch.Tensor) -> torch.Tensor:
    """The law of the token emitted after each row [N + 1, V]: the chain's pi of (p, q) at a
    node with children (whatever their number, see the module's doc), q at a leaf."""
    _check_rule(rule)
    check_shape("target_probs", target_probs, tuple(tree.draft_probs.shape))
    pi = emitted_distribution(rule, tree.draft_probs, target_probs)  # [N + 1, V]
    has_kids = torch.zeros(tree.size + 1, dtype=torch.bool, device=pi.device)
    has_kids[tree.parents.to(pi.device) + 1] = True
    return torch.where(has_kids.unsqueeze(-1), pi, target_probs.to(pi.dtype))


__all__ = [
    "FATES",
    "LAST_KINDS",
    "DraftTree",
    "TreeBatchResult",
    "TreeVerdict",
    "children_of",
    "coin_count",
    "expected_accepted",
    "node_depths",
    "row_residual",
    "sample_without_replacement",
    "tree_emitted",
    "unjudged_first_accepts",
    "verify_tree",
    "verify_tree_batch",
]
