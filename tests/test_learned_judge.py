"""The learned judge (`learned-judge`): its exact law when the judge's verdict is a function of
the drafted token (χ²), sps at threshold 0, its refusals (no hidden states, another verifier,
replay, vLLM), the decoder feeding it the verifier's hidden states, and a sweep marking its pi
estimated. The shipped judge is checked against the embedded verifier's hidden size."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from cactus_core import SpeculativeDecoder
from cactus_core.app.shared.round_view import live_stats
from cactus_core.engine.decoding.replay import reverify
from cactus_core.experiments.sweeps.config import SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.plan import plan_chunks
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.maths.rules import learned_judge, make_rule
from cactus_core.maths.rules.learned_judge import JUDGE_ENV, Judge, loaded_judge
from cactus_core.maths.tree import verify_tree_batch
from cactus_core.maths.verify import verify

N_DRAWS = 100_000


def token_judge(vocab: int, unimportant: set[int]) -> Judge:
    """A judge over hidden size `vocab` whose 'after' row is the drafted token's one-hot: it
    calls a mismatch unimportant exactly for the tokens in `unimportant`."""
    after = torch.tensor([-6.0 if t in unimportant else 6.0 for t in range(vocab)])
    return Judge(torch.cat([torch.zeros(vocab), after]), 0.0, "a test verifier")


def one_hot_hidden(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """hidden [N, k+1, vocab]: row 0 zeros, row i + 1 the one-hot of draft i."""
    n, k = ids.shape
    hidden = torch.zeros(n, k + 1, vocab)
    hidden[:, 1:] = torch.nn.functional.one_hot(ids, vocab).float()
    return hidden


def judged_law(p: torch.Tensor, q: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """The exact first-token law when the mismatches of tokens `kept` [V] bool are kept (where
    q allows them): min(p, q) + (p − q)+ on kept tokens, plus sps's residual times the mass of
    the rejections that stay rejections."""
    over = (p - q).clamp_min(0) * (kept & (q > 0))
    residual = (q - p).clamp_min(0)
    stay = (p - q).clamp_min(0).sum() - over.sum()
    return torch.minimum(p, q) + over + residual / residual.sum() * stay


def flat_dirichlet(vocab: int, gen: torch.Generator) -> torch.Tensor:
    """A Dirichlet(1, ..., 1) draw [vocab] float64 from `gen` (normalised exponentials), so
    the rows do not depend on which tests ran before in the process."""
    e = -torch.rand(vocab, generator=gen, dtype=torch.float64).log()
    return e / e.sum()


@pytest.mark.parametrize("truncated", [False, True])
def test_first_token_follows_the_judged_law(monkeypatch, truncated: bool) -> None:
    vocab = 8
    gen = torch.Generator().manual_seed(11)
    p, q = (flat_dirichlet(vocab, gen) for _ in range(2))
    if truncated:  # a top-p verifier: token 2 is judged unimportant but q rules it out
        q[[2, 5]] = 0.0
        q = q / q.sum()
    unimportant = {0, 2, 3, 6}
    monkeypatch.setattr(learned_judge, "loaded_judge", lambda: token_judge(vocab, unimportant))
    ids = torch.multinomial(p.float(), N_DRAWS, replacement=True, generator=gen).view(-1, 1)
    res = verify(
        make_rule("learned-judge", threshold=0.5),
        p.float().expand(N_DRAWS, 1, vocab),
        ids,
        q.float().expand(N_DRAWS, 2, vocab),
        generator=gen,
        hidden=one_hot_hidden(ids, vocab),
    )
    kept = torch.tensor([t in unimportant for t in range(vocab)])
    law = judged_law(p, q, kept)
    assert float(law.sum()) == pytest.approx(1.0)
    first = res.output_token_ids[:, 0]
    counts = torch.bincount(first, minlength=vocab).double()
    assert counts[law == 0].sum() == 0, "a token with probability 0 was emitted"
    live = law > 0
    pvalue = stats.chisquare(counts[live].numpy(), (law[live] * N_DRAWS).numpy()).pvalue
    assert pvalue > 1e-3
    # the law moved: sps's (q) does not fit the draws
    assert stats.chisquare(counts[live].numpy(), (q[live] * N_DRAWS).numpy()).pvalue < 1e-6


def test_threshold_zero_is_sps_and_one_keeps_every_draft_q_allows(monkeypatch) -> None:
    vocab, b, k = 8, 64, 4
    monkeypatch.setattr(learned_judge, "loaded_judge", lambda: token_judge(vocab, {1, 4}))
    gen = torch.Generator().manual_seed(3)
    p = torch.stack([flat_dirichlet(vocab, gen) for _ in range(b * k)]).view(b, k, -1).float()
    q = (
        torch.stack([flat_dirichlet(vocab, gen) for _ in range(b * (k + 1))])
        .view(b, k + 1, -1)
        .float()
    )
    q[:, :, 7] = 0.0
    q = q / q.sum(-1, keepdim=True)
    ids = torch.multinomial(p.view(-1, vocab), 1, generator=gen).view(b, k)
    coins = torch.rand(b, k + 1, generator=gen)
    hidden = one_hot_hidden(ids, vocab)
    args = (p, ids, q, coins[:, :k])

    def run(threshold: float):
        rule = make_rule("learned-judge", threshold=threshold)
        return verify(rule, *args, sample_uniforms=coins[:, k], hidden=hidden)

    sps = verify(make_rule("sps"), *args, sample_uniforms=coins[:, k])
    zero = run(0.0)
    assert torch.equal(zero.output_token_ids, sps.output_token_ids)
    torch.testing.assert_close(zero.accept_probs, sps.accept_probs)
    allowed = q[:, :k].gather(-1, ids.unsqueeze(-1)).squeeze(-1) > 0  # [B, k]
    everything = run(1.0)
    assert torch.equal(everything.num_accepted, allowed.long().cumprod(-1).sum(-1))
    some = run(0.5)  # keeps what sps keeps and the mismatches of tokens 1 and 4
    passed = (coins[:, :k] < sps.accept_probs) | (((ids == 1) | (ids == 4)) & allowed)
    assert torch.equal(some.num_accepted, passed.long().cumprod(-1).sum(-1))
    assert bool((some.num_accepted >= sps.num_accepted).all())


def test_it_refuses_rows_alone_another_verifier_replay_and_trees(tiny_pair) -> None:
    rule = make_rule("learned-judge")
    p = torch.full((1, 2, 4), 0.25)
    with pytest.raises(ValueError, match="hidden states"):
        verify(rule, p, torch.zeros(1, 2, dtype=torch.long), torch.full((1, 3, 4), 0.25))
    with pytest.raises(ValueError, match=r"size 576.*size 64"):
        SpeculativeDecoder(tiny_pair, rule, k=3)
    out = SpeculativeDecoder(tiny_pair, "sps", k=3).generate("Hi", max_new_tokens=6, seed=0)
    with pytest.raises(ValueError, match="a trace does not keep"):
        reverify(out.trace, rule)
    rows = torch.full((1, 3, 4), 0.25)
    with pytest.raises(ValueError, match="cannot judge a tree"):
        verify_tree_batch(rule, torch.zeros(1, 2, dtype=torch.long), [0, 0], rows, rows)


def test_cactus_learned_judge_names_another_judge_and_keys_the_sweep_cache(
    tiny_pair, tmp_path, monkeypatch
) -> None:
    """A judge file saved for the tiny pair runs it; another file (or a retrained one) gives
    learned-judge chunks new cache keys and leaves other rules' keys alone; a damaged file is
    a ValueError naming it."""
    config = SweepConfig(
        prompts=("Tell me about cacti.",),
        settings=tuple(settings_from_grids({"sps": [], "learned-judge": [0.5]})),
        max_new_tokens=8,
    )

    def keys() -> dict[str, str]:
        return {t.setting.rule: str(t.payload) for t in plan_chunks(tiny_pair.identity, config)}

    shipped = keys()
    size = tiny_pair.verifier.config.hidden_size
    for seed in (0, 1):
        weights = torch.randn(2 * size, generator=torch.Generator().manual_seed(seed))
        Judge(weights, 0.0, "tiny").save(tmp_path / f"judge{seed}.json", report={"auc": 0.5})
    monkeypatch.setenv(JUDGE_ENV, str(tmp_path / "judge0.json"))
    out = SpeculativeDecoder(tiny_pair, make_rule("learned-judge"), k=3).generate(
        "Hi", max_new_tokens=6, seed=0
    )
    assert len(out.token_ids) == 6
    first = keys()
    monkeypatch.setenv(JUDGE_ENV, str(tmp_path / "judge1.json"))
    second = keys()
    assert len({shipped["learned-judge"], first["learned-judge"], second["learned-judge"]}) == 3
    assert shipped["sps"] == first["sps"] == second["sps"]

    (tmp_path / "judge1.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"judge1\.json"):
        SpeculativeDecoder(tiny_pair, make_rule("learned-judge"), k=3)


def test_the_shipped_judge_reads_the_embedded_verifier() -> None:
    judge = loaded_judge()
    assert judge.hidden_size == 576 and "SmolLM2-135M-Instruct" in judge.verifier
    assert bool(torch.isfinite(judge.weights).all())


@pytest.mark.usefixtures("tiny_judge")
def test_the_decoder_hands_the_judge_its_hidden_states(tiny_pair) -> None:
    """The lazy head and the full pass give the judge the same hidden states: the same tokens;
    and the judge keeps drafts sps rejected (a coin above sps's chance, kept)."""
    rule = make_rule("learned-judge", threshold=0.5)
    outs = [
        SpeculativeDecoder(tiny_pair, rule, k=3, lazy_head=lazy).generate(
            "Tell me about cacti.", max_new_tokens=40, seed=2
        )
        for lazy in (True, False)
    ]
    assert outs[0].token_ids == outs[1].token_ids
    # its pi is no position's: the decode measures no KL for it (a sweep estimates one)
    assert all(o.stats.mean_emitted_kl is None for o in outs)
    assert live_stats(outs[1].trace.rounds, 1.0, kl_exact=False).emitted_kl is None
    overridden = sum(
        1
        for rnd in outs[1].trace.rounds
        for i, fate in enumerate(rnd.verdict.fates)
        if fate == "accepted" and rnd.verdict.coins[i] >= rnd.verdict.accept_probs[i]
    )
    assert overridden > 0


@pytest.mark.usefixtures("tiny_judge")
def test_a_learned_judge_sweep_marks_its_pi_estimated(tiny_pair) -> None:
    grids = {"sps": [], "learned-judge": [1.0]}
    config = SweepConfig(
        prompts=("Tell me about cacti.", "Explain rainbows."),
        settings=tuple(settings_from_grids(grids)),
        max_new_tokens=24,
        chunk_size=2,
    )
    rows = {r["setting"]: r for r in run_sweep(tiny_pair, config, None).rows()}
    judged = rows["learned-judge:threshold=1"]
    assert judged["estimated"] and judged["override_trials"] > 0
    assert judged["omega"] == 1.0  # threshold 1 keeps every mismatch q allows
    assert judged["emitted_kl_lo"] <= judged["emitted_kl"] <= judged["emitted_kl_hi"]
    assert judged["tokens_per_call"] > rows["sps"]["tokens_per_call"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[1, 2, 3]", "is not a learned judge"),
        ("{not json", "cannot be read as JSON"),
        ("[" * 5000 + "]" * 5000, "cannot be read as JSON"),
        (
            '{"format": "cactus-learned-judge", "hidden_size": 2, "weights": [NaN, 0, 0, 0], '
            '"bias": 0}',
            "must be finite",
        ),
        (
            '{"format": "cactus-learned-judge", "hidden_size": 2, "weights": [0, 0, 0, 0], '
            '"bias": -Infinity}',
            "must be finite",
        ),
        (
            '{"format": "cactus-learned-judge", "hidden_size": 2, "weights": [0, 0, 0], "bias": 0}',
            "2 × hidden_size = 4",
        ),
        (
            '{"format": "cactus-learned-judge", "hidden_size": "2", "weights": [], "bias": 0}',
            "positive integer",
        ),
    ],
    ids=["list", "not-json", "deep", "nan-weight", "minus-inf-bias", "short", "size-text"],
)
def test_a_bad_judge_file_is_one_clear_error_without_its_folder(
    content: str, words: str, tmp_path, monkeypatch
) -> None:
    """A judge file that is not one is refused with a ValueError that names the file but not
    the server's folders: a JSON list once crashed to Streamlit's error page, NaN weights
    acted as sps without a word and a bias of −inf kept every draft."""
    path = tmp_path / "secret-folder" / "judge.json"
    path.parent.mkdir()
    path.write_text(content)
    monkeypatch.setenv(JUDGE_ENV, str(path))
    with pytest.raises(ValueError, match=words) as err:
        loaded_judge()
    assert "secret-folder" not in str(err.value) and "judge.json" in str(err.value)
    missing = tmp_path / "secret-folder" / "gone.json"
    monkeypatch.setenv(JUDGE_ENV, str(missing))
    with pytest.raises(ValueError, match=r"gone\.json") as err:
        loaded_judge()
    assert "secret-folder" not in str(err.value)
