"""The app's streamlit-free layer: table checks, per-rule tables against the library, trace
views. The numbers a page shows must be the library's numbers."""

from __future__ import annotations

import math
import platform
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cactus_core.app.playground import comparison as P
from cactus_core.app.shared import inspector as INS
from cactus_core.app.shared import metrics as M
from cactus_core.app.shared import positions as S
from cactus_core.app.shared import request as R
from cactus_core.app.shared import round_view as D
from cactus_core.app.shared import settings as A
from cactus_core.app.shared import transcript as T
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.loading.embedded_drafts import native_bfloat16
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution, expected_acceptance
from cactus_core.maths.rules import RULES, make_rule
from cactus_core.maths.sampling import SamplingSettings

WORKED = S.PRESETS[S.WORKED_EXAMPLE]


def test_widgets_start_at_the_rules_defaults_inside_what_make_rule_accepts():
    for name, cls in RULES.items():
        defaults = A.default_params(name)
        assert defaults == {p.name: p.default for p in cls.params_spec}
        assert cls() == make_rule(name)
        for p in cls.params_spec:
            assert p.low <= p.ui[0] <= p.default <= p.ui[1] <= p.high
            make_rule(name, **{p.name: A.param_value(p, p.ui[0])})
            make_rule(name, **{p.name: A.param_value(p, p.ui[1])})
    # widgets hand back floats; integer parameters get integers
    assert RULES["topk"](k_top=7.0).params["k_top"] == 7
    assert isinstance(RULES["topk"](k_top=7.0).params["k_top"], int)


def test_playground_offers_every_parameter_of_every_rule_once():
    groups = P.playground_params()
    seen = sorted((r, g.param.name) for g in groups for r in g.rules)
    assert seen == sorted((n, p.name) for n, c in RULES.items() for p in c.params_spec)
    assert len({g.key for g in groups}) == len(groups)
    # rules declaring the same parameter share one widget; different ones with one name don't
    shared = {g.key: g.rules for g in groups}
    assert shared["delta"] == ("cactus", "cactus-exact", "cactus-adaptive")
    assert {"tas_alpha", "interp_alpha", "cascade_alpha"} <= set(shared)
    assert P.playground_rules() == [make_rule(n) for n in RULES]
    assert P.headline_group().key == "delta"


def test_the_worked_example_carries_its_own_delta():
    group = P.headline_group()
    assert group.start(WORKED) == 0.21
    other = S.PRESETS["Flat verifier, peaky draft"]
    assert group.start(other) == group.param.default


def test_worked_example_matches_the_design_notes():
    rows = {r.name: r for r in P.compare_rules(WORKED, P.playground_rules(WORKED.params))}
    assert rows["sps"].accept_drafted == pytest.approx(0.4375, abs=1e-6)
    cactus = rows["cactus"]
    assert cactus.accept_drafted == pytest.approx(0.824, abs=1e-3)
    assert cactus.kl_h_q == pytest.approx(0.197, abs=1e-3)
    assert cactus.h.tolist() == pytest.approx([0.157, 0.659, 0.184], abs=1e-3)


@pytest.mark.parametrize("delta", [0.0, 0.21, 1.0])
def test_compare_rules_equals_the_library(delta):
    g = torch.Generator().manual_seed(3)
    q = torch.softmax(torch.randn(40, generator=g) * 2, -1)
    p = torch.softmax(torch.randn(40, generator=g) * 2, -1)
    pos = S.Position(tuple(f"t{i}" for i in range(40)), p, q, drafted=int(p.argmax()))
    rules = P.playground_rules({"delta": delta, "budget": 0.1})
    for rule, row in zip(rules, P.compare_rules(pos, rules), strict=True):
        n = torch.tensor(pos.drafted)
        assert row.expected_acceptance == pytest.approx(
            float(expected_acceptance(rule, p, q)), abs=1e-6
        )
        assert row.accept_drafted == pytest.approx(float(rule.accept_probs(q, p, n)), abs=1e-6)
        pi = emitted_distribution(rule, p, q)
        assert torch.allclose(row.pi, pi)
        assert row.kl_pi_q == pytest.approx(float(kl(pi, q)), abs=1e-6)
        assert row.kl_h_q == pytest.approx(float(kl(rule.adjusted_target(q, p, n), q)), abs=1e-6)


def test_position_equality_follows_content():
    a = S.Position(("x", "y"), torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.8]), 0)
    b = S.Position(("x", "y"), torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.8]), 0)
    c = S.with_drafted(a, 1)
    assert a == b and hash(a) == hash(b)
    assert a != c


def test_taylor_gap_on_the_lump_equals_the_full_vocabulary():
    g = torch.Generator().manual_seed(0)
    q = torch.softmax(torch.randn(500, generator=g) * 3, -1)
    p = torch.softmax(torch.randn(500, generator=g) * 3, -1)
    n = int(q.argmax())  # a large q_n, where the closed form overshoots
    pos = S.Position(tuple(map(str, range(500))), p, q, drafted=n)
    gap = P.taylor_gap(pos, 0.8)
    for name, h_now, kl_now in (
        ("cactus", gap.h_taylor, gap.kl_taylor_now),
        ("cactus-exact", gap.h_exact, gap.kl_exact_now),
    ):
        h = make_rule(name, delta=0.8).adjusted_target(q, p, torch.tensor(n))
        assert h_now == pytest.approx(float(h[n]), abs=1e-5)
        assert kl_now == pytest.approx(float(kl(h, q)), abs=1e-5)
    # the exact root meets delta, or reaches h_n = 1 first (KL = −log q_n)
    assert gap.kl_exact_now == pytest.approx(min(0.8, -math.log(float(q[n]))), abs=1e-4)
    assert all(e <= d + 1e-6 for d, e in zip(gap.deltas, gap.kl_exact, strict=True))


def test_truncation_warning_only_when_q_n_is_zero():
    nucleus = S.PRESETS["Outside the verifier's nucleus (top-p)"]
    assert "no mass" in S.truncation_warning(nucleus)
    assert S.truncation_warning(WORKED) is None
    # and indeed no delta rescues it
    for rule in P.playground_rules({"delta": 3.0}):
        if rule.name.startswith("cactus") or rule.name == "sps":
            row = P.compare_rules(nucleus, [rule])[0]
            assert row.accept_drafted == 0.0


@pytest.mark.parametrize(
    ("p", "message"),
    [
        ([-0.1, 0.6, 0.5], "negative"),
        ([0.0, 0.0, 0.0], "all zeros"),
        ([float("nan"), 0.5, 0.5], "NaN"),
        ([None, 0.5, 0.5], "empty"),
        (["a", 0.5, 0.5], "numbers"),
    ],
)
def test_parse_table_rejects_bad_columns(p, message):
    with pytest.raises(ValueError, match=message):
        S.parse_table(["a", "b", "c"], p, [0.3, 0.3, 0.4])


def test_parse_table_rejects_bad_tokens():
    with pytest.raises(ValueError, match="at least two"):
        S.parse_table(["a"], [1.0], [1.0])
    with pytest.raises(ValueError, match="distinct"):
        S.parse_table(["a", "a"], [0.5, 0.5], [0.5, 0.5])
    with pytest.raises(ValueError, match="token name"):
        S.parse_table(["a", None], [0.5, 0.5], [0.5, 0.5])


def test_parse_table_normalises_and_says_so():
    pos = S.parse_table(["a", "b"], [1, 3], [0.5, 0.5])
    assert pos.p.tolist() == pytest.approx([0.25, 0.75])
    assert pos.notices == ("p summed to 4; normalised to 1.",)


def test_speed_comparison_says_plainly_when_slower():
    from cactus_core.experiments.estimates.speedup import Spread

    slow = M.SpeedComparison(5.0, 10.0, 2.0, 4)
    assert slow.speedup == 0.5
    assert slow.verdict().startswith("Speculation is slower here: 0.50×")
    assert M.SpeedComparison(20.0, 10.0, 2.0, 4).verdict().startswith("Speculation is faster")
    # a spread that holds 1× is no verdict either way
    even = M.SpeedComparison(10.5, 10.0, 2.0, 4, Spread(0.9, 1.2, 5))
    assert even.verdict().startswith("Neither is clearly faster here: 1.05×")
    assert "0.90–1.20× over 5 stretches" in even.verdict()


def test_settings_validation():
    s = A.AppSettings()
    # The feature draft, in this CPU's faster dtype
    want = "bfloat16" if native_bfloat16() else "float32"
    assert s.pair_label == f"embedded pair (feature draft, {want})"
    assert s.sampling == SamplingSettings()
    assert s.decoder_kwargs() == {"k": 4, "temperature": 0.7, "top_k": 0, "top_p": 1.0}
    with pytest.raises(ValueError, match="draft needs a verifier"):
        A.AppSettings(draft="x")
    with pytest.raises(ValueError, match="SamplingSettings"):
        A.AppSettings(sampling={"top_p": 0.5})
    with pytest.raises(ValueError, match="top_p"):  # SamplingSettings checks its own fields
        A.AppSettings(sampling=SamplingSettings(top_p=0.0))


def test_the_embedded_draft_is_part_of_the_pair_and_loads_its_dtype(monkeypatch):
    from cactus_core.engine.loading import models
    from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS, FEATURE_DRAFT_DIR
    from pages.shared import pair as pair_page

    fast, other, plain = (
        A.AppSettings(embedded_draft=d.label, device="cpu") for d in EMBEDDED_DRAFTS
    )
    assert fast == A.AppSettings(device="cpu")  # the feature draft is the default
    assert len({fast.pair_key, other.pair_key, plain.pair_key}) == 3  # three loaded pairs
    fast_dtype, other_dtype = ("bfloat16", "float32")[:: 1 if native_bfloat16() else -1]
    assert fast.pair_label == f"embedded pair (feature draft, {fast_dtype})"
    assert other.pair_label == f"embedded pair (feature draft, {other_dtype})"
    # A typed pair does not depend on the embedded choice.
    typed = [
        A.AppSettings(verifier="v", embedded_draft=d.label, device="cpu") for d in EMBEDDED_DRAFTS
    ]
    assert typed[0].pair_key == typed[1].pair_key
    with pytest.raises(ValueError, match="unknown embedded draft"):
        A.AppSettings(embedded_draft="a 70B draft")
    seen = []
    monkeypatch.setattr(models, "load_pair", lambda **kw: seen.append(kw))
    pair_page._load_pair(*plain.pair_key)
    pair_page._load_pair(*fast.pair_key)
    pair_page._load_pair(*other.pair_key)
    pair_page._load_pair(*typed[1].pair_key)
    assert seen == [
        {"device": "cpu", "feature_draft": None, "dtype": "float32"},
        {"device": "cpu", "feature_draft": FEATURE_DRAFT_DIR, "dtype": fast_dtype},
        {"device": "cpu", "feature_draft": FEATURE_DRAFT_DIR, "dtype": other_dtype},
        {"verifier": "v", "draft": None, "device": "cpu"},
    ]


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not Path("/proc/cpuinfo").exists(),
    reason="the kernel's CPU flags are read on x86 Linux",
)
def test_the_default_dtype_follows_the_cpu_s_bfloat16_instructions():
    """bfloat16 by default only where the kernel reports bfloat16 matrix instructions."""
    from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS

    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert native_bfloat16() == bool(flags & {"avx512_bf16", "amx_bf16"})
    first = EMBEDDED_DRAFTS[0]
    assert first.feature_draft is not None
    assert first.cpu_dtype == ("bfloat16" if native_bfloat16() else "float32")


def test_a_public_server_refuses_a_feature_draft_folder_of_its_own(tmp_path):
    """Only the shipped feature draft loads on a public server (tests/test_decoder_embedded.py
    loads it there); any other folder is refused before the disk is read."""
    from cactus_core.engine.loading import models
    from cactus_core.engine.loading.deployment import PUBLIC_LOAD_ERROR, DeploymentPolicy
    from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR

    public = DeploymentPolicy(public=True)
    with pytest.raises(models.ModelLoadError, match=PUBLIC_LOAD_ERROR):
        models.load_pair(device="cpu", feature_draft=tmp_path, policy=public)
    assert public.allows(FEATURE_DRAFT_DIR) and public.allows(str(FEATURE_DRAFT_DIR))
    assert not public.allows(FEATURE_DRAFT_DIR / "..")  # the assets folder itself is not


def test_taylor_gap_overshoot_only_when_the_closed_form_exceeds_delta():
    pos = S.Position(("a", "b"), torch.tensor([0.2, 0.8]), torch.tensor([0.6, 0.4]), 0)
    high = P.taylor_gap(pos, 0.2)  # h_n ≈ 0.91 < 1: the closed form overshoots
    assert high.kl_taylor_now > 0.2
    assert high.overshoot == pytest.approx(high.kl_taylor_now - 0.2)
    assert P.taylor_gap(pos, 0.0).overshoot is None


def test_headlines_compare_the_default_rule_with_the_lossless_one():
    rows = P.compare_rules(WORKED, P.playground_rules(WORKED.params))
    cards = P.headlines(WORKED, rows)
    assert cards[0].label == "sps: expected acceptance"
    assert cards[1].label == "cactus δ=0.21: expected acceptance"
    assert cards[2].value == "82.4%" and cards[2].delta == "+38.6 points vs sps"


def test_chip_label_escapes_markdown_and_marks_fate():
    t = T.TokenView("*a_b [x]", "rejected", 0, 0)
    label = T.chip_label(t)
    assert label.startswith("✗ :red-background[:red[~~")
    assert "\\*a\\_b" in label and "\\[x\\]" in label
    assert T.chip_label(T.TokenView(" ", "accepted", 0, 0)) == "✓ :green-background[:green[␣]]"


def test_transcript_html_escapes_and_strikes_rejected():
    html = T.transcript_html("", [T.TokenView("<b>", "rejected", 0, 0, flipped=True)])
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert "line-through" in html and "dashed" in html
    with pytest.raises(ValueError, match="unknown fate"):
        T.transcript_html("", [T.TokenView("x", "eaten", 0, 0)])


@pytest.fixture(scope="module")
def decoded(tiny_pair):
    dec = SpeculativeDecoder(tiny_pair, make_rule("cactus", delta=0.5), k=3, temperature=1.0)
    return dec.generate("hello there", max_new_tokens=24, seed=5)


def test_transcript_tokens_emit_exactly_the_output(decoded):
    views = T.transcript_tokens(decoded.trace.rounds)
    emitted = [v.text for v in views if v.fate != "rejected"]
    assert "".join(emitted) == "".join(t for r in decoded.trace.rounds for t in r.emitted_text)
    rejected = sum(1 for v in views if v.fate == "rejected")
    assert rejected == sum(
        1
        for r in decoded.trace.rounds
        if r.num_accepted < r.k and len(r.emitted_ids) > r.num_accepted
    )


def test_live_stats_agree_with_the_decoder(decoded):
    live = D.live_stats(decoded.trace.rounds, decoded.stats.wall_s)
    assert live.tokens == decoded.stats.new_tokens
    assert live.tokens_per_call == pytest.approx(decoded.stats.tokens_per_call)
    assert live.acceptance_rate == pytest.approx(decoded.stats.acceptance_rate)
    assert live.emitted_kl == pytest.approx(decoded.stats.mean_emitted_kl, abs=1e-6)


def test_trace_position_is_a_distribution_pair_with_the_drafted_token(decoded):
    choices = D.decided_rows(decoded.trace)
    assert choices
    for choice in choices[:5]:
        pos = choice.position(decoded.trace)
        assert float(pos.p.sum()) == pytest.approx(1.0, abs=1e-5)
        assert float(pos.q.sum()) == pytest.approx(1.0, abs=1e-5)
        rnd = decoded.trace.rounds[choice.round_index]
        node = rnd.verdict.children[choice.row][0]  # a chain's draft at that slot
        assert pos.labels[pos.drafted] == rnd.draft_text[node]
        # The tiny vocabulary (259) fits in the kept rows, so a(n) is the decoder's exactly.
        row = P.compare_rules(pos, [decoded.trace.rule])[0]
        assert row.accept_drafted == pytest.approx(rnd.accept_probs[node], abs=1e-4)


def test_inspect_every_token_of_every_round(decoded):
    for rnd in decoded.trace.rounds:
        for view in T.round_tokens(rnd):
            ins = INS.inspect_token(decoded.trace, rnd.index, view.row, view.node)
            assert ins.title
            if view.node is not None:
                assert ins.accept_prob == rnd.accept_probs[view.node]
                assert set(ins.series) == {"p", "q", "h", "residual"}
                assert ins.highlight is not None
            elif view.fate == "recovered":  # drawn at its rejected draft's row
                assert set(ins.series) == {"p", "q", "h", "residual"}
            else:
                assert set(ins.series) == {"q"}
            for values in ins.series.values():
                assert all(math.isfinite(v) for v in values)


def test_flipped_nodes_follow_the_replay(decoded):
    replay = reverify(decoded.trace, make_rule("cactus", delta=3.0))
    flips = T.flipped_nodes(replay)
    assert sum(len(v) for v in flips.values()) == replay.flips
    views = T.transcript_tokens(decoded.trace.rounds, replay)
    assert any(v.flipped for v in views) == (replay.flips > 0)


def test_speed_comparison_from_the_two_runs_stats():
    # decoding tokens/s: the prefill and the recording's waits are outside the clocks
    spec = SimpleNamespace(new_tokens=30, wall_s=1.2, prefill_s=0.1, record_s=0.1,
                           tokens_per_call=2.5)  # fmt: skip
    base = SimpleNamespace(new_tokens=30, wall_s=1.6, prefill_s=0.1, record_s=0.0)
    cmp = M.speed_comparison(spec, base, k=4)
    assert cmp.speculative_tokens_per_s == pytest.approx(30.0)
    assert cmp.speedup == pytest.approx(1.5)


def test_a_decode_request_needs_a_prompt():
    with pytest.raises(ValueError, match="prompt"):
        R.DecodeRequest("  ", A.AppSettings(), make_rule("sps"), 8, True)


def test_playground_figures_keep_the_drafted_token_and_count_the_hidden_ones():
    g = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(30, generator=g) * 2, -1)
    p = torch.softmax(torch.randn(30, generator=g) * 2, -1)
    pos = S.Position(tuple(f"t{i}" for i in range(30)), p, q, drafted=int(q.argmin()))
    rows = P.compare_rules(pos, P.playground_rules())
    data = P.playground_figures(pos, rows, rows[1])
    assert data.labels[data.drafted] == pos.labels[pos.drafted]
    assert len(data.labels) + data.hidden == 30
    assert set(data.focus) == {"p", "q", "h", "residual", "pi"}
    assert list(data.accept) == [r.label for r in rows]
    assert list(data.pis) == ["q", *(r.label for r in rows)]
