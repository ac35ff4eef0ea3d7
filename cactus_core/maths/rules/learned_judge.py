"""A learned judge (AutoJudge, Garipov et al., arXiv 2504.20039; code garipovroma/autojudge):
a small classifier on the verifier's hidden states decides whether a mismatch matters.

The lab keeps sps's coin, as for FLy: a draft that passes u_i < min(1, q_i(n_i) / p_i(n_i)) is
kept; one that fails (a mismatch) is kept anyway when the judge predicts it does not change
the answer, P(important) < threshold, and q allows it (q_n > 0). The round keeps its drafts up
to the first one still rejected, and then emits sps's recovered token there (a draw from
normalise((q − p)+)), or the bonus after a fully kept draft (`override.kept_round`).

The judge (`cactus_core/assets/judge`, trained by `training/mine_judge.py` and
`training/train_judge.py`, its model card beside it; $CACTUS_LEARNED_JUDGE names another judge
file) is AutoJudge's classifier: a logistic
regression on two of the verifier's final-norm hidden states at draft i, the one that predicted
it (row i of the verify pass, which read the token before it) and the one after reading it
(row i + 1), P(important) = sigmoid(h_i·a + h_(i+1)·b + c). Its labels came from the embedded
pair's greedy answers to task prompts with checkable answers: a mismatch is important when
putting the draft's token in place of the verifier's changes whether the verifier's greedy
continuation answers right.

Where the lab differs from AutoJudge: AutoJudge judges T = 0 mismatches against the verifier's
argmax; here the judge overrides sps's rejections at any temperature (at T = 0 the decoder
verifies by exact match for every rule, so the judge then never runs). The threshold is
AutoJudge's: 0 is sps, 1 keeps every draft q allows.

The judge reads the drafted token's hidden state, which exists for the drafted token only, so
no formula over one position's p and q gives the emitted law: pi is estimated from a decode
(`experiments.estimates.override`). The per-position methods (Playground, exact KL of a
position) are sps's, the law at threshold 0.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from cactus_core.maths.rules.base import Param
from cactus_core.maths.rules.override import kept_round
from cactus_core.maths.rules.sps import SPS

JUDGE_FILE = Path(__file__).resolve().parents[2] / "assets" / "judge" / "judge.json"
JUDGE_FORMAT = "cactus-learned-judge"
JUDGE_ENV = "CACTUS_LEARNED_JUDGE"


@dataclass(frozen=True)
class Judge:
    """P(important) = sigmoid(before·weights[:H] + after·weights[H:] + bias)."""

    weights: torch.Tensor  # [2H] float32
    bias: float
    verifier: str  # the verifier whose hidden states it was trained on

    @property
    def hidden_size(self) -> int:
        return self.weights.shape[0] // 2

    def logit(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logit of P(important) [B, k] of each draft from hidden [B, k+1, H]: row i
        predicted draft i, row i + 1 read it."""
        w = self.weights.to(hidden.device)
        h = hidden.float()
        size = self.hidden_size
        return h[:, :-1] @ w[:size] + h[:, 1:] @ w[size:] + self.bias  # [B, k]

    def important(self, hidden: torch.Tensor) -> torch.Tensor:
        """P(important) [B, k] (see `logit`)."""
        return torch.sigmoid(self.logit(hidden))

    def save(self, path: Path, **extra: object) -> None:
        """Write the judge as `from_file` reads it; `extra` (a training report) rides along."""
        data = {
            "format": JUDGE_FORMAT,
            "verifier": self.verifier,
            "features": "the verifier's final-norm hidden state at the position that predicted "
            "the drafted token, then after reading it",
            "hidden_size": self.hidden_size,
            "weights": [round(v, 7) for v in self.weights.tolist()],
            "bias": self.bias,
            **extra,
        }
        path.write_text(json.dumps(data))

    @classmethod
    def from_file(cls, path: Path) -> Judge:
        """The judge `save` wrote; ValueError (naming the file, not its folder) for anything
        else: not JSON, not an object, weights of the wrong size, or a weight or bias that is
        not finite (NaN would act as sps without a word, −inf keep every draft)."""
        name = path.name
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            raise ValueError(f"{name} cannot be read as JSON ({type(err).__name__})") from None
        if not isinstance(data, dict) or data.get("format") != JUDGE_FORMAT:
            raise ValueError(f"{name} is not a learned judge (no format {JUDGE_FORMAT!r})")
        size, weights, bias = data.get("hidden_size"), data.get("weights"), data.get("bias")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= 1 << 16:
            raise ValueError(f"{name}: hidden_size must be a positive integer")
        if not isinstance(weights, list) or len(weights) != 2 * size:
            raise ValueError(f"{name}: weights must be 2 × hidden_size = {2 * size} numbers")
        if not all(isinstance(w, int | float) and not isinstance(w, bool) for w in weights):
            raise ValueError(f"{name}: weights must be 2 × hidden_size = {2 * size} numbers")
        if not isinstance(bias, int | float) or isinstance(bias, bool):
            raise ValueError(f"{name}: bias must be a number")
        tensor = torch.tensor(weights, dtype=torch.float32)
        if not (torch.isfinite(tensor).all() and math.isfinite(bias)):
            raise ValueError(f"{name}: every weight and the bias must be finite")
        return cls(tensor, float(bias), str(data.get("verifier", "")))


def judge_file() -> Path:
    """The judge file in use: $CACTUS_LEARNED_JUDGE (a judge.json that `training/train_judge.py`
    wrote for another pair), else the shipped one, trained for the embedded pair."""
    named = os.environ.get(JUDGE_ENV)
    return Path(named) if named else JUDGE_FILE


@functools.lru_cache(maxsize=4)
def _read(path: Path, stamp: int) -> tuple[Judge, str]:
    # stamp (the file's mtime) is in the key so that a judge retrained in place is read again
    raw = path.read_bytes()
    return Judge.from_file(path), hashlib.sha256(raw).hexdigest()


def _judge_and_digest() -> tuple[Judge, str]:
    path = judge_file()
    try:
        return _read(path, path.stat().st_mtime_ns)
    except OSError as err:  # the message names the file, never the server's folders
        raise ValueError(f"cannot read the learned judge {path.name}: {err.strerror}") from None
    except ValueError as err:
        raise ValueError(f"cannot use the learned judge: {err}") from None


def loaded_judge() -> Judge:
    """The judge of `judge_file()`; ValueError naming the file if it cannot be read."""
    return _judge_and_digest()[0]


def _logit(t: float) -> float:
    if t <= 0.0:
        return -math.inf
    if t >= 1.0:
        return math.inf
    return math.log(t) - math.log1p(-t)


class LearnedJudge(SPS):
    """AutoJudge's learned judge: an sps mismatch is kept where a classifier on the verifier's
    hidden states predicts it does not change the answer (module docstring)."""

    name = "learned-judge"
    card = replace(
        SPS.card,
        family="deferral",
        colour="#DCD300",
        shown_first=False,
        description=(
            "AutoJudge: an sps mismatch is kept where a classifier on the verifier's hidden states "
            "gives P(important) < threshold"
        ),
        round_in_words=(
            "the round also keeps a draft whose coin fails where the learned judge predicts it "
            "does not change the answer, and stops at the first other failure"
        ),
        in_words=(
            "Checks each draft like sps, but keeps a rejected one when a small classifier, trained "
            "on the verifier's hidden states, predicts the mismatch would not change the answer."
        ),
        citation=(
            "Garipov et al., AutoJudge: Judge Decoding Without Manual Annotation (arXiv "
            "2504.20039; code garipovroma/autojudge)"
        ),
        guarantee=(
            "none on the divergence; sps at threshold 0; pi depends on hidden states and is "
            "estimated from a decode"
        ),
    )
    caps = replace(
        SPS.caps,
        lossless=False,
        round_level=True,
        overrides_sps=True,
        reads_hidden=True,
    )
    threshold = Param(
        "threshold",
        "P<",
        default=0.3,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        # from sps (nothing is ever below 0) to keeping every draft q allows
        grid=(0.0, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0),
        help="Keep a rejected draft where the judge's P(important) is below this.",
    )

    def judge_for(self, hidden_size: int) -> Judge:
        """The judge in use (`judge_file`), once it is known to read hidden states of this
        size; ValueError naming the verifier it was trained on otherwise."""
        judge = loaded_judge()
        if judge.hidden_size != hidden_size:
            raise ValueError(
                f"rule {self.name!r}: the judge {judge_file().name} reads the hidden states of "
                f"{judge.verifier} (size {judge.hidden_size}), this verifier's are size "
                f"{hidden_size}: it runs only with a judge trained on this verifier's hidden "
                f"states, named by {JUDGE_ENV} (training/mine_judge.py mines the embedded pair)"
            )
        return judge

    def data_identity(self) -> dict[str, str]:
        # a retrained judge (or another file) changes the numbers, not the code
        return {"judge": _judge_and_digest()[1]}

    def check_hidden(self, hidden_size: int) -> None:
        self.judge_for(hidden_size)

    def could_override(self, q: torch.Tensor, k: int) -> torch.Tensor:
        # every draft of a round may be judged, its last one included
        return torch.ones(q.shape[0], dtype=torch.bool, device=q.device)

    def verify_round(
        self,
        p: torch.Tensor,
        n: torch.Tensor,
        q: torch.Tensor,
        uniforms: torch.Tensor,
        sample_uniforms: torch.Tensor,
        hidden: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(num_accepted [B], sps's a(n_i) [B, k], the token emitted after the kept drafts [B])
        from p [B, k, V], drafts n [B, k], q [B, k+1, V] (work dtype), coins uniforms [B, k],
        sample_uniforms [B] and the verifier's hidden states [B, k+1, H]."""
        if hidden is None:
            raise ValueError(
                f"rule {self.name!r} reads the verifier's hidden states, which only a decoder's "
                "verify pass has (SpeculativeDecoder); it cannot judge rows alone"
            )
        k = p.shape[1]
        d = self.drafted(q[:, :k], p, n)
        a = self.accept(d)  # [B, k]
        passed = uniforms.to(a.dtype) < a
        # compared as logits: a float32 sigmoid rounds to 1 (or 0) far from the boundary, and
        # threshold 1 must keep every draft q allows
        unimportant = self.judge_for(hidden.shape[-1]).logit(hidden) < _logit(self.threshold)
        kept = passed | (unimportant & (d.qn > 0))
        num, last = kept_round(self, p, n, q, d, kept, sample_uniforms)
        return num, a, last
