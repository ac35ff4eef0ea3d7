"""A temperature so small that logits / T overflows can't reach the maths: a positive
temperature is at least MIN_TEMPERATURE (a clear error below it), a link's temperature is rounded
onto the slider's steps (1e-300 is greedy), and the CLI refuses it in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from cactus_core.app.shared.links import from_query, page_fields, sidebar_fields
from cactus_core.cli import main
from cactus_core.maths.sampling import MIN_TEMPERATURE, SamplingSettings, logits_to_probs

APP = Path(__file__).resolve().parent.parent / "app.py"


@pytest.mark.parametrize("temperature", [1e-300, 1e-30, MIN_TEMPERATURE / 2])
def test_a_positive_temperature_below_the_minimum_is_refused(temperature):
    logits = torch.tensor([[30.0, 10.0, -5.0]])
    with pytest.raises(ValueError, match=r"temperature must be 0 \(greedy\) or a number in"):
        logits_to_probs(logits, temperature=temperature)
    with pytest.raises(ValueError, match="temperature must be 0"):
        SamplingSettings(temperature=temperature)


def test_the_minimum_temperature_keeps_extreme_logits_finite():
    logits = torch.tensor([[3e4, -3e4, 0.0, 3e4 - 0.5]], dtype=torch.float32)
    for t in (0.0, MIN_TEMPERATURE):
        probs = logits_to_probs(logits, temperature=t, top_p=0.9)
        assert torch.isfinite(probs).all() and abs(probs.sum().item() - 1) < 1e-6


@pytest.mark.parametrize(
    "raw, expected",
    [("1e-300", 0.0), ("0.02", 0.0), ("0.03", 0.05), ("0.73", 0.75), ("0.7", 0.7), ("2", 2.0)],
)
def test_a_link_s_temperature_lands_on_the_slider_s_steps(raw, expected):
    got = from_query(sidebar_fields(public=True), {"T": raw})
    assert got == {"sb_temperature": expected}


def test_a_link_s_rule_parameter_and_top_p_land_on_their_widgets_steps():
    got = from_query(sidebar_fields(public=False), {"top_p": "0.90000001"})
    assert got == {"sb_top_p": 0.9}
    fields = page_fields("decode", {"dec_rule": "cactus"})
    got = from_query(fields, {"rule": "cactus", "delta": "1e-300"})
    assert got["dec_cactus_delta"] == 0.0
    # delta's slider is log-scale: a link's value is kept to four significant digits (the
    # slider adds it to its steps), and one nearer the slider's 0 than its first step is 0
    for raw, kept in [("0.0159", 0.0159), ("0.21234", 0.2123), ("2.93", 2.93), ("1e-5", 0.0)]:
        assert from_query(fields, {"delta": raw}) == {"dec_cactus_delta": kept}
    assert from_query(fields, {"delta": "3.2"}) == {}  # past the slider's end: dropped


def test_the_cli_refuses_a_tiny_temperature_in_one_sentence(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "hello", "--temperature", "1e-300"])
    assert exit_.value.code != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: temperature must be 0 (greedy)") and "\n" not in err


def test_the_step_page_opens_a_link_with_a_tiny_temperature(tiny_pair_dirs):
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["sb_source"] = "Hub id or local folder"
    at.session_state["sb_verifier"] = str(tiny_pair_dirs[0])
    at.session_state["sb_draft"] = str(tiny_pair_dirs[1])
    at.query_params.update({"T": "1e-300", "rule": "sps", "max_new": "8"})
    at.run()
    at.switch_page("pages/step.py").run()
    assert not at.exception, at.exception
    assert at.session_state["settings"].sampling.temperature == 0.0
    assert at.session_state["step_state"].run is not None  # the page decoded its first round
