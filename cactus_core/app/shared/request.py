"""What a page asks the decoder for (`DecodeRequest`: a prompt, the sidebar's settings and the
rule picked) and what one Generate click made of it (`DecodeRun`: the output, and what was
measured about it since). The Decode page generates runs, Step through takes a request apart
round by round, the export and the k tuner read a run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cactus_core.app.shared.limits import check_prompt_chars, check_prompt_tokens
from cactus_core.app.shared.metrics import SpeedComparison
from cactus_core.app.shared.rescue import q_zero_caption, rejected_drafts
from cactus_core.app.shared.settings import AppSettings
from cactus_core.maths.rules import Rule

if TYPE_CHECKING:  # transformers is slow to import; only a decode needs it
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder
    from cactus_core.engine.decoding.generation import DecodeStream, GenerationOutput
    from cactus_core.engine.decoding.replay import Replay
    from cactus_core.engine.decoding.trace import Trace
    from cactus_core.engine.loading.pair import ModelPair


@dataclass(frozen=True)
class DecodeRequest:
    """What Generate decodes: the prompt, the sidebar's settings and the rule picked."""

    prompt: str
    settings: AppSettings
    rule: Rule
    max_new_tokens: int
    chat_template: bool

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise ValueError("Enter a prompt first.")
        check_prompt_chars(self.prompt)

    def check_length(self, pair: ModelPair) -> None:
        """ValueError naming the app's cap (limits.MAX_PROMPT_TOKENS) when the prompt's own
        tokens (without the chat template's few) are more, before any model call: a prefill
        of thousands of tokens would hold the server for minutes with nothing on screen."""
        ids = pair.tokenizer(self.prompt, add_special_tokens=False)["input_ids"]
        check_prompt_tokens(len(ids))

    @property
    def rule_name(self) -> str:
        return self.rule.name

    def decoder(
        self, pair: ModelPair, record_trace: bool = True, measure_kl: bool = True
    ) -> SpeculativeDecoder:
        from cactus_core.engine.decoding.decoder import SpeculativeDecoder

        return SpeculativeDecoder(
            pair,
            self.rule,
            record_trace=record_trace,
            measure_kl=measure_kl,
            **self.settings.decoder_kwargs(),
        )

    def generate_kwargs(self) -> dict[str, Any]:
        return {
            "max_new_tokens": self.max_new_tokens,
            "seed": self.settings.seed,
            "chat_template": self.chat_template,
        }

    def stream(self, pair: ModelPair) -> DecodeStream:
        """The rounds as they finish; the stream's `.output` holds the result once exhausted."""
        from cactus_core.engine.decoding.decoder import SpeculativeDecoder

        self.check_length(pair)
        decoder = SpeculativeDecoder(pair, self.rule, **self.settings.decoder_kwargs())
        return decoder.rounds(self.prompt, **self.generate_kwargs())

    def changes_since(self, earlier: DecodeRequest, rule: bool = True) -> list[str]:
        """What differs from an earlier request, in words (empty: the same decode); `rule`
        False leaves a change of rule out (Step through keeps its place across rules)."""
        changes = []
        if rule and self.rule != earlier.rule:
            changes.append(f"the rule (from {earlier.rule.label})")
        a, b = earlier.settings.sampling, self.settings.sampling
        for name, label in (("seed", "seed"), ("temperature", "T"), ("top_k", "top-k"),
                            ("top_p", "top-p"), ("k", "k")):  # fmt: skip
            if getattr(a, name) != getattr(b, name):
                changes.append(f"{label} {getattr(a, name):g} → {getattr(b, name):g}")
        if self.prompt != earlier.prompt:
            changes.append("the prompt")
        if self.max_new_tokens != earlier.max_new_tokens:
            changes.append(f"max new tokens {earlier.max_new_tokens} → {self.max_new_tokens}")
        if self.chat_template != earlier.chat_template:
            changes.append("the chat template")
        if replace(earlier.settings, sampling=b) != self.settings:
            changes.append("the model pair or drafting")
        return changes


@dataclass
class DecodeRun:
    """One Generate click: the request, the decoder's output (trace and stats), and what was
    measured about this run since (a replay, a speed comparison)."""

    run_id: int
    request: DecodeRequest
    output: GenerationOutput
    comparison: SpeedComparison | None = None
    replay: Replay | None = None
    # The race against verifier-only that measured `comparison` (an app.race.Race: typed
    # loosely because race.py builds on this module).
    race: Any = None

    @property
    def trace(self) -> Trace:
        return self.output.trace

    @property
    def prompt(self) -> str:
        return self.request.prompt

    @property
    def settings(self) -> AppSettings:
        return self.request.settings

    @property
    def rule_name(self) -> str:
        return self.request.rule_name

    def caption(self) -> str:
        stats, meta = self.output.stats, self.trace.meta
        return (
            f"Run {self.run_id}: {meta['rule_label']} · {drafting_text(meta)} · "
            f"T = {meta['temperature']:g} · top-k {meta['top_k']} · top-p {meta['top_p']:g} · "
            f"seed {meta['seed']} · {stats.new_tokens} tokens in {stats.rounds} rounds, "
            f"stopped by {stats.stop_reason} · {meta['verifier']} verifying {meta['draft']}"
        )

    def truncation_caption(self) -> str | None:
        """How many rejected drafts (every rejected candidate of a tree) had q_n = 0: the
        same drafts "Why drafts get rejected" lists."""
        return q_zero_caption(rejected_drafts(self.trace.rounds, self.trace.text))


def drafting_text(meta: dict[str, Any]) -> str:
    """How a run drafted: "k = 4", or its tree's shape."""
    tree = meta.get("tree")
    if not tree:
        return f"k = {meta['k']}"
    return (
        f"draft tree of {tree['nodes']} nodes, depth ≤ {tree['depth']} ({tree['root_branch']} "
        f"at the root, {tree['branch']} per node, {tree['width']} expanded per depth)"
    )
