"""One round record: a chain is the one-child tree it is, everywhere.

- The walk of a one-child tree (`maths.tree.verify_tree`) is chain verification (`verify`) on
  the same coins, for every per-token rule: the same accepted drafts, the same token after them,
  the same a(n) at every decided draft.
- A tree row whose every candidate was rejected is a row like any other: the picker offers it
  and the inspector opens it, marking the token recovered there.
"""

from __future__ import annotations

import pytest
import torch
from test_tree_verify import RELAXED

from cactus_core.app.shared.inspector import inspect_token
from cactus_core.app.shared.round_view import decided_rows, trace_position
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft
from cactus_core.maths.rules import make_rule
from cactus_core.maths.tree import DraftTree, verify_tree
from cactus_core.maths.verify import verify

V, K = 12, 4


def _chain(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random p [K, V], drafts n [K] drawn from p, q [K + 1, V] (some zeros: truncation), and
    the coin layout [K + K + 1]."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(2 * torch.randn(K + 1, V, generator=gen, dtype=torch.float64), -1)
    q = q * (torch.rand(K + 1, V, generator=gen, dtype=torch.float64) > 0.2)
    q[:, 0] += 1e-3  # every row keeps some mass
    q = q / q.sum(-1, keepdim=True)
    p = torch.softmax(2 * torch.randn(K, V, generator=gen, dtype=torch.float64), -1)
    n = torch.multinomial(p, 1, generator=gen)[:, 0]
    coins = torch.rand(2 * K + 1, generator=gen, dtype=torch.float64)
    return p.float(), n, q.float(), coins.float()


@pytest.mark.parametrize("name", sorted(RELAXED))
@pytest.mark.parametrize("seed", range(12))
def test_the_walk_of_a_one_child_tree_is_chain_verification(name, seed):
    rule = make_rule(name, **RELAXED[name])
    p, n, q, coins = _chain(seed)
    chain = verify(
        rule, p[None], n[None], q[None], uniforms=coins[None, :K], sample_uniforms=coins[2 * K :]
    )
    # The chain's one emission coin is the coin of every depth in the tree's layout.
    layout = torch.cat([coins[:K], coins[2 * K :].expand(K + 1)])
    rows = torch.cat([p, q[K:]])  # a leaf's p is never read
    tree = DraftTree(n, torch.arange(-1, K - 1), rows)
    walk = verify_tree(rule, tree, q, layout)
    m = int(chain.num_accepted[0])
    assert len(walk.path) == m and walk.path == list(range(m))
    assert walk.emitted == chain.output_token_ids[0, : m + 1].tolist()
    decided = min(m + 1, K)
    assert walk.accept_probs[:decided] == pytest.approx(
        chain.accept_probs[0, :decided].tolist(), abs=1e-6
    )
    assert walk.last == ("bonus" if m == K else "recovered")


@pytest.fixture(scope="module")
def tree_trace(tiny_pair):
    pair = with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))
    shape = TreeSettings(nodes=6, depth=2, width=2, branch=2, root_branch=3)
    dec = SpeculativeDecoder(pair, make_rule("sps"), temperature=1.0, tree=shape)
    dec.eos_ids = set()
    return dec.generate("Tell me about cacti.", max_new_tokens=40, seed=5).trace


def test_a_row_whose_candidates_were_all_rejected_opens_in_the_inspector(tree_trace):
    rejected_rows = [
        (rnd, rnd.verdict.path_rows[-1])
        for rnd in tree_trace.rounds
        if rnd.verdict.last == "recovered"
        and len(rnd.verdict.children[rnd.verdict.path_rows[-1]]) > 1
    ]
    assert rejected_rows, "the tiny pair's run has a row where every candidate failed"
    offered = {(c.round_index, c.row) for c in decided_rows(tree_trace)}
    for rnd, row in rejected_rows:
        assert (rnd.index, row) in offered
        ins = inspect_token(tree_trace, rnd.index, row)  # the recovered token
        assert "recovered" in ins.title and ins.mark == "emitted" and ins.series
        assert any("rejected" in note for note in ins.notes)
        pos = trace_position(tree_trace, rnd.index, row)
        first = rnd.verdict.children[row][0]
        assert pos.labels[pos.drafted] == tree_trace.text(rnd.verdict.tokens[first])
