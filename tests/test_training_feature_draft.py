"""Training-side pieces of the feature draft: the multi-depth draft's data
(`training.gen_features.layer_pass`: the outputs of earlier verifier layers, the forward
stopped after the deepest; `make_batch`'s wide input: those layers, then the top feature, the
layout the decoder's `FeatureCache` captures) and `evaluate`'s Cactus acceptance
(`--cactus-delta`)."""

from __future__ import annotations

import torch

from cactus_core.engine.loading.feature_draft import FeatureDraft
from tests.conftest import tiny_llama
from training.gen_features import layer_pass
from training.train_feature_draft import evaluate, make_batch


def _outputs(model, ids: list[int]) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(
            lambda m, a, out: seen.append(out[0] if isinstance(out, tuple) else out)
        )
        for layer in model.model.layers
    ]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    return [s[0] for s in seen]  # per layer [T, D]


def test_layer_pass_gives_the_layers_outputs_and_stops_after_the_deepest():
    model = tiny_llama(vocab=96, layers=4, seed=3)
    record = {"prompt_ids": [5, 9, 11, 20], "answer_ids": [31, 7, 2]}
    ids = record["prompt_ids"] + record["answer_ids"]
    want = _outputs(model, ids[:-1])
    ran = []
    hook = model.model.layers[3].register_forward_hook(lambda *a: ran.append(True))
    try:
        got = layer_pass(model, record, [0, 2])
    finally:
        hook.remove()
    assert got.dtype == torch.float16 and got.shape == (len(ids) - 1, 2 * 64)
    torch.testing.assert_close(got, torch.cat([want[0], want[2]], -1).half())
    assert not ran  # layer 3 never ran


def test_make_batch_puts_the_layers_before_the_top_feature():
    d, extra = 8, 16
    recs = []
    for n_p, n_a in ((3, 4), (2, 6)):
        m = n_p + n_a - 1
        recs.append(
            {
                "prompt_ids": list(range(1, n_p + 1)),
                "answer_ids": list(range(10, 10 + n_a)),
                "features": torch.randn(m, d).half(),
                "layer_features": torch.randn(m, extra).half(),
                "top_values": torch.randn(n_a, 4).half(),
                "top_indices": torch.randint(0, 50, (n_a, 4)).int(),
            }
        )
    narrow, wide = make_batch(recs, depth=2), make_batch(recs, depth=2, layer_features=True)
    assert wide["feats"].shape == (2, 7, extra + d)
    torch.testing.assert_close(wide["feats"][..., extra:], narrow["feats"])
    for b, r in enumerate(recs):
        m = r["features"].shape[0]
        torch.testing.assert_close(wide["feats"][b, :m, :extra], r["layer_features"].float())
    # Targets stay the top feature only: what the draft's predictions are regressed on.
    torch.testing.assert_close(wide["tfeat"], narrow["tfeat"])


def test_cactus_acceptance_at_delta_0_is_the_lossless_one_and_grows_with_delta():
    verifier = tiny_llama(vocab=96, layers=2, seed=5)
    draft = FeatureDraft.tiny_for(verifier, seed=2, feature_layers=[0]).eval()
    gen = torch.Generator().manual_seed(0)
    recs = []
    for n_p, n_a in ((3, 7), (4, 9), (2, 6)):
        m = n_p + n_a - 1
        vals, idx = torch.randn(n_a, 96, generator=gen).mul(3).topk(16, dim=-1)
        recs.append(
            {
                "prompt_ids": torch.randint(3, 96, (n_p,), generator=gen).tolist(),
                "answer_ids": torch.randint(3, 96, (n_a,), generator=gen).tolist(),
                "features": torch.randn(m, 64, generator=gen).half(),
                "layer_features": torch.randn(m, 64, generator=gen).half(),
                "top_values": vals.half(),
                "top_indices": idx.int(),
            }
        )
    lookup = torch.arange(96)
    with torch.no_grad():
        lossless = evaluate(draft, recs, 3, lookup, 0.7)["1.0"]["per_step"]
        at = {
            d: evaluate(draft, recs, 3, lookup, 0.7, cactus_delta=d)["cactus"]["per_step"]
            for d in (0.0, 0.3, 1.0)
        }
    for a, b in zip(at[0.0], lossless, strict=True):
        assert abs(a - b) < 1e-5
    for low, high in zip(at[0.3], at[1.0], strict=True):
        assert 0 < low < high <= 1
    assert all(a < b for a, b in zip(at[0.0], at[0.3], strict=True))


def test_layers_recorded_while_generating_equal_a_second_pass():
    """gen_features --add-layers without --convert: the hooks on the generating forwards give
    each record the same layer outputs as `layer_pass` over its prompt and answer."""
    from types import SimpleNamespace

    from tests.conftest import tiny_tokenizer
    from training.gen_features import generate_shard

    tok = tiny_tokenizer()
    tok.padding_side = "left"
    model = tiny_llama(vocab=len(tok), layers=4, seed=5).eval()
    args = SimpleNamespace(top_k=16, temperature=0.7, top_p=1.0, max_new=6, layers=[1, 2])
    records = generate_shard(model, tok, ["hi there", "a much longer prompt"], args, seed=3)
    for r in records:
        assert r["feature_layers"] == [1, 2]
        want = layer_pass(model, r, [1, 2])
        assert r["layer_features"].shape == want.shape == (r["features"].shape[0], 2 * 64)
        assert torch.allclose(r["layer_features"].float(), want.float(), atol=2e-2)


def test_a_resumed_run_state_holds_where_the_run_stood(tmp_path):
    import random
    from types import SimpleNamespace

    from training.train_feature_draft import RunState, lr_scale

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    run = RunState(tmp_path)
    rng = random.Random(7)
    run.step, run.epoch, run.batch_index, run.epoch_rng, run.best = 12, 1, 4, rng.getstate(), 2.5
    run.log.append({"step": 12})
    run.save(opt)
    saved = torch.load(tmp_path / "state.pt", weights_only=False)
    assert (saved["step"], saved["epoch"], saved["batch_index"], saved["best"]) == (12, 1, 4, 2.5)
    again = random.Random()
    again.setstate(saved["epoch_rng"])
    assert again.random() == rng.random()  # the epoch's order is drawn again the same way
    assert saved["optimiser"]["state"]  # Adam's moments travel with it
    args = SimpleNamespace(resume=True, steps=0, out=tmp_path)
    try:
        RunState.start(args, None, opt, None, rng)
        raise AssertionError("a resume without a step budget must be refused")
    except SystemExit as err:
        assert "--steps" in str(err)
    assert lr_scale(0, 0.0, 10) == 0.1 and lr_scale(20, 0.0, 10) == 1.0
    assert lr_scale(20, 1.0, 10) == 0.1
