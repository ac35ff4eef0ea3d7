"""logits_to_probs (temperature, top-k, top-p) and inverse-CDF sampling."""

from __future__ import annotations

import pytest
import torch

from cactus_core.maths.sampling import logits_to_probs, sample_from_probs


def test_temperature_zero_is_one_hot_argmax() -> None:
    logits = torch.tensor([[1.0, 3.0, 3.0, -1.0], [0.0, -2.0, 5.0, 1.0]])
    probs = logits_to_probs(logits, temperature=0.0, top_k=2, top_p=0.5)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]


def test_temperature_scales_logits() -> None:
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(logits_to_probs(logits, 0.5), torch.softmax(logits / 0.5, -1))


def test_top_k_and_top_p() -> None:
    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    top2 = logits_to_probs(logits, top_k=2)
    torch.testing.assert_close(top2, torch.tensor([5 / 7, 2 / 7, 0, 0, 0]))
    nucleus = logits_to_probs(logits, top_p=0.8)  # 0.5 + 0.2 < 0.8 ≤ 0.85: three tokens
    torch.testing.assert_close(nucleus, torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85)
    assert logits_to_probs(logits, top_p=0.01).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert logits_to_probs(logits.bfloat16()).dtype == torch.float32
    assert torch.allclose(logits_to_probs(logits, top_k=0, top_p=1.0).sum(), torch.tensor(1.0))


def _nucleus_by_full_sort(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, -1)
    sorted_p, order = probs.sort(-1, descending=True)
    drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
    drop[..., 0] = False
    probs = probs.masked_fill(torch.zeros_like(drop).scatter_(-1, order, drop), 0.0)
    return probs / probs.sum(-1, keepdim=True)


@pytest.mark.parametrize("vocab", [5, 64, 65, 49_152])
def test_top_p_fast_path_equals_the_full_sort(vocab: int) -> None:
    """The nucleus is found among the top 64 when they hold it, by a full sort otherwise;
    peaked and flat rows (both paths) in one batch give exactly the definition's result."""
    gen = torch.Generator().manual_seed(vocab)
    scales = torch.tensor([0.05, 0.5, 3.0, 12.0])[:, None, None]  # flat ... peaked rows
    logits = torch.randn(4, 3, vocab, generator=gen) * scales
    for top_p in (0.3, 0.9, 0.95, 0.999):
        fast = logits_to_probs(logits, temperature=0.7, top_p=top_p)
        assert torch.equal(fast, _nucleus_by_full_sort(logits, 0.7, top_p))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_bad_sampling_settings_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        logits_to_probs(torch.zeros(4), **kwargs)


def test_sample_from_probs_inverse_cdf() -> None:
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0]]).expand(5, 5)
    u = torch.tensor([0.0, 0.2499, 0.25, 0.9999999, 1.0 - 2**-24])
    assert sample_from_probs(probs, u).tolist() == [1, 1, 3, 3, 3]
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(200_000, generator=gen)
    ids = sample_from_probs(torch.tensor([0.1, 0.0, 0.6, 0.3]).expand(200_000, 4), u)
    freq = torch.bincount(ids, minlength=4).double() / 200_000
    torch.testing.assert_close(
        freq, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64), atol=5e-3, rtol=0
    )
    # unnormalised weights work too
    assert sample_from_probs(torch.tensor([0.0, 2.0, 2.0]), torch.tensor(0.6)).item() == 2
