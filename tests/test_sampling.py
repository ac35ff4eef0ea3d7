"""logits_to_probs (temperature, top-k, top-p) and inverse-CDF sampling."""

from __future__ import annotations

import pytest
import torch

from cactus_core.sampling import logits_to_probs, sample_from_probs


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
