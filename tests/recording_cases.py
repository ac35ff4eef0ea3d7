"""What the decoder records (trace rows, exact emitted KL, stats) on the tiny pair for a few
rules, with the timings left out. tests/test_recording.py computes it twice in one process,
with the recording on its worker thread and inline, and compares the two bit for bit: both run
the same kernels on the same CPU, so any difference is the recording's own."""

from __future__ import annotations

import json
from typing import Any

from cactus_core.engine.decoding.decoder import GenerationOutput, SpeculativeDecoder
from cactus_core.maths.rules import make_rule

PROMPTS = ["Tell me about cacti.", "Name three colours.", "What is 2 + 2?"]
CASES: dict[str, dict[str, float]] = {
    "sps": {},
    "cactus": {"delta": 1.0},
    "cactus-budget": {"budget": 0.1},
    "tas": {},
}
# Short rows keep the file small; the code that fills them is the same at any length.
TOP_N, TOP_M = 5, 12
TIMES = ("wall_s", "prefill_s", "draft_s", "verify_s", "record_s", "record_work_s", "tokens_per_s")


def normalise(out: GenerationOutput) -> dict[str, Any]:
    """The output's trace and stats as JSON values, less the clocks and the batch's id."""
    trace = json.loads(out.trace.to_json())
    trace["meta"].pop("batch", None)
    for rnd in trace["rounds"]:
        rnd.pop("draft_s")
        rnd.pop("verify_s")
    stats = {k: v for k, v in out.stats.to_dict().items() if k not in TIMES}
    return json.loads(json.dumps({"trace": trace, "stats": stats, "ids": out.token_ids}))


def snapshot(pair: Any) -> dict[str, Any]:
    """Per rule: one prompt traced, a batch of two traced, one prompt with KL but no trace,
    and (for sps) verifier-only."""
    out: dict[str, Any] = {}
    for name, params in CASES.items():
        rule = make_rule(name, **params)
        dec = SpeculativeDecoder(
            pair, rule, k=4, temperature=0.7, trace_top_n=TOP_N, replay_top_m=TOP_M
        )
        lean = SpeculativeDecoder(pair, rule, k=4, temperature=0.7, record_trace=False)
        case = {
            "single": normalise(dec.generate(PROMPTS[0], max_new_tokens=14, seed=3)),
            "batch": [normalise(o) for o in dec.generate(PROMPTS[:2], max_new_tokens=10, seed=5)],
            "lean": normalise(lean.generate(PROMPTS[1], max_new_tokens=14, seed=7)),
        }
        if name == "sps":
            case["plain"] = normalise(dec.generate_autoregressive(PROMPTS[2], 12, seed=1))
        out[name] = case
    return out
