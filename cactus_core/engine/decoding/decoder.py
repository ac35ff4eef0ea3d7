"""KV-cached speculative decoding with any acceptance rule, traced round by round.

The loop, per round: ask the drafter's rounds (`caches.Rounds`: a chain of k drafts, or a draft
tree) how far the round drafts, draw its coins and run it, which drafts, verifies under the
rule, brings the round's numbers to the host in one sync and cuts the caches back to what was
accepted, and returns a `RoundOutcome`; commit its tokens (cut at EOS or the budget) and count
it; hand it to the recording (emitted KL, trace rows). Both models keep their KV caches across
rounds and roll back what the round rejected (`kv_cache.SequenceCache`), so the prefix is
encoded once. A `RoundClock` times the phases.

Recording runs off the critical path: a round's exact emitted KL and trace rows are computed
from its own tensors on a worker thread (`recording.Recorder`) while the next round drafts and
verifies, and the round is handed out (yielded, passed to on_round) once they are in, so a
round reaches its consumer one round later than its tokens were decided, complete. The last
round's recording is joined before the stats are final. `stats.record_s` is the time the
decoding thread spent on recording (waiting for the worker, and the inline parts: the probe,
a verifier-only step's rows); `stats.record_work_s` is the recording's own work, wherever it
ran. A decoder with nothing to record (record_trace=False with measure_kl=False, or a lossless
judge) starts no thread and hands each round out at once.

The caches hold every committed token except the last one: that one (and, after a fully
accepted round, the draft's last proposal, which the draft never encoded) is fed at the start of
the next round. So the verifier's forward in a round takes k + 1 tokens, the first draft
forward 1 or 2, and every emitted token comes from a decoding forward (the prefill computes no
logits at all). A pair with a feature draft (one sequence) drafts with it instead, on the
verifier's own features of the committed positions (`feature_drafting`).

Randomness: row i of a batch draws its coins from its own generator seeded with seed + i, in
a fixed order per round (k draft, k accept, one sample coin), whatever happens in the round, so
a prompt decoded alone with seed s + i gets row i's tokens of a batch decoded with seed s (up to
float rounding of batched forwards; exact on the CPU in the tests).

Temperature 0: p and q are one-hot, and the decoder judges with `lossless_rule()` (for one-hot
p and q: accept the draft iff it is q's argmax, else emit that argmax), whatever rule it got.
Any other rule could emit a token greedy decoding never would (interp accepts a mismatch with
probability alpha; tas and topk judge thresholds, not equality). So at T = 0 every rule returns
the verifier's own greedy output, and the emitted KL is 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.engine.decoding.caches import Caches, open_caches
from cactus_core.engine.decoding.clock import RoundClock
from cactus_core.engine.decoding.generation import (
    DecodeStream,
    GenerationOutput,
    GenerationStats,
    summarize,
)
from cactus_core.engine.decoding.host import check_finite, finite_rows, logprobs, to_host
from cactus_core.engine.decoding.outcome import (
    RoundOutcome,
    count_round,
    plain_round_trace,
    round_trace,
)
from cactus_core.engine.decoding.recording import (
    Recorded,
    Recorder,
    RoundRecord,
    record_round,
    top_entries,
)
from cactus_core.engine.decoding.rows import DecodeRow, Prompt, check_int, decode_rows
from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace, Trace
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.pair import eos_ids as pair_eos_ids
from cactus_core.engine.loading.pair import token_display
from cactus_core.engine.loading.pairing import head_vocab
from cactus_core.engine.runtime.fast_head import single_row_copy
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.rules import LOSSLESS_RULE, Rule, lossless_rule, make_rule
from cactus_core.maths.sampling import K_MAX, SamplingSettings, sample_from_probs

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

__all__ = [
    "K_MAX",
    "DecodeStream",
    "GenerationOutput",
    "GenerationStats",
    "OnRound",
    "Probe",
    "SpeculativeDecoder",
    "summarize",
]

OnRound = Callable[[RoundTrace, int], None]
# probe(row, round, p [d, V], q [d, V]) sees the full rows of the d positions decided in one
# round of one sequence (instrumentation such as the sweep's limit; it must not keep the rows).
Probe = Callable[[int, int, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class RoundEvent:
    """What a round hands the loop for one row: the round, and its recording (KL(pi ‖ q) at
    its drafted positions, the trace rows) as the batch's records and this row's index in them."""

    round: RoundTrace
    record: Recorded[list[RoundRecord]]
    index: int


@dataclass(frozen=True)
class Committed:
    """A round committed to its row, and why the row stops (None: it goes on)."""

    row: DecodeRow
    event: RoundEvent
    stop: str | None


# Yields (row index, round) as rounds finish; returns the outputs in prompt order.
Events = Generator[tuple[int, RoundTrace], None, list[GenerationOutput]]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class SpeculativeDecoder:
    """Speculative decoding of `pair.verifier` with `pair.draft` under an acceptance rule.

    Sampling (k, temperature, top_k, top_p) comes either from the keywords or, as one value,
    from `sampling` (then leave the keywords at their defaults); it is validated once, by
    `SamplingSettings`, and exposed as `self.sampling`. Its seed field is not read: each
    generate call takes its own seed.

    record_trace=False keeps only the cheap per-round fields (drafts, fates, coins, emitted
    tokens) and skips the top-N / replay rows. measure_kl=False (with record_trace=False) also
    skips the exact emitted KL, the costliest bookkeeping (an O(V log V) pass per position).
    Both run on a worker thread beside the decoding (see the module docstring); `stats.record_s`
    is what they cost the decoding thread, `stats.record_work_s` their own work. probe, if given, is
    called with the full p and q rows of every decided position (see `Probe`). lazy_head
    (default: for one sequence on CPU) computes the verifier's head only at the positions up
    to the first rejection, the same round with less work (see `verify_sequential`); the
    round's accept_probs are then NaN after its decision, and a full trace gets q at the
    other positions from the recording thread.
    """

    def __init__(
        self,
        pair: ModelPair,
        rule: Rule | str = LOSSLESS_RULE,
        k: int = 4,
        temperature: float = 0.7,
        top_k: int = 0,
        top_p: float = 1.0,
        trace_top_n: int = 20,
        record_trace: bool = True,
        replay_top_m: int = 128,
        measure_kl: bool = True,
        probe: Probe | None = None,
        lazy_head: bool | None = None,
        *,
        sampling: SamplingSettings | None = None,
        tree: TreeSettings | None = None,
        eos_ids: Collection[int] | None = None,
    ) -> None:
        self.pair = pair
        self.probe = probe
        self.rule = make_rule(rule) if isinstance(rule, str) else rule
        if not isinstance(self.rule, Rule):
            raise ValueError(f"rule must be a Rule or a rule name, got {rule!r}")
        self.sampling = SamplingSettings.resolve(sampling, k, temperature, top_k, top_p)
        self.trace_top_n = check_int("trace_top_n", trace_top_n, 1)
        self.replay_top_m = check_int("replay_top_m", replay_top_m, 1)
        self.record_trace = bool(record_trace)
        self.measure_kl = bool(measure_kl) or self.record_trace
        self.lazy_head = lazy_head
        self.device = torch.device(pair.device)
        self.vocab = min(head_vocab(pair.verifier), head_vocab(pair.draft))
        if len(pair.tokenizer) > self.vocab:
            raise ValueError(
                f"the tokenizer has {len(pair.tokenizer)} tokens but the models' heads only "
                f"{self.vocab}"
            )
        # A caller with its own stop ids (transformers' eos_token_id) replaces the pair's.
        self.eos_ids = pair_eos_ids(pair) if eos_ids is None else {int(t) for t in eos_ids}
        # At T = 0 every rule verifies by exact match (see the module docstring).
        self.judge = lossless_rule() if self.sampling.greedy else self.rule
        if self.judge.caps.reads_hidden:  # at T = 0 the judge is exact match, which reads none
            self.judge.check_hidden(pair.verifier.config.hidden_size)
        if tree is not None and not isinstance(tree, TreeSettings):
            raise ValueError(f"tree must be a TreeSettings or None, got {tree!r}")
        if tree is not None and pair.feature_draft is None:
            raise ValueError("tree drafting needs a feature draft (load_pair(feature_draft=...))")
        self.tree = tree
        self._texts: dict[int, str] = {}

    @property
    def k(self) -> int:
        return self.sampling.k

    @property
    def temperature(self) -> float:
        return self.sampling.temperature

    @property
    def top_k(self) -> int:
        return self.sampling.top_k

    @property
    def top_p(self) -> float:
        return self.sampling.top_p

    # -- public API -----------------------------------------------------------------------
    def generate(
        self,
        prompt: Prompt | Sequence[Prompt],
        max_new_tokens: int = 128,
        seed: int = 0,
        chat_template: bool = True,
        on_round: OnRound | None = None,
    ) -> GenerationOutput | list[GenerationOutput]:
        """Speculative decoding of one prompt (text, or a `TokenPrompt` of ids), or of a list as
        one batch (row i seeded with seed + i). on_round(round, row) runs after every round."""
        return self._drive(prompt, max_new_tokens, seed, chat_template, on_round, speculative=True)

    def generate_autoregressive(
        self,
        prompt: Prompt | Sequence[Prompt],
        max_new_tokens: int = 128,
        seed: int = 0,
        chat_template: bool = True,
        on_round: OnRound | None = None,
    ) -> GenerationOutput | list[GenerationOutput]:
        """Verifier-only sampling through the same loop (one verifier forward per token)."""
        return self._drive(prompt, max_new_tokens, seed, chat_template, on_round, speculative=False)

    def rounds(
        self,
        prompt: Prompt,
        max_new_tokens: int = 128,
        seed: int = 0,
        chat_template: bool = True,
        speculative: bool = True,
    ) -> DecodeStream:
        """Iterate over the rounds of one generation as they finish (for streaming UIs)."""
        if not isinstance(prompt, Prompt):
            raise ValueError("rounds() takes a single prompt (text or a TokenPrompt)")
        rows = self._rows([prompt], max_new_tokens, seed, chat_template, speculative)
        rec = Recorder()  # the stream's consumer pauses it while it holds the stream
        return DecodeStream(self._decode(rows, max_new_tokens, speculative, rec), rec.pause)

    # -- driving ----------------------------------------------------------------------------
    def _drive(
        self,
        prompt: Prompt | Sequence[Prompt],
        max_new_tokens: int,
        seed: int,
        chat_template: bool,
        on_round: OnRound | None,
        speculative: bool,
    ) -> GenerationOutput | list[GenerationOutput]:
        single = isinstance(prompt, Prompt)
        prompts: list[Prompt] = [prompt] if isinstance(prompt, Prompt) else list(prompt)
        rows = self._rows(prompts, max_new_tokens, seed, chat_template, speculative)
        events = self._decode(rows, max_new_tokens, speculative, Recorder())
        while True:
            try:
                row, rnd = next(events)
            except StopIteration as stop:
                outputs: list[GenerationOutput] = stop.value
                break
            if on_round is not None:
                on_round(rnd, row)
        return outputs[0] if single else outputs

    def _rows(
        self, prompts: list[Prompt], max_new: int, seed: int, chat_template: bool, speculative: bool
    ) -> list[DecodeRow]:
        meta = partial(self._meta, chat_template, speculative)
        return decode_rows(self.pair, self.sampling, prompts, max_new, seed, chat_template, meta)

    def _meta(
        self, chat_template: bool, speculative: bool, prompt: str, ids: list[int], seed: int
    ) -> dict[str, Any]:
        feature = speculative and self.pair.feature_draft is not None
        return {
            "mode": "speculative" if speculative else "autoregressive",
            "rule": self.rule.name,
            "rule_params": dict(self.rule.params),
            "rule_label": self.rule.label,
            "k": self.k,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": seed,
            "prompt": prompt,
            "prompt_ids": ids,
            "chat_template": chat_template,
            "verifier": self.pair.verifier_name,
            "draft": self.pair.feature_draft_name if feature else self.pair.draft_name,
            "vocab_size": self.vocab,
            "trace_top_n": self.trace_top_n,
            "replay_top_m": self.replay_top_m,
            "eos_ids": sorted(self.eos_ids),
            "tree": self.tree.to_dict() if speculative and self.tree is not None else None,
        }

    # -- the loop ---------------------------------------------------------------------------
    @torch.inference_mode()
    def _decode(
        self, rows: list[DecodeRow], max_new_tokens: int, speculative: bool, recorder: Recorder
    ) -> Events:
        """Yields (row index, round) as rounds finish; returns the outputs in prompt order."""
        start = time.perf_counter()
        batch_id = time.time_ns()
        tokens = [r.tokens for r in rows]
        greedy = self.sampling.greedy
        caches = open_caches(self.pair, self.vocab, tokens, speculative, self.tree, greedy)
        _sync(self.device)
        prefill_s = time.perf_counter() - start
        active = list(rows)
        clock = RoundClock(self.device, sync=self.record_trace)
        paused = 0.0  # time spent by the consumer (on_round, a UI) is not decoding time
        # Rounds committed whose recording may still be running: handed out after the next
        # round (which runs beside it) or at the end.
        waiting: list[Committed] = []
        try:
            while active:
                # One round of every active row: coins, outcome, and its recording handed to
                # the recorder; verifier-only steps where nothing drafts or a draft no longer
                # fits.
                room = min(self.pair.context_length - len(r.tokens) for r in active) - 1
                rounds = caches.rounds
                size = rounds.size(self.k, room, len(active)) if rounds is not None else 0
                if rounds is None or size == 0:
                    events = self._plain_round(active, caches.verifier, clock)
                else:
                    coins = rounds.draw_coins([r.generator for r in active], size, self.device)
                    lazy = self._lazy_head(len(active), caches.verifier)
                    last = [r.tokens[-1] for r in active]
                    out = rounds.run(
                        self.judge, caches.verifier, last, coins, self.sampling, clock, lazy
                    )
                    events = self._events(active, out, recorder, clock)
                done = [
                    Committed(row, ev, self._commit(row, ev.round, max_new_tokens))
                    for row, ev in zip(active, events, strict=True)
                ]
                active = self._drop_finished(active, done, caches)
                # The previous round's recording ran beside this round: hand it out now. This
                # round's waits for the next one, unless there is nothing left to wait for.
                ready, waiting = waiting, done
                if not active or not any(c.event.record.pending for c in done):
                    ready, waiting = ready + done, []
                self._settle(ready, clock)
                for c in ready:
                    handed = time.perf_counter()
                    yield c.row.index, c.event.round
                    paused += time.perf_counter() - handed
        finally:
            recorder.close()  # however the decode ends: no worker outlives it
        wall = time.perf_counter() - start - paused
        self._finish(rows, batch_id, speculative, wall, prefill_s, clock, recorder.work_s)
        return [self._output(r) for r in rows]

    def _events(
        self, active: list[DecodeRow], out: RoundOutcome, recorder: Recorder, clock: RoundClock
    ) -> list[RoundEvent]:
        """A speculative round's outcome as each row's event, its recording handed on."""
        with clock.record, clock.record_inline:
            record = self._record(active, out, recorder)
        events = []
        for b, row in enumerate(active):
            count_round(row.stats, out, b)
            events.append(RoundEvent(round_trace(row.stats.rounds, out, b, self._text), record, b))
        return events

    def _drop_finished(
        self, active: list[DecodeRow], done: list[Committed], caches: Caches
    ) -> list[DecodeRow]:
        """The rows still decoding; the finished ones leave the caches too."""
        keep = [i for i, c in enumerate(done) if not c.stop]
        for c in done:
            if c.stop:
                c.row.stats.stop_reason = c.stop
        if len(keep) == len(active):
            return active
        active = [active[i] for i in keep]
        if active:
            caches.verifier.select(keep)
            # crop the columns that only the finished rows used (a no-op on the kept tokens)
            caches.verifier.keep(list(caches.verifier.lengths))
            if caches.drafter is not None:
                caches.drafter.select(keep)
        return active

    def _settle(self, ready: list[Committed], clock: RoundClock) -> None:
        """Wait for these rounds' recordings and put them in: the trace rows (and the a(n) of
        drafts the lazy head left without one) into the round,
        KL(pi ‖ q) of the emitted tokens into the row's stats (in round order, as the sum was
        always taken). The wait is recording on the critical path."""
        with clock.record:
            for c in ready:
                row, rnd = c.row, c.event.round
                rec = c.event.record.get()[c.event.index]
                rnd.positions = rec.positions
                for j, a in rec.accept_probs.items():
                    rnd.accept_probs[j] = a
                # A token drawn after its row's decision emits from pi; a bonus from q (KL 0).
                row.stats.kl_sum += sum(rec.kl_pi[: len(rnd.emitted_ids)])

    def _finish(
        self,
        rows: list[DecodeRow],
        batch_id: int,
        speculative: bool,
        wall: float,
        prefill_s: float,
        clock: RoundClock,
        record_work_s: float,
    ) -> None:
        """Stamp the batch's clock and counts on every row's stats and trace."""
        total = sum(len(r.generated) for r in rows)
        for r in rows:
            s = r.stats
            s.batch_size, s.batch_new_tokens = len(rows), total
            exact_zero = not speculative or self.judge.caps.lossless
            # a rule that overrides sps has no per-position law (its pi depends on the round:
            # later drafts, hidden states): its KL is estimated by a sweep, not measured here
            s.kl_measured = (self.measure_kl and not self.judge.caps.overrides_sps) or exact_zero
            s.wall_s, s.prefill_s = wall, prefill_s
            s.draft_s, s.verify_s = clock.draft.total, clock.verify.total
            s.record_s = clock.record.total
            # the worker's jobs, and what the decoding thread did itself (the probe, the
            # verifier-only steps' rows) but not its waits for the worker
            s.record_work_s = record_work_s + clock.record_inline.total
            r.trace.meta["batch"] = {"id": batch_id, "size": len(rows), "row": r.index}
            self._fill_texts(r.trace)

    def _record(
        self, rows: list[DecodeRow], out: RoundOutcome, recorder: Recorder
    ) -> Recorded[list[RoundRecord]]:
        """The probe (here, while the round's rows are current), then KL(pi ‖ q) at each row's
        decided positions and the trace rows: on the worker when there is work to do."""
        if self.probe is not None:
            for b, row in enumerate(rows):
                self.probe(row.index, row.stats.rounds, *out.path_rows(b))
        trace = (self.trace_top_n, self.replay_top_m) if self.record_trace else None
        if trace is None and (self.judge.caps.lossless or not self.measure_kl):
            # zeros only: nothing worth a thread
            return Recorded(record_round(self.judge, out, self.measure_kl, trace))
        # The worker reads the round's own tensors, which no later round writes to.
        what = f"round {rows[0].stats.rounds}"
        return recorder.submit(what, record_round, self.judge, out, self.measure_kl, trace)

    def _plain_round(
        self, rows: list[DecodeRow], verifier: SequenceCache, clock: RoundClock
    ) -> list[RoundEvent]:
        """One verifier-only step (generate_autoregressive, or when the context leaves no
        room for drafting)."""
        dev = self.device
        with clock.verify:
            coins = torch.stack([torch.rand(1, generator=r.generator, device=dev) for r in rows])
            last = torch.tensor([[r.tokens[-1]] for r in rows], device=dev)  # [B, 1]
            v_logits = verifier.step(last, None, 1)  # [B, 1, V]
            q = self.sampling.probs(v_logits)  # [B, 1, V]
            tok = sample_from_probs(q[:, 0], coins[:, 0])  # [B]
            host = to_host(
                token=tok,
                coin=coins[:, 0],
                logprob=logprobs(v_logits, tok[:, None])[:, 0],
                q_finite=finite_rows(q),
            )
            for h in host:
                check_finite(h.pop("q_finite"), "verifier's q")
        _, verify_s = clock.lap()
        positions: list[list[PositionTrace]] = [[] for _ in rows]
        with clock.record, clock.record_inline:  # one top-N of q per row: cheap enough inline
            if self.record_trace:
                top_q = top_entries(q[:, 0], self.trace_top_n)
                positions = [[PositionTrace(q_ids=ids, q_probs=ps)] for ids, ps in top_q]
        record = Recorded([RoundRecord([0.0], pos) for pos in positions])
        out = []
        for b, (row, h) in enumerate(zip(rows, host, strict=True)):
            rnd = plain_round_trace(row.stats.rounds, h["token"], h["coin"], h["logprob"], [])
            rnd.verify_s = verify_s  # the batch's one verifier step
            out.append(RoundEvent(rnd, record, b))
        return out

    def _commit(self, row: DecodeRow, rnd: RoundTrace, max_new_tokens: int) -> str | None:
        """Append the round's tokens to the row (cut at EOS / the budget / the context) and
        return why the row stops, if it does. The round's recording is put in by `_settle`."""
        ctx = self.pair.context_length
        emitted = rnd.emitted_ids
        budget = min(max_new_tokens - len(row.generated), ctx - len(row.tokens))
        stop = None
        for j, t in enumerate(emitted):
            if t in self.eos_ids:
                emitted, stop = emitted[: j + 1], "eos"
                break
        if len(emitted) > budget:
            emitted, stop = emitted[:budget], None
        if stop is None and len(row.generated) + len(emitted) >= max_new_tokens:
            stop = "max_new_tokens"
        elif stop is None and len(row.tokens) + len(emitted) >= ctx:
            stop = "context"
        if len(emitted) < len(rnd.emitted_ids):
            rnd.truncated = True
            rnd.emitted_fates = rnd.emitted_fates[: len(emitted)]
            rnd.emitted_logprobs = rnd.emitted_logprobs[: len(emitted)]
            rnd.emitted_ids = emitted
        rnd.emitted_text = [self._text(t) for t in emitted]
        st = row.stats
        st.rounds += 1
        st.verifier_calls += 1
        st.new_tokens += len(emitted)
        st.nll_sum -= sum(rnd.emitted_logprobs)
        row.tokens.extend(emitted)
        row.trace.rounds.append(rnd)
        return stop

    def _lazy_head(self, batch: int, verifier: SequenceCache) -> bool:
        """Whether this round computes the verifier's head rows only up to the first rejection
        (`verify_sequential`): by default for one sequence, where one row costs a fraction of
        k + 1 (a float32 head on CPU, `fast_head`); a full trace, which shows q at every
        position, gets the other rows from the recording thread (`RoundOutcome.q_rest`).
        Otherwise the k + 1 rows come from one head call: in bfloat16 on a CPU that costs what
        one row does, and row by row would pay the head once per row."""
        if not verifier.lean:
            return False
        if self.lazy_head is not None:
            return self.lazy_head
        return batch == 1 and verifier.head is not None and single_row_copy(verifier.head)

    # -- text -------------------------------------------------------------------------------
    def _text(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = token_display(self.pair.tokenizer, token_id, self.eos_ids)
            self._texts[token_id] = text
        return text

    def _fill_texts(self, trace: Trace) -> None:
        ids: set[int] = set()
        for rnd in trace.rounds:
            ids.update(rnd.draft_ids, rnd.emitted_ids)  # every node: rejected candidates too
            for pos in rnd.positions:
                ids.update(pos.q_ids)
                ids.update(pos.p_ids)
                ids.update(pos.h_ids)
        trace.token_text.update({t: self._text(t) for t in sorted(ids)})

    def _output(self, row: DecodeRow) -> GenerationOutput:
        gen = row.generated
        text = self.pair.tokenizer.decode(gen, skip_special_tokens=True)
        return GenerationOutput(row.prompt, row.prompt_ids, gen, text, row.stats, row.trace)
