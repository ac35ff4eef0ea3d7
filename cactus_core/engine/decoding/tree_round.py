"""One round with a draft tree (one sequence): grow the tree, score every node in one verifier
pass with a tree attention mask, walk the tree under the rule, keep the accepted path in the
verifier's cache, and let the draft read it. `run_tree_round` mirrors
`chain_round.ChainRounds.run`; both return a `RoundOutcome`.

Shapes: N = nodes of the tree, V = vocabulary. Column 0 of the verify pass is the last
committed token (the root); column i + 1 is node i, so row 0 of q is q at the root and row
i + 1 is q after node i, matching the tree's `draft_probs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_core.engine.decoding.clock import RoundClock
from cactus_core.engine.decoding.host import logprobs
from cactus_core.engine.decoding.outcome import RoundOutcome
from cactus_core.engine.drafting.drafter import Drafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.tree import DraftTree, node_depths, verify_tree


@dataclass
class TreeCoins:
    """A tree round's uniforms, all drawn whatever the tree looks like (so that later rounds
    meet the same coins): one per child drawn, one accept coin per node, and one inverse-CDF
    coin per depth for the recovered or bonus token."""

    draft: torch.Tensor  # [1, N]
    accept: torch.Tensor  # [N]
    sample: torch.Tensor  # [depth + 1]


def draw_tree_coins(generator: torch.Generator, s: TreeSettings, device: torch.device) -> TreeCoins:
    u = torch.rand(2 * s.nodes + s.depth + 1, generator=generator, device=device)
    n = s.nodes
    return TreeCoins(draft=u[None, :n], accept=u[n : 2 * n], sample=u[2 * n :])


class TreeRounds:
    """A tree drafter's rounds (`caches.Rounds`): one sequence, a tree of the settings' shape,
    only where the context has room for its whole depth. The verify pass scores every node, so
    the lazy head does not apply."""

    def __init__(self, drafter: Drafter[DraftTree], settings: TreeSettings) -> None:
        self.drafter, self.settings = drafter, settings

    def size(self, k: int, room: int, rows: int) -> int:
        if rows != 1:
            raise ValueError("a draft tree decodes one sequence at a time")
        return self.settings.depth if room >= self.settings.depth else 0

    def draw_coins(
        self, generators: list[torch.Generator], size: int, device: torch.device
    ) -> TreeCoins:
        (generator,) = generators
        return draw_tree_coins(generator, self.settings, device)

    def run(
        self,
        judge: Rule,
        verifier: SequenceCache,
        last: list[int],
        coins: TreeCoins,
        sampling: SamplingSettings,
        clock: RoundClock,
        lazy: bool,
    ) -> RoundOutcome:
        (token,) = last
        return run_tree_round(judge, verifier, self.drafter, token, coins, sampling, clock)


@torch.inference_mode()
def run_tree_round(
    judge: Rule,
    verifier: SequenceCache,
    drafter: Drafter[DraftTree],
    last: int,
    coins: TreeCoins,
    sampling: SamplingSettings,
    clock: RoundClock | None = None,
) -> RoundOutcome:
    """Draft a tree, verify it in one pass, walk it, keep the accepted path in the verifier's
    cache, and let the draft read it."""
    clock = clock or RoundClock()
    with clock.draft:
        tree = drafter.propose(coins.draft, sampling.probs)
    with clock.verify:
        device = tree.draft_probs.device
        ids = torch.cat([torch.tensor([last], device=device), tree.tokens])[None]  # [1, N + 1]
        parents = [-1] + [p + 1 for p in tree.parents.tolist()]  # columns; -1: the context
        logits = verifier.step_tree(ids, parents)[0]  # [N + 1, V]
        q = sampling.probs(logits)
        # the tree's coin layout (`maths.tree`): an accept coin per node, an emission coin per
        # depth
        uniforms = torch.cat([coins.accept[: tree.size], coins.sample[: tree.depth + 1]])
        verdict = verify_tree(judge, tree, q, uniforms, validate=False)
        verifier.keep_path([0] + [n + 1 for n in verdict.path])
    with clock.draft:
        drafter.after_verify(verifier, [list(verdict.emitted)])
    draft_s, verify_s = clock.lap()
    emitted = torch.tensor([verdict.emitted], device=device)
    lp = logprobs(logits[None, verdict.path_rows], emitted)[0].tolist()
    # A draft call per depth but the deepest (never expanded), and the feed: the tree's depth.
    calls = max(node_depths(verdict.parents), default=1)
    return RoundOutcome([verdict], tree.draft_probs[None], q[None], [lp], calls, draft_s, verify_s)
