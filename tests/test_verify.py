"""verify(): the emitted token's law, replay, exactness at T = 0, edge cases and bad input."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import RULE_NAMES, make_rule, rule_class
from cactus_core.maths.rules.fly import fly_kept
from cactus_core.maths.verify import VerifyResult, verify, verify_sequential

# A non-default parameter per rule so the statistical tests exercise the interesting regime.
RULES = {
    "sps": {},
    "cactus": {"delta": 0.5},
    "cactus-exact": {"delta": 0.3},
    "cactus-budget": {"budget": 0.05},
    "tas": {"epsilon": 0.09, "alpha": 0.3},
    "topk": {"k_top": 2},
    "interp": {"alpha": 0.4},
    "optimal": {"budget": 0.05},
    "block": {},
    "cactus-adaptive": {"delta": 0.5},
    "cascade": {"alpha": 0.5},
    "fuzzy": {"T": 0.3},
    "relaxed-topk": {"delta_r": 0.2, "K": 3},
    "optimal-price": {"t": 1.0},
    "sglang": {"threshold_acc": 0.3, "threshold_single": 0.6},
    "kl-judge": {"tau": 0.5},
    "fly": {"theta": 0.8, "W": 1},  # the gate open at some positions, shut at others
}
# a rule that reads the verifier's hidden states has no rows-only verify: test_learned_judge.py
assert set(RULES) == {name for name in RULE_NAMES if not rule_class(name).caps.reads_hidden}

N_DRAWS = 100_000


def dirichlet(v: int, shape: tuple[int, ...], gen: torch.Generator, conc: float = 1.0):
    g = torch._standard_gamma(torch.full((*shape, v), conc, dtype=torch.float64), generator=gen)
    return g / g.sum(-1, keepdim=True)


def one_round(p: torch.Tensor, q: torch.Tensor, rule, n_draws: int, seed: int) -> torch.Tensor:
    """First emitted token of n_draws independent rounds with k = 1 at the same (p, q)."""
    gen = torch.Generator().manual_seed(seed)
    v = p.shape[-1]
    ids = torch.multinomial(p.float(), n_draws, replacement=True, generator=gen).view(-1, 1)
    draft = p.float().expand(n_draws, 1, v)
    target = q.float().expand(n_draws, 2, v)
    res = verify(rule, draft, ids, target, generator=gen)
    return res.output_token_ids[:, 0]


def chi_square_pvalue(tokens: torch.Tensor, pi: torch.Tensor) -> float:
    """Chi-square goodness of fit; bins expected below 5 are pooled into one."""
    n = tokens.numel()
    counts = torch.bincount(tokens, minlength=pi.numel()).double()
    expected = pi.double() * n
    small = expected < 5
    assert counts[pi == 0].sum() == 0, "a token with pi = 0 was emitted"
    obs = torch.cat([counts[~small], counts[small].sum().view(1)])
    exp = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    exp = exp * obs.sum() / exp.sum()  # pi sums to 1 up to rounding
    if obs.numel() < 2:  # one possible outcome: nothing to test beyond the support check
        return 1.0
    return float(stats.chisquare(obs.numpy(), exp.numpy()).pvalue)


@pytest.mark.parametrize("vocab", [2, 5, 50])
@pytest.mark.parametrize("name", list(RULES))
def test_first_token_follows_exact_pi(name: str, vocab: int) -> None:
    gen = torch.Generator().manual_seed(1000 + vocab)
    p = dirichlet(vocab, (), gen)
    q = dirichlet(vocab, (), gen)
    rule = make_rule(name, **RULES[name])
    pi = emitted_distribution(rule, p, q)
    tokens = one_round(p, q, rule, N_DRAWS, seed=7 * vocab)
    assert chi_square_pvalue(tokens, pi) > 1e-3
    if name == "sps":
        torch.testing.assert_close(pi, q, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(RULES))
def test_first_token_follows_exact_pi_under_a_truncated_q(name: str) -> None:
    """q with zeros (a top-k / top-p verifier): the drafts there are always rejected, the
    emitted pi still matches the draws, and no token outside q's support is ever emitted."""
    gen = torch.Generator().manual_seed(77)
    p = dirichlet(12, (), gen)
    q = dirichlet(12, (), gen)
    q[[0, 3, 7, 8]] = 0.0
    q = q / q.sum()
    rule = make_rule(name, **RULES[name])
    pi = emitted_distribution(rule, p, q)
    assert float(pi[q == 0].abs().max()) == 0.0
    tokens = one_round(p, q, rule, N_DRAWS, seed=5)
    assert not bool((q[tokens] == 0).any())
    assert chi_square_pvalue(tokens, pi) > 1e-3


def test_chi_square_detects_a_wrong_law() -> None:
    """The statistical test has power: sps samples do not fit cactus's pi."""
    gen = torch.Generator().manual_seed(3)
    p = dirichlet(5, (), gen)
    q = dirichlet(5, (), gen)
    tokens = one_round(p, q, make_rule("sps"), N_DRAWS, seed=1)
    pi = emitted_distribution(make_rule("cactus", delta=0.5), p, q)
    assert chi_square_pvalue(tokens, pi) < 1e-6


def test_bonus_token_follows_q_at_position_k_plus_1() -> None:
    gen = torch.Generator().manual_seed(5)
    v, n = 6, 50_000
    p = dirichlet(v, (), gen).float()
    q_bonus = dirichlet(v, (), gen).float()
    ids = torch.multinomial(p, n, replacement=True, generator=gen).view(-1, 1)
    target = torch.stack([p, q_bonus]).expand(n, 2, v)  # q = p at the draft: always accepted
    res = verify(make_rule("sps"), p.expand(n, 1, v), ids, target, generator=gen)
    assert bool((res.num_accepted == 1).all())
    assert bool((res.output_token_ids[:, 0] == ids[:, 0]).all())
    assert chi_square_pvalue(res.output_token_ids[:, 1], q_bonus.double()) > 1e-3


def random_batch(b: int, k: int, v: int, seed: int, conc: float = 0.5):
    gen = torch.Generator().manual_seed(seed)
    p = dirichlet(v, (b, k), gen, conc).float()
    q = dirichlet(v, (b, k + 1), gen, conc).float()
    ids = torch.multinomial(p.reshape(-1, v), 1, generator=gen).view(b, k)
    return p, ids, q


def coin_decisions(rule, res: VerifyResult, ids: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The number of drafts each row keeps, from its recorded coins: [B]."""
    k = ids.shape[1]
    acc = res.uniforms < res.accept_probs  # [B, k]
    if rule.name == "block":  # the last draft whose coin passed its stop chance
        last = torch.where(acc, torch.arange(1, k + 1), 0)
        return last.amax(-1)
    if rule.name == "fly":  # sps's mismatches overridden where gate and window allow
        qn = q[:, :k].gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        acc = fly_kept(acc, rule.gate(q[:, :k]) & (qn > 0), int(rule.W))
    return acc.long().cumprod(-1).sum(-1)


def check_layout(res: VerifyResult, ids: torch.Tensor, rule=None, q=None) -> None:
    b, k = ids.shape
    out = res.output_token_ids
    assert out.shape == (b, k + 1) and res.num_accepted.shape == (b,)
    assert res.accept_probs.shape == (b, k) and res.uniforms.shape == (b, k)
    assert res.sample_uniforms.shape == (b,)
    for row in range(b):
        m = int(res.num_accepted[row])
        assert 0 <= m <= k
        assert out[row, :m].tolist() == ids[row, :m].tolist()
        assert out[row, m] >= 0
        assert bool((out[row, m + 1 :] == -1).all())
    if rule is not None:  # the recorded coins explain the decisions
        assert torch.equal(res.num_accepted, coin_decisions(rule, res, ids, q))


@pytest.mark.parametrize("name", list(RULES))
def test_layout_and_replay(name: str) -> None:
    p, ids, q = random_batch(16, 4, 30, seed=11)
    rule = make_rule(name, **RULES[name])
    res = verify(rule, p, ids, q, generator=torch.Generator().manual_seed(0))
    check_layout(res, ids, rule, q)
    again = verify(rule, p, ids, q, res.uniforms, sample_uniforms=res.sample_uniforms)
    for field in ("output_token_ids", "num_accepted", "accept_probs", "uniforms"):
        assert torch.equal(getattr(res, field), getattr(again, field))
    same_seed = verify(rule, p, ids, q, generator=torch.Generator().manual_seed(0))
    assert torch.equal(res.output_token_ids, same_seed.output_token_ids)


@pytest.mark.parametrize("batch", [1, 6])
@pytest.mark.parametrize("name", list(RULES))
def test_sequential_verify_matches_verify(name: str, batch: int) -> None:
    """Computing q position by position gives the same round as the full rows, for the same
    coins, and stops asking for rows once every sequence has its rejection."""
    rule = make_rule(name, **RULES[name])
    k, seen = 4, set()
    for seed in range(40):
        # Peaked p and q near p in half the rounds, so fully accepted rounds (bonus) occur too.
        p, ids, q = random_batch(batch, k, 12, seed=seed, conc=0.5 if seed % 2 else 0.1)
        if seed % 2 == 0:
            q = (0.95 * torch.cat([p, p[:, -1:]], 1) + 0.05 * q).float()
        coins = torch.rand(batch, k + 1, generator=torch.Generator().manual_seed(seed))
        full = verify(rule, p, ids, q, coins[:, :k], sample_uniforms=coins[:, k])
        asked: list[int] = []

        def row(j: int, q=q, asked=asked) -> torch.Tensor:
            asked.append(j)
            return q[:, j]

        lazy, rows = verify_sequential(rule, p, ids, row, coins[:, :k], coins[:, k])
        assert torch.equal(lazy.output_token_ids, full.output_token_ids)
        assert torch.equal(lazy.num_accepted, full.num_accepted)
        last = int(full.num_accepted.max())
        if rule.caps.round_level:  # block decides from the back: it needs every row
            assert asked == list(range(k + 1)) and torch.equal(rows, q)
            assert torch.equal(lazy.accept_probs, full.accept_probs)
            seen.update(full.num_accepted.tolist())
            continue
        assert asked == list(range(last + 1))
        assert torch.equal(rows, q[:, : last + 1])
        decided = min(last + 1, k)
        assert torch.equal(lazy.accept_probs[:, :decided], full.accept_probs[:, :decided])
        assert bool(lazy.accept_probs[:, decided:].isnan().all())
        seen.update(full.num_accepted.tolist())
    assert {0, k} <= seen  # both an immediate rejection and a bonus were exercised


def test_cactus_delta_zero_is_sps_bit_for_bit() -> None:
    p, ids, q = random_batch(64, 5, 100, seed=2)
    sps = verify(make_rule("sps"), p, ids, q, generator=torch.Generator().manual_seed(4))
    cac = verify(make_rule("cactus", delta=0.0), p, ids, q, sps.uniforms, None, sps.sample_uniforms)
    assert torch.equal(sps.output_token_ids, cac.output_token_ids)
    assert torch.equal(sps.num_accepted, cac.num_accepted)
    assert torch.equal(sps.accept_probs, cac.accept_probs)
    assert int(sps.num_accepted.sum()) < 64 * 5  # some rejections, so residuals were drawn


def test_acceptance_grows_with_delta_on_the_same_coins() -> None:
    p, ids, q = random_batch(64, 5, 100, seed=3)
    base = verify(make_rule("sps"), p, ids, q, generator=torch.Generator().manual_seed(1))
    prev_a, prev_m = base.accept_probs, base.num_accepted
    for name in ("cactus", "cactus-exact"):
        prev_a, prev_m = base.accept_probs, base.num_accepted
        for delta in (0.01, 0.1, 0.3, 1.0, 3.0):
            res = verify(make_rule(name, delta=delta), p, ids, q, base.uniforms)
            assert bool((res.accept_probs >= prev_a).all())
            assert bool((res.num_accepted >= prev_m).all())
            prev_a, prev_m = res.accept_probs, res.num_accepted
        assert prev_m.sum() > base.num_accepted.sum()


@pytest.mark.parametrize("name", list(RULES))
def test_greedy_is_exact_match(name: str) -> None:
    """T = 0: one-hot p and q. Accept iff the draft is q's argmax; recover q's argmax."""
    b, k, v = 64, 3, 7
    gen = torch.Generator().manual_seed(9)
    top_q = torch.randint(0, v, (b, k + 1), generator=gen)
    # half of the drafts match the verifier's greedy token
    ids = torch.where(torch.rand(b, k, generator=gen) < 0.6, top_q[:, :k], (top_q[:, :k] + 1) % v)
    p = torch.nn.functional.one_hot(ids, v).float()
    q = torch.nn.functional.one_hot(top_q, v).float()
    rule = make_rule(name, **RULES[name])
    res = verify(rule, p, ids, q, generator=gen)
    match = (ids == top_q[:, :k]).long()
    expected_m = match.cumprod(-1).sum(-1)
    # a mismatch has q_n = 0, which every rule rejects (interp's h too is zero off q's support)
    assert torch.equal(res.accept_probs[match == 0], torch.zeros_like(res.accept_probs[match == 0]))
    assert torch.equal(res.num_accepted, expected_m)
    emitted_last = res.output_token_ids.gather(1, expected_m.view(-1, 1)).squeeze(1)
    assert torch.equal(emitted_last, top_q.gather(1, expected_m.view(-1, 1)).squeeze(1))
    check_layout(res, ids, rule, q)


@pytest.mark.parametrize("name", list(RULES))
def test_edge_cases(name: str) -> None:
    rule = make_rule(name, **RULES[name])
    # V = 1: everything is accepted and the bonus is token 0
    one = torch.ones(3, 2, 1)
    res = verify(rule, one, torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 3, 1))
    assert res.output_token_ids.tolist() == [[0, 0, 0]] * 3
    # B = 0
    res = verify(
        rule, torch.ones(0, 2, 4) / 4, torch.zeros(0, 2, dtype=torch.long), torch.ones(0, 3, 4) / 4
    )
    assert res.output_token_ids.shape == (0, 3) and res.num_accepted.shape == (0,)
    # k = 1
    p, ids, q = random_batch(8, 1, 10, seed=1)
    check_layout(verify(rule, p, ids, q), ids, rule, q)
    # q_n = 1 at the draft: accepted by every rule
    v = 5
    p = torch.full((4, 1, v), 1.0 / v)
    q = torch.nn.functional.one_hot(torch.tensor([[2, 0]] * 4), v).float()
    res = verify(rule, p, torch.full((4, 1), 2), q)
    assert res.num_accepted.tolist() == [1] * 4 and res.output_token_ids[:, 1].tolist() == [0] * 4
    # q_n = 0 at the draft: rejected by every rule, and never emitted
    q = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0]).expand(4, 2, v)
    res = verify(rule, p, torch.full((4, 1), 0), q)
    assert res.accept_probs.tolist() == [[0.0]] * 4
    assert res.num_accepted.tolist() == [0] * 4
    assert set(res.output_token_ids[:, 0].tolist()) <= {1, 2}


@pytest.mark.parametrize("name", list(RULES))
def test_a_draft_with_p_and_q_zero_is_rejected(name: str) -> None:
    """A token neither model would produce (p_n = q_n = 0: not sampled from this p) must not be
    emitted: vLLM's kernel and the Cactus reference reject it too."""
    rule = make_rule(name, **RULES[name])
    p = torch.tensor([[[0.0, 0.5, 0.3, 0.2]]])
    q = torch.tensor([[[0.0, 0.4, 0.3, 0.3]]]).expand(1, 2, 4)
    for seed in range(20):
        res = verify(rule, p, torch.tensor([[0]]), q, generator=torch.Generator().manual_seed(seed))
        assert res.accept_probs.tolist() == [[0.0]]
        assert res.output_token_ids[0, 0].item() != 0
    assert rule.accept_probs(q[0, 0], p[0, 0], torch.tensor(0)).item() == 0.0
    assert rule.accept_probs_all(p[0, 0], q[0, 0])[0].item() == 0.0


def test_bf16_inputs_use_float32_maths() -> None:
    p, ids, q = random_batch(8, 3, 40, seed=6)
    rule = make_rule("cactus", delta=0.5)
    ref = verify(rule, p, ids, q, generator=torch.Generator().manual_seed(0))
    res = verify(rule, p.bfloat16(), ids, q.bfloat16(), ref.uniforms, None, ref.sample_uniforms)
    assert res.accept_probs.dtype == torch.float32
    torch.testing.assert_close(res.accept_probs, ref.accept_probs, atol=2e-2, rtol=2e-2)


def test_int32_ids_and_caller_coins() -> None:
    p, ids, q = random_batch(4, 2, 10, seed=8)
    u = torch.zeros(4, 2)  # u = 0 < a(n) whenever a(n) > 0
    res = verify(make_rule("sps"), p, ids.int(), q, u, sample_uniforms=torch.zeros(4))
    assert torch.equal(res.uniforms, u)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda p, ids, q: (
                p.index_put((torch.tensor([0]),), torch.tensor(float("nan"))),
                ids,
                q,
            ),
            "NaN",
        ),
        (
            lambda p, ids, q: (
                p,
                ids,
                q.index_put(
                    (torch.tensor([1]), torch.tensor([0]), torch.tensor([0])), torch.tensor(-0.1)
                ),
            ),
            "negative",
        ),
        (lambda p, ids, q: (p * 1.01, ids, q), "sum to 1"),
        (lambda p, ids, q: (p, ids, q[:, :-1]), "shape"),
        (lambda p, ids, q: (p, ids[:, :-1], q), "shape"),
        (lambda p, ids, q: (p[..., :-1], ids, q), "shape"),
        (lambda p, ids, q: (p, ids + 100, q), "token ids"),
        (lambda p, ids, q: (p, ids.float(), q), "integer"),
        (lambda p, ids, q: (p[0], ids, q), "shape"),
    ],
)
def test_bad_input_raises(mutate, message: str) -> None:
    p, ids, q = random_batch(3, 2, 6, seed=0)
    p, ids, q = mutate(p, ids, q)
    with pytest.raises(ValueError, match=message):
        verify(make_rule("sps"), p, ids, q)


def test_bad_coins_and_rule_raise() -> None:
    p, ids, q = random_batch(3, 2, 6, seed=0)
    with pytest.raises(ValueError, match="shape"):
        verify(make_rule("sps"), p, ids, q, torch.rand(3, 3))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        verify(make_rule("sps"), p, ids, q, torch.full((3, 2), 1.5))
    with pytest.raises(ValueError, match="make_rule"):
        verify("sps", p, ids, q)  # type: ignore[arg-type]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(RULES))
def test_cuda_matches_cpu(name: str) -> None:
    p, ids, q = random_batch(32, 4, 1000, seed=12)
    rule = make_rule(name, **RULES[name])
    cpu = verify(rule, p, ids, q, generator=torch.Generator().manual_seed(0))
    gpu = verify(
        rule, p.cuda(), ids.cuda(), q.cuda(), cpu.uniforms.cuda(), None, cpu.sample_uniforms.cuda()
    )
    torch.testing.assert_close(gpu.accept_probs.cpu(), cpu.accept_probs, atol=1e-5, rtol=1e-5)
    agree = (gpu.output_token_ids.cpu() == cpu.output_token_ids).all(-1).float().mean()
    assert agree > 0.95  # coins that sit within rounding of a(n) may flip
