"""Token-exact comparisons that hold on any CPU.

The same logits computed by two kernels (a KV-cached verify pass of k + 1 columns and a plain
full forward; one CPU's vector kernels and another's) differ in their last bits. In float32 on
the embedded verifier, whose top logit is about 27, both differences reach 1e-4 (2.4e-6 of the
top logit: a 5-column cached step against a full forward, and torch's AVX2 kernels against its
default ones). Where two tokens sit that close, which one comes out is the rounding's choice,
and every token after it follows from that choice. So two token sequences are compared token
for token up to their first difference, and a difference is allowed only where a near-tie is
measured there:

- greedy (`assert_greedy_agrees`): both tokens are within `FLOAT32_TIE` (relative, 40 times
  that difference) of the top logit of a plain forward over the common prefix;
- sampled (`assert_sampled_agrees`): the decode is that sensitive there. It is rerun with every
  weight moved by a relative `NUDGE` (1e-5: several times the kernels' difference), one way and
  the opposite way, in a few random directions, and some rerun must change a token at or before
  the difference. A decision that rounding decides flips under one of the two ways; a changed
  decoder differs where no nudge reaches (in tests/test_golden.py's cases about 1 rerun of 36
  changes anything at all).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence

import torch

FLOAT32_TIE = 1e-4  # relative to the top logit
NUDGE = 1e-5  # relative, on every weight
NUDGE_DIRECTIONS = 3  # random directions, each tried both ways


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where a and b differ (one ending before the other counts), or None."""
    for j, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def float32_tie(top: float) -> float:
    """How far below the top logit `top` a float32 near-tie reaches."""
    return FLOAT32_TIE * max(1.0, abs(top))


def assert_greedy_agrees(
    got: Sequence[int],
    want: Sequence[int],
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    eos_ids: set[int] = frozenset(),
    tie: Callable[[float], float] = float32_tie,
) -> None:
    """got == want, or they agree up to a first difference where both tokens (EOS for a
    sequence that stopped there) are within tie(top) of the top logit of a plain forward of
    `model` over the prompt and the common prefix."""
    first = first_difference(got, want)
    if first is None:
        return
    with torch.inference_mode():
        ids = torch.tensor([[*prompt_ids, *want[:first]]], device=model.device)
        logits = model(input_ids=ids).logits[0, -1].float()
    top = float(logits.max())
    gap = tie(top)
    for seq in (got, want):
        tokens = [seq[first]] if first < len(seq) else sorted(eos_ids)
        near = [t for t in tokens if top - float(logits[t]) <= gap]
        assert near, (
            f"differs at token {first} where no tie is near: {list(got)} against {list(want)}; "
            f"top logit {top:.6g}, {tokens} at {[float(logits[t]) for t in tokens]}"
        )


def nudged(model: torch.nn.Module, direction: int, sign: float) -> torch.nn.Module:
    """A copy of `model` whose every floating weight w is w · (1 + sign · NUDGE · z), z drawn
    from N(0, 1) with the seed `direction`."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(direction)
    with torch.no_grad():
        for w in out.parameters():
            if w.is_floating_point():
                z = torch.randn(w.shape, generator=gen).to(w.dtype)
                w.mul_(1 + sign * NUDGE * z)
    return out


def nudges() -> Iterator[tuple[int, float]]:
    """(direction, sign) of each rerun."""
    for direction in range(NUDGE_DIRECTIONS):
        for sign in (1.0, -1.0):
            yield direction, sign


def assert_sampled_agrees(
    got: Sequence[int], want: Sequence[int], rerun: Callable[[int, float], Sequence[int]]
) -> None:
    """got == want, or they agree up to a first difference that a nudge of the weights
    reaches: `rerun(direction, sign)` decodes the same case on the nudged weights (`nudged`)."""
    first = first_difference(got, want)
    if first is None:
        return
    reached = []
    for direction, sign in nudges():
        moved = first_difference(rerun(direction, sign), got)
        reached.append(moved)
        if moved is not None and moved <= first:
            return
    raise AssertionError(
        f"differs at token {first}, where no nudge of the weights changes the decode (the "
        f"nudged reruns first differ at {reached}): {list(got)} against {list(want)}"
    )
