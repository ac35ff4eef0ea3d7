"""Block verification on a tiny Markov pair: lossless over whole sequences, and it accepts at
least as many drafts per call as token-wise sps."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy import stats

from cactus_core.maths.rules import make_rule
from cactus_core.maths.verify import verify

V, K, START = 6, 3, 0


def markov_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """p(·|previous token), q(·|previous token): [V, V] each, rows on the simplex. The draft is a
    noisy copy of the verifier, as a real draft is, so that long accepted blocks occur."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(2.0 * torch.randn(V, V, generator=gen, dtype=torch.float64), -1)
    noise = torch.softmax(2.0 * torch.randn(V, V, generator=gen, dtype=torch.float64), -1)
    return 0.6 * q + 0.4 * noise, q


def one_round(
    rule, p_tab: torch.Tensor, q_tab: torch.Tensor, prev: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    """A round of k drafts from each sequence's last token prev [N]: output_token_ids [N, k+1]."""
    ctx, ps, ids = prev, [], []
    for _ in range(K):
        p_row = p_tab[ctx]  # [N, V]
        n = torch.multinomial(p_row, 1, generator=gen)[:, 0]
        ps.append(p_row)
        ids.append(n)
        ctx = n
    drafts = torch.stack(ids, 1)  # [N, k]
    contexts = torch.cat([prev[:, None], drafts], 1)  # [N, k+1]: q row j follows token j
    q = q_tab[contexts]  # [N, k+1, V]
    return verify(rule, torch.stack(ps, 1), drafts, q, generator=gen).output_token_ids


def first_two_tokens(rule, seed: int, draws: int) -> torch.Tensor:
    """The first two emitted tokens of `draws` independent generations: [N, 2]."""
    p_tab, q_tab = markov_pair(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    start = torch.full((draws,), START)
    out = one_round(rule, p_tab, q_tab, start, gen)
    first, second = out[:, 0], out[:, 1].clone()
    again = second < 0  # the round emitted one token: the second comes from the next round
    second[again] = one_round(rule, p_tab, q_tab, first[again], gen)[:, 0]
    return torch.stack([first, second], 1)


def joint_pvalue(pairs: torch.Tensor, q_tab: torch.Tensor) -> float:
    counts = torch.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V).double()
    expected = (q_tab[START][:, None] * q_tab).reshape(-1) * pairs.shape[0]
    keep = expected >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().view(1)])
    if float(exp[-1]) == 0:  # every cell expects at least 5: no pooled bin
        obs, exp = obs[:-1], exp[:-1]
    return float(
        stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_block_emits_the_verifiers_joint_law(seed: int) -> None:
    pairs = first_two_tokens(make_rule("block"), seed, 200_000)
    assert joint_pvalue(pairs, markov_pair(seed)[1]) > 1e-3


def test_the_joint_test_has_power() -> None:
    """A lossy rule's first two tokens do not fit the verifier's joint law."""
    pairs = first_two_tokens(make_rule("cactus", delta=0.5), 0, 200_000)
    assert joint_pvalue(pairs, markov_pair(0)[1]) < 1e-6


def exact_expected_accepted(seed: int) -> tuple[float, float]:
    """E[accepted drafts per round] for block and sps, over every possible draft and coin."""
    p_tab, q_tab = markov_pair(seed)
    drafts = torch.tensor(list(itertools.product(range(V), repeat=K)))  # [V^k, k]
    contexts = torch.cat([torch.full((drafts.shape[0], 1), START), drafts], 1)
    p = p_tab[contexts[:, :K]]  # [V^k, k, V]
    q = q_tab[contexts]  # [V^k, k+1, V]
    weight = p.gather(-1, drafts[..., None])[..., 0].prod(-1)  # P(draft)
    _, h = make_rule("block").stop_chances(p, drafts, q)
    block = make_rule("block").expected_accepted(h)
    a = make_rule("sps").accept_probs(q[:, :K], p, drafts)  # [V^k, k]
    sps = a.cumprod(-1).sum(-1)
    return float((weight * block).sum()), float((weight * sps).sum())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_block_accepts_at_least_as_many_as_sps(seed: int) -> None:
    block, sps = exact_expected_accepted(seed)
    assert block >= sps - 1e-12
    assert block > sps  # strictly, for a draft that differs from the verifier


def test_measured_block_acceptance_matches_its_exact_expectation() -> None:
    """The sampled rounds accept what stop_chances says they should, so the exact comparison
    above is about the verifier that actually runs."""
    p_tab, q_tab = markov_pair(0)
    gen = torch.Generator().manual_seed(5)
    start = torch.full((200_000,), START)
    out = one_round(make_rule("block"), p_tab, q_tab, start, gen)
    accepted = (out >= 0).sum(-1) - 1
    block, _ = exact_expected_accepted(0)
    se = float(accepted.double().std()) / accepted.numel() ** 0.5
    assert float(accepted.double().mean()) == pytest.approx(block, abs=5 * se)


def test_expected_accepted_is_the_law_of_the_last_passing_coin() -> None:
    h = torch.tensor([[0.3, 0.6, 0.5]], dtype=torch.float64)
    want = 3 * 0.5 + 2 * 0.6 * 0.5 + 1 * 0.3 * 0.4 * 0.5
    assert float(make_rule("block").expected_accepted(h)) == pytest.approx(want)
