"""The decoder benchmark behind `python -m cactus_core bench` (docs/benchmarks.md).

Every row decodes the same prompts with the same seeds (prompt i uses seed + i in every row,
so the rows meet the same coins), one prompt at a time (batch 1). The loop runs prompts outside
and rows inside, so a burst of load on a shared machine hits every row alike; speedups are the
median over prompts of the per-prompt ratio against verifier-only sampling, measured in the
same run (`speedup.ratio`: decoding tokens/s, the prefill and the bookkeeping left out).

Rows: verifier-only sampling, our decoder under each rule, and transformers' own assisted
generation (`generate(assistant_model=...)`, do_sample=True, a constant k assistant tokens,
confidence threshold 0) on the same pair.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.generation import PositionCounts, acceptance_by_position
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.experiments.estimates.speedup import ratio
from cactus_core.maths.rules import (
    DEFAULT_RULE,
    LOSSLESS_RULE,
    RULE_NAMES,
    Rule,
    lossless_rule,
    make_rule,
)
from cactus_core.maths.sampling import SamplingSettings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

VERIFIER_ONLY = "verifier-only"
HF_ASSISTED = "transformers assisted"


@dataclass
class BenchRow:
    label: str
    rule: Rule | None = None  # None: verifier-only or transformers assisted
    kind: str = "speculative"  # "speculative", "verifier-only" or "hf-assisted"
    record_trace: bool = False
    tree: TreeSettings | None = None  # draft a tree each round instead of a chain


def default_rows(
    with_hf: bool = True, with_trace_row: bool = False, tree: TreeSettings | None = None
) -> list[BenchRow]:
    """verifier-only, sps, the default rule at four settings, every other rule at its defaults,
    then (optionally) sps and the default rule at δ = 1 with a draft tree, the default rule
    with a full trace and transformers' assisted generation."""
    lossless = lossless_rule()
    rows = [BenchRow(VERIFIER_ONLY, kind="verifier-only"), BenchRow(lossless.label, lossless)]
    for delta in (0.25, 0.5, 1.0, 2.0):
        rule = make_rule(DEFAULT_RULE, delta=delta)
        rows.append(BenchRow(rule.label, rule))
    for name in RULE_NAMES:
        if name not in (LOSSLESS_RULE, DEFAULT_RULE):
            rule = make_rule(name)
            rows.append(BenchRow(rule.label, rule))
    if tree is not None:
        for rule in (lossless, make_rule(DEFAULT_RULE, delta=1.0)):
            rows.append(BenchRow(f"{rule.label} tree", rule, tree=tree))
    if with_trace_row:
        rule = make_rule(DEFAULT_RULE, delta=1.0)
        rows.append(BenchRow(f"{rule.label} + full trace", rule, record_trace=True))
    if with_hf:
        rows.append(BenchRow(HF_ASSISTED, kind="hf-assisted"))
    return rows


@dataclass
class RowResult:
    label: str
    new_tokens: list[int] = field(default_factory=list)  # per prompt
    wall_s: list[float] = field(default_factory=list)  # per prompt, prefill included
    record_s: list[float] = field(default_factory=list)  # per prompt: exact-KL bookkeeping
    prefill_s: list[float] = field(default_factory=list)  # per prompt (0 for hf-assisted)
    verifier_calls: int = 0
    decided: int = 0
    accepted: int = 0
    rejected_q_zero: int = 0
    kl_sum: float = 0.0
    accepted_histogram: list[int] = field(default_factory=list)  # rounds by accepted drafts
    positions: list[PositionCounts] = field(default_factory=list)  # per prompt
    rounds: int = 0
    draft_s: float = 0.0  # drafting, the feature draft's feed included
    verify_s: float = 0.0

    def decoding_s(self) -> list[float]:
        """Per prompt: the wall time less the prefill and the bookkeeping."""
        return [w - r - p for w, r, p in zip(self.wall_s, self.record_s, self.prefill_s,
                                             strict=True)]  # fmt: skip

    def summary(self, base: RowResult | None, k: int, c: float) -> dict[str, Any]:
        """Times exclude the exact-KL bookkeeping (record_s, a measurement a deployed decoder
        would not make); tokens_per_s_raw and record_share keep it visible."""
        tokens = sum(self.new_tokens)
        wall = sum(self.wall_s)
        record = sum(self.record_s)
        tpc = tokens / self.verifier_calls if self.verifier_calls else None
        ratios = []
        if base is not None:
            # the speedup as `speedup` defines it: decoding tokens/s, prefill and bookkeeping
            # left out, prompt by prompt
            pairs = zip(self.new_tokens, self.decoding_s(), base.new_tokens, base.decoding_s(),
                        strict=True)  # fmt: skip
            ratios = [x for x in (ratio(*p) for p in pairs) if x > 0]
        rejected = self.decided - self.accepted
        speculative = self.label != VERIFIER_ONLY
        return {
            "row": self.label,
            "new_tokens": tokens,
            "wall_s": wall,
            "tokens_per_s": tokens / (wall - record) if wall > record else 0.0,
            "tokens_per_s_raw": tokens / wall if wall > 0 else 0.0,
            "speedup_median": statistics.median(ratios) if ratios else None,
            "tokens_per_call": tpc,
            "acceptance_rate": self.accepted / self.decided if self.decided else None,
            "mean_emitted_kl": self.kl_sum / tokens if tokens else 0.0,
            "rejected_q_zero_share": self.rejected_q_zero / rejected if rejected else None,
            "modelled_speedup": (tpc / (1 + k * c) if speculative else 1.0) if tpc else None,
            "record_share": record / wall if wall > 0 else 0.0,
            # Why a speculative row is as fast as it is: where its rounds stop, and what a
            # round's draft and verify steps cost.
            "acceptance_by_position": acceptance_by_position(self.accepted_histogram),
            "positions": PositionCounts.pooled(self.positions).to_dict(),
            "draft_ms_per_round": (
                1e3 * self.draft_s / self.rounds if self.rounds and speculative else None
            ),
            "verify_ms_per_round": 1e3 * self.verify_s / self.rounds if self.rounds else None,
            # Per prompt, decoding tokens/s (prefill and bookkeeping left out, as `speedup`
            # counts): rows compared prompt by prompt ran back to back, so their ratio is robust
            # to load that changes during a long run.
            "prompt_tokens_per_s": [
                t / w if w > 0 else 0.0
                for t, w in zip(self.new_tokens, self.decoding_s(), strict=True)
            ],
        }


def paired_ratio(summaries: list[dict[str, Any]], row: str, base: str) -> dict[str, float] | None:
    """tokens/s of `row` against `base` from one table: pooled (all tokens ÷ all time) and
    the median over prompts of the per-prompt ratio. None if either row is missing."""
    by_label = {s["row"]: s for s in summaries}
    if row not in by_label or base not in by_label:
        return None
    a, b = by_label[row], by_label[base]
    ratios = [
        x / y
        for x, y in zip(a["prompt_tokens_per_s"], b["prompt_tokens_per_s"], strict=True)
        if y > 0
    ]
    return {
        "pooled": a["tokens_per_s"] / b["tokens_per_s"] if b["tokens_per_s"] > 0 else 0.0,
        "median": statistics.median(ratios) if ratios else 0.0,
    }


def hf_assisted_generate(
    pair: ModelPair,
    prompt_ids: list[int],
    max_new_tokens: int,
    sampling: SamplingSettings,
    row: int = 0,
) -> tuple[list[int], int]:
    """transformers' assisted generation on the pair, seeded with sampling.seed + row, at the
    same k, temperature, top-k and top-p: (new token ids, verifier forwards)."""
    calls = [0]
    hook = pair.verifier.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    config = pair.draft.generation_config
    saved = {
        name: getattr(config, name, None)
        for name in (
            "num_assistant_tokens",
            "num_assistant_tokens_schedule",
            "assistant_confidence_threshold",
        )
    }
    config.num_assistant_tokens = sampling.k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        torch.manual_seed(sampling.seed + row)
        ids = torch.tensor([prompt_ids], device=pair.device)
        out = pair.verifier.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=pair.draft,
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_new_tokens=max_new_tokens,
            pad_token_id=pair.tokenizer.pad_token_id or pair.tokenizer.eos_token_id,
        )
    finally:
        hook.remove()
        for name, value in saved.items():
            setattr(config, name, value)
    return out[0, len(prompt_ids) :].tolist(), calls[0]


def run_bench(
    pair: ModelPair,
    prompts: list[str],
    sampling: SamplingSettings | None = None,
    max_new_tokens: int = 128,
    chat_template: bool = True,
    rows: list[BenchRow] | None = None,
    c: float = 0.05,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One table: a summary dict per row (see RowResult.summary). c >= 0 is the cost of a
    draft step in verifier steps (ValueError otherwise, before any decoding: c = -1/k would
    divide the modelled speedup by zero after the whole bench, and c < 0 makes it negative)."""
    check_cost(c)
    sampling = sampling if sampling is not None else SamplingSettings()
    rows = rows if rows is not None else default_rows()
    results = {row.label: RowResult(row.label) for row in rows}
    decoders = {
        row.label: SpeculativeDecoder(
            pair,
            row.rule or lossless_rule(),
            sampling=sampling,
            record_trace=row.record_trace,
            tree=row.tree,
        )
        for row in rows
        if row.kind != "hf-assisted"
    }
    for i, prompt in enumerate(prompts):
        for row in rows:
            res = results[row.label]
            if row.kind == "hf-assisted":
                ids = pair.encode_prompt(prompt, chat_template=chat_template)
                start = time.perf_counter()
                new, calls = hf_assisted_generate(pair, ids, max_new_tokens, sampling, i)
                res.wall_s.append(time.perf_counter() - start)
                res.record_s.append(0.0)
                res.prefill_s.append(0.0)
                res.new_tokens.append(len(new))
                res.verifier_calls += calls
            else:
                dec = decoders[row.label]
                run = dec.generate_autoregressive if row.kind == "verifier-only" else dec.generate
                out = run(
                    prompt,
                    max_new_tokens=max_new_tokens,
                    seed=sampling.seed + i,
                    chat_template=chat_template,
                )
                st = out.stats
                res.wall_s.append(st.wall_s)
                res.prefill_s.append(st.prefill_s)
                res.new_tokens.append(st.new_tokens)
                res.verifier_calls += st.verifier_calls
                res.decided += st.decided_tokens
                res.accepted += st.accepted_tokens
                res.rejected_q_zero += st.rejected_q_zero
                res.kl_sum += st.kl_sum
                res.record_s.append(st.record_s)
                res.rounds += st.rounds
                res.draft_s += st.draft_s
                res.verify_s += st.verify_s
                res.positions.append(st.positions)
                hist = st.accepted_histogram
                res.accepted_histogram += [0] * (len(hist) - len(res.accepted_histogram))
                for m, n in enumerate(hist):
                    res.accepted_histogram[m] += n
            if progress is not None:
                rate = res.new_tokens[-1] / res.wall_s[-1] if res.wall_s[-1] > 0 else 0.0
                progress(
                    f"[top-p {sampling.top_p:g}] prompt {i + 1}/{len(prompts)} {row.label}: "
                    f"{res.new_tokens[-1]} tokens, {rate:.2f} tokens/s"
                )
    base = results.get(VERIFIER_ONLY)
    return [results[row.label].summary(base, sampling.k, c) for row in rows]


def check_cost(c: float) -> float:
    """c, the draft/verifier step cost of the modelled speedup 1 / (1 + k·c); ValueError unless
    it is a finite number >= 0."""
    if isinstance(c, bool) or not isinstance(c, int | float) or not math.isfinite(c) or c < 0:
        raise ValueError(f"c (a draft step's cost in verifier steps) must be >= 0, got {c!r}")
    return float(c)


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def markdown_table(summaries: list[dict[str, Any]], c: float) -> str:
    head = (
        "| row | tokens/s | speedup (measured) | tokens per call | acceptance | mean emitted KL "
        f"| q_n = 0 among rejected | modelled speedup (c = {c:g}) | KL bookkeeping |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for s in summaries:
        kl_text = _fmt(s["mean_emitted_kl"], ".4f")
        if s["row"] == HF_ASSISTED:
            kl_text = "0 (lossless, not measured)"
        lines.append(
            f"| {s['row']} | {s['tokens_per_s']:.2f} | {_fmt(s['speedup_median'], '.2f')}× "
            f"| {_fmt(s['tokens_per_call'], '.2f')} | {_fmt(s['acceptance_rate'], '.3f')} "
            f"| {kl_text} | {_fmt(s['rejected_q_zero_share'], '.1%')} "
            f"| {_fmt(s['modelled_speedup'], '.2f')} | {s['record_share']:.1%} of wall |"
        )
    return head + "\n".join(lines)


def position_table(summaries: list[dict[str, Any]]) -> str:
    """The speculative rows' acceptance at each draft position (given the round got there)
    and a round's draft and verify time: the two halves of a row's speed."""
    rows = [s for s in summaries if s.get("acceptance_by_position")]
    if not rows:
        return ""
    k = max(len(s["acceptance_by_position"]) for s in rows)
    head = (
        "| row | "
        + " | ".join(f"acceptance at {j}" for j in range(1, k + 1))
        + " | draft ms per round | verify ms per round |\n"
        + "|---" * (k + 3)
        + "|\n"
    )
    lines = []
    for s in rows:
        cells = [_fmt(a, ".3f") for a in s["acceptance_by_position"]]
        cells += ["–"] * (k - len(cells))
        times = [_fmt(s["draft_ms_per_round"], ".1f"), _fmt(s["verify_ms_per_round"], ".1f")]
        lines.append(f"| {s['row']} | " + " | ".join(cells + times) + " |")
    return head + "\n".join(lines)


def report_text(summaries: list[dict[str, Any]], c: float) -> str:
    """What `bench` prints for one table: the rows, the speculative rows by draft position,
    and sps against transformers' assisted generation when both ran."""
    parts = [markdown_table(summaries, c)]
    by_position = position_table(summaries)
    if by_position:
        parts.append(by_position)
    ours = paired_ratio(summaries, LOSSLESS_RULE, HF_ASSISTED)
    if ours is not None:
        parts.append(
            f"{LOSSLESS_RULE} ÷ {HF_ASSISTED}, tokens/s: {ours['pooled']:.2f}× pooled, "
            f"{ours['median']:.2f}× median of per-prompt ratios"
        )
    return "\n\n".join(parts)
