"""A model with NaN weights fails on its first round with one clear error, instead of decoding
the last token id forever with KL 0: each round checks that p and q are finite (one sum per row,
read back with the round's other numbers), and the CLI says so in one sentence."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from cactus_core.cli import main
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.host import NonFiniteProbabilities
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft


def _poisoned(model: torch.nn.Module) -> torch.nn.Module:
    broken = copy.deepcopy(model)
    with torch.no_grad():
        next(p for n, p in broken.named_parameters() if "layers.0" in n).fill_(float("nan"))
    return broken


@pytest.mark.parametrize("lazy", [True, False])
def test_a_nan_verifier_fails_on_the_first_round(tiny_pair, lazy):
    pair = dataclasses.replace(tiny_pair, verifier=_poisoned(tiny_pair.verifier))
    dec = SpeculativeDecoder(pair, "cactus", lazy_head=lazy, record_trace=False)
    with pytest.raises(NonFiniteProbabilities, match="verifier's q holds NaN"):
        dec.generate("hello", max_new_tokens=16, seed=0)
    with pytest.raises(ValueError, match="verifier's q holds NaN"):
        dec.generate_autoregressive("hello", max_new_tokens=4, seed=0)


def test_a_nan_draft_fails_on_the_first_round(tiny_pair):
    pair = dataclasses.replace(tiny_pair, draft=_poisoned(tiny_pair.draft))
    with pytest.raises(NonFiniteProbabilities, match="draft's p holds NaN"):
        SpeculativeDecoder(pair, "sps").generate("hello", max_new_tokens=16, seed=0)


def test_a_nan_feature_draft_fails_on_the_first_round(tiny_pair):
    draft = FeatureDraft.tiny_for(tiny_pair.verifier)
    with torch.no_grad():
        next(iter(draft.parameters())).fill_(float("nan"))
    pair = with_feature_draft(tiny_pair, draft)
    with pytest.raises(NonFiniteProbabilities, match="draft's p holds NaN"):
        SpeculativeDecoder(pair, "cactus").generate("hello", max_new_tokens=16, seed=0)


def test_the_cli_says_so_in_one_sentence(tiny_pair, tmp_path, capsys):
    verifier, draft = tmp_path / "verifier", tmp_path / "draft"
    _poisoned(tiny_pair.verifier).save_pretrained(verifier)
    tiny_pair.draft.save_pretrained(draft)
    for folder in (verifier, draft):
        tiny_pair.tokenizer.save_pretrained(folder)
    capsys.readouterr()  # the saving's progress bars
    argv = ["generate", "hello", "--verifier", str(verifier), "--draft", str(draft)]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--max-new-tokens", "8", "--quiet"])
    assert exit_.value.code != 0
    out = capsys.readouterr().err
    assert "Traceback" not in out
    err = out.strip().splitlines()[-1]  # after the loading's progress bars
    assert err.startswith("error: the verifier's q holds NaN")
