"""KV-cached speculative decoding with any acceptance rule, traced round by round.

A round: the draft proposes k tokens (k draft forwards), the verifier scores all of them plus
the next position in one forward, and the rule accepts a prefix; a rejection is replaced by a
token from the rule's residual, and a fully accepted draft earns a bonus token from q. Both
models keep their KV caches across rounds and roll back what the round rejected
(`kv_cache.SequenceCache`), so the prefix is encoded once.

The caches hold every committed token except the last one: that one (and, after a fully
accepted round, the draft's last proposal, which the draft never encoded) is fed at the start of
the next round. So the verifier's forward in a round takes k + 1 tokens, the first draft
forward 1 or 2, and every emitted token comes from a decoding forward (the prefill computes no
logits at all).

Randomness: row i of a batch (prompt i) draws all its coins from its own generator seeded with
seed + i, in a fixed order per round (k draft coins, k accept coins, one sample coin), whatever
happens in the round. A prompt decoded alone with seed s + i therefore meets the same coins as
row i of a batch decoded with seed s, and gets the same tokens as long as the batched forwards
agree with the single ones to within float rounding (they do on the CPU in the tests).

Temperature 0: p and q are one-hot, and the decoder verifies with exact match (the `sps` rule,
which for one-hot p and q accepts the draft iff it is the verifier's argmax and otherwise emits
that argmax), whatever rule it was given. Any other choice would let a rule emit a token greedy
decoding never would (interp accepts a mismatch with probability alpha; cactus with q_n = 0
never does, but tas and topk judge thresholds, not equality). So at T = 0 every rule returns the
verifier's own greedy output, and the emitted KL is 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.engine.kv_cache import SequenceCache
from cactus_core.engine.trace import PositionTrace, RoundTrace, Trace
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import Rule, make_rule
from cactus_core.maths.sampling import logits_to_probs, sample_from_probs
from cactus_core.maths.verify import verify, verify_sequential

if TYPE_CHECKING:
    from cactus_core.engine.models import ModelPair

K_MAX = 16
OnRound = Callable[[RoundTrace, int], None]
# probe(row, round, p [d, V], q [d, V]) sees the full rows of the d positions decided in one
# round of one sequence (instrumentation such as the sweep's limit; it must not keep the rows).
Probe = Callable[[int, int, torch.Tensor, torch.Tensor], None]


@dataclass
class GenerationStats:
    """Counts for one sequence. In a batch the time fields are the batch's (one clock)."""

    new_tokens: int = 0
    rounds: int = 0
    verifier_calls: int = 0  # decoding forwards of the verifier (the prefill is not counted)
    draft_calls: int = 0  # decoding forwards of the draft (k per speculative round)
    drafted_tokens: int = 0
    decided_tokens: int = 0  # drafted tokens that got an accept/reject decision
    accepted_tokens: int = 0
    rejected_q_zero: int = 0  # rejected drafts the verifier gave q_n = 0 (outside its support)
    kl_sum: float = 0.0  # sum of KL(pi ‖ q) over the positions whose token was emitted
    nll_sum: float = 0.0  # the verifier's NLL of the emitted tokens (T = 1, nats)
    kl_measured: bool = True
    stop_reason: str = ""  # "eos", "max_new_tokens" or "context"
    batch_size: int = 1
    batch_new_tokens: int = 0
    wall_s: float = 0.0  # prefill + decoding (time spent in on_round is left out)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    record_s: float = 0.0  # emitted KL and trace recording

    @property
    def tokens_per_call(self) -> float:
        """Emitted tokens ÷ verifier forwards (vLLM's mean acceptance length)."""
        return self.new_tokens / self.verifier_calls if self.verifier_calls else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted ÷ decided drafted tokens; None when nothing was drafted."""
        return self.accepted_tokens / self.decided_tokens if self.decided_tokens else None

    @property
    def rejected_tokens(self) -> int:
        return self.decided_tokens - self.accepted_tokens

    @property
    def mean_emitted_kl(self) -> float | None:
        """Mean KL(pi ‖ q) per emitted token (bonus and verifier-only tokens count 0); None
        when the decoder ran with measure_kl=False."""
        if not self.kl_measured:
            return None
        return self.kl_sum / self.new_tokens if self.new_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        """New tokens ÷ wall time (prefill included); in a batch, the batch's throughput."""
        return self.batch_new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        derived = ("tokens_per_call", "acceptance_rate", "mean_emitted_kl", "tokens_per_s")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


@dataclass
class GenerationOutput:
    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]  # the new tokens only
    text: str  # the new tokens decoded, special tokens left out
    stats: GenerationStats
    trace: Trace


def summarize(outputs: list[GenerationOutput]) -> dict[str, Any]:
    """Pooled metrics over several outputs (token-weighted; times add up unless the outputs
    come from one batch, whose single clock is counted once)."""
    stats = [o.stats for o in outputs]
    tokens = sum(s.new_tokens for s in stats)
    decided = sum(s.decided_tokens for s in stats)
    rejected = sum(s.rejected_tokens for s in stats)
    calls = sum(s.verifier_calls for s in stats)
    # Outputs of one batch share one clock: count each batch's time once.
    clocks: dict[Any, tuple[float, float]] = {}
    for i, o in enumerate(outputs):
        key = o.trace.meta.get("batch", {}).get("id", ("single", i))
        clocks[key] = (o.stats.wall_s, o.stats.record_s)
    wall = sum(w for w, _ in clocks.values())
    return {
        "sequences": len(outputs),
        "new_tokens": tokens,
        "verifier_calls": calls,
        "draft_calls": sum(s.draft_calls for s in stats),
        "tokens_per_call": tokens / calls if calls else 0.0,
        "acceptance_rate": sum(s.accepted_tokens for s in stats) / decided if decided else None,
        "mean_emitted_kl": (
            (sum(s.kl_sum for s in stats) / tokens if tokens else 0.0)
            if all(s.kl_measured for s in stats)
            else None
        ),
        "rejected_q_zero_share": (
            sum(s.rejected_q_zero for s in stats) / rejected if rejected else None
        ),
        "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "record_s": sum(r for _, r in clocks.values()),
    }


@dataclass(eq=False)
class _Row:
    """Decoding state of one sequence."""

    index: int
    prompt: str
    prompt_ids: list[int]
    generator: torch.Generator
    trace: Trace
    tokens: list[int] = field(default_factory=list)  # prompt + generated
    pending: list[int] = field(default_factory=list)  # not yet in the draft's cache
    stats: GenerationStats = field(default_factory=GenerationStats)

    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids) :]


class DecodeStream:
    """Iterator over the rounds of one generation (`SpeculativeDecoder.rounds`); once it is
    exhausted, `.output` holds the GenerationOutput."""

    def __init__(self, events: Iterator[tuple[int, RoundTrace]]) -> None:
        self._events = events
        self.output: GenerationOutput | None = None

    def __iter__(self) -> Iterator[RoundTrace]:
        try:
            while True:
                _, rnd = next(self._events)
                yield rnd
        except StopIteration as stop:
            self.output = stop.value[0]


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {span}, got {value}")
    return value


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class SpeculativeDecoder:
    """Speculative decoding of `pair.verifier` with `pair.draft` under an acceptance rule.

    record_trace=False keeps only the cheap per-round fields (drafts, fates, coins, emitted
    tokens) and skips the top-N / replay rows. measure_kl=False (with record_trace=False) also
    skips the exact emitted KL, the costliest bookkeeping (an O(V log V) pass per position);
    `stats.record_s` times all of it, so its cost can be read off any run. probe, if given, is
    called with the full p and q rows of every decided position (see `Probe`). lazy_head
    (default: for one sequence on CPU, without a full trace) computes the verifier's head only
    at the positions up to the first rejection, the same round with less work (see
    `verify_sequential`); the round's accept_probs are then NaN after its decision.
    """

    def __init__(
        self,
        pair: ModelPair,
        rule: Rule | str = "sps",
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
    ) -> None:
        self.pair = pair
        self.probe = probe
        self.rule = make_rule(rule) if isinstance(rule, str) else rule
        if not isinstance(self.rule, Rule):
            raise ValueError(f"rule must be a Rule or a rule name, got {rule!r}")
        self.k = _check_int("k", k, 1, K_MAX)
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        if not temperature >= 0 or temperature == float("inf"):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        self.temperature = float(temperature)
        self.top_k = _check_int("top_k", top_k, 0)
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
        self.top_p = float(top_p)
        self.trace_top_n = _check_int("trace_top_n", trace_top_n, 1)
        self.replay_top_m = _check_int("replay_top_m", replay_top_m, 1)
        self.record_trace = bool(record_trace)
        self.measure_kl = bool(measure_kl) or self.record_trace
        self.lazy_head = lazy_head
        self.device = torch.device(pair.device)
        self.vocab = min(_vocab_size(pair.verifier), _vocab_size(pair.draft))
        if len(pair.tokenizer) > self.vocab:
            raise ValueError(
                f"the tokenizer has {len(pair.tokenizer)} tokens but the models' heads only "
                f"{self.vocab}"
            )
        self.eos_ids = _eos_ids(pair)
        # At T = 0 every rule verifies by exact match (see the module docstring).
        self.judge = make_rule("sps") if self.temperature == 0 else self.rule
        self._texts: dict[int, str] = {}

    # -- public API -----------------------------------------------------------------------
    def generate(
        self,
        prompt: str | list[str],
        max_new_tokens: int = 128,
        seed: int = 0,
        chat_template: bool = True,
        on_round: OnRound | None = None,
    ) -> GenerationOutput | list[GenerationOutput]:
        """Speculative decoding of one prompt, or of a list of prompts as one batch (row i
        seeded with seed + i). on_round(round, row) is called after every round of every row."""
        return self._drive(prompt, max_new_tokens, seed, chat_template, on_round, speculative=True)

    def generate_autoregressive(
        self,
        prompt: str | list[str],
        max_new_tokens: int = 128,
        seed: int = 0,
        chat_template: bool = True,
        on_round: OnRound | None = None,
    ) -> GenerationOutput | list[GenerationOutput]:
        """Verifier-only sampling through the same loop (one verifier forward per token)."""
        return self._drive(prompt, max_new_tokens, seed, chat_template, on_round, speculative=False)

    def rounds(
        self,
        prompt: str,
        max_new_tokens: int = 128,
        seed: int = 0,
        chat_template: bool = True,
        speculative: bool = True,
    ) -> DecodeStream:
        """Iterate over the rounds of one generation as they finish (for streaming UIs)."""
        if not isinstance(prompt, str):
            raise ValueError("rounds() takes a single prompt string")
        rows = self._rows([prompt], max_new_tokens, seed, chat_template, speculative)
        return DecodeStream(self._decode(rows, max_new_tokens, speculative))

    # -- driving ----------------------------------------------------------------------------
    def _drive(
        self,
        prompt: str | list[str],
        max_new_tokens: int,
        seed: int,
        chat_template: bool,
        on_round: OnRound | None,
        speculative: bool,
    ) -> GenerationOutput | list[GenerationOutput]:
        single = isinstance(prompt, str)
        prompts = [prompt] if single else list(prompt)
        rows = self._rows(prompts, max_new_tokens, seed, chat_template, speculative)
        events = self._decode(rows, max_new_tokens, speculative)
        while True:
            try:
                row, rnd = next(events)
            except StopIteration as stop:
                outputs = stop.value
                break
            if on_round is not None:
                on_round(rnd, row)
        return outputs[0] if single else outputs

    def _rows(
        self,
        prompts: list[str],
        max_new_tokens: int,
        seed: int,
        chat_template: bool,
        speculative: bool,
    ) -> list[_Row]:
        _check_int("max_new_tokens", max_new_tokens, 1)
        _check_int("seed", seed, 0)
        if not prompts:
            raise ValueError("no prompts given")
        ctx = self.pair.context_length
        rows: list[_Row] = []
        # A statistical test repeats one prompt thousands of times: encode it once.
        encoded: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            if not isinstance(prompt, str) or not prompt.strip():
                raise ValueError(f"prompt {i} is empty")
            if prompt not in encoded:
                encoded[prompt] = list(self.pair.encode_prompt(prompt, chat_template=chat_template))
            ids = list(encoded[prompt])
            if not ids:
                raise ValueError(f"prompt {i} encodes to no tokens")
            if len(ids) >= ctx:
                raise ValueError(
                    f"prompt {i} is {len(ids)} tokens long; the context holds {ctx}, and at "
                    "least one new token must fit"
                )
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed + i)
            meta = self._meta(prompt, ids, seed + i, chat_template, speculative)
            rows.append(
                _Row(i, prompt, ids, gen, Trace(meta=meta), tokens=list(ids), pending=[ids[-1]])
            )
        return rows

    def _meta(
        self, prompt: str, ids: list[int], seed: int, chat_template: bool, speculative: bool
    ) -> dict[str, Any]:
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
            "draft": self.pair.draft_name,
            "vocab_size": self.vocab,
            "trace_top_n": self.trace_top_n,
            "replay_top_m": self.replay_top_m,
            "eos_ids": sorted(self.eos_ids),
        }

    # -- the loop ---------------------------------------------------------------------------
    @torch.inference_mode()
    def _decode(
        self, rows: list[_Row], max_new_tokens: int, speculative: bool
    ) -> Iterator[tuple[int, RoundTrace]]:
        """Yields (row index, round) as rounds finish; returns the outputs in prompt order."""
        start = time.perf_counter()
        batch_id = time.time_ns()
        ctx = self.pair.context_length
        prefixes = [r.tokens[:-1] for r in rows]
        verifier = SequenceCache(self.pair.verifier, self.vocab)
        verifier.prefill(prefixes)
        draft = None
        if speculative:
            draft = SequenceCache(self.pair.draft, self.vocab)
            draft.prefill(prefixes)
        _sync(self.device)
        prefill_s = time.perf_counter() - start
        active = list(rows)
        clock = {"draft": 0.0, "verify": 0.0, "record": 0.0}
        paused = 0.0  # time spent by the consumer (on_round, a UI) is not decoding time
        while active:
            room = min(ctx - len(r.tokens) for r in active)
            k = min(self.k, room - 1) if speculative else 0
            if k > 0:
                events = self._spec_round(active, verifier, draft, k, clock)
            else:
                events = self._plain_round(active, verifier, clock)
            keep = []
            for i, (row, (rnd, kl_pi)) in enumerate(zip(active, events, strict=True)):
                stop = self._commit(row, rnd, kl_pi, max_new_tokens, ctx)
                handed = time.perf_counter()
                yield row.index, rnd
                paused += time.perf_counter() - handed
                if stop:
                    row.stats.stop_reason = stop
                else:
                    keep.append(i)
            if len(keep) < len(active):
                active = [active[i] for i in keep]
                if active:
                    verifier.select(keep)
                    if draft is not None:
                        draft.select(keep)
            if active:
                verifier.keep([len(r.tokens) - 1 for r in active])
                if draft is not None:
                    draft.keep([len(r.tokens) - len(r.pending) for r in active])
        wall = time.perf_counter() - start - paused
        total = sum(len(r.generated) for r in rows)
        for r in rows:
            s = r.stats
            s.batch_size, s.batch_new_tokens = len(rows), total
            exact_zero = not speculative or self.temperature == 0 or self.judge.name == "sps"
            s.kl_measured = self.measure_kl or exact_zero
            s.wall_s, s.prefill_s = wall, prefill_s
            s.draft_s, s.verify_s, s.record_s = clock["draft"], clock["verify"], clock["record"]
            r.trace.meta["batch"] = {"id": batch_id, "size": len(rows), "row": r.index}
            self._fill_texts(r.trace)
        return [self._output(r) for r in rows]

    def _spec_round(
        self,
        rows: list[_Row],
        verifier: SequenceCache,
        draft: SequenceCache,
        k: int,
        clock: dict[str, float],
    ) -> list[tuple[RoundTrace, list[float | None]]]:
        """One speculative round for every row: the rounds and KL(pi ‖ q) at the k positions."""
        dev = self.device
        t0 = time.perf_counter()
        # [B, 2k+1]: k draft coins, k accept coins, one sample coin, drawn whatever happens.
        coins = torch.stack(
            [torch.rand(2 * k + 1, generator=r.generator, device=dev) for r in rows]
        )
        # Draft: k forwards. The first one also encodes what the draft has not seen yet.
        width = max(len(r.pending) for r in rows)
        ids = torch.tensor([[0] * (width - len(r.pending)) + r.pending for r in rows], device=dev)
        holes = None
        if any(len(r.pending) < width for r in rows):
            holes = [[j >= width - len(r.pending) for j in range(width)] for r in rows]
        logits = draft.step(ids, holes, 1)[:, -1]
        probs, drafts = [], []
        for i in range(k):
            p = self._probs(logits)  # [B, V]
            n = sample_from_probs(p, coins[:, i])  # [B]
            probs.append(p)
            drafts.append(n)
            if i < k - 1:
                logits = draft.step(n[:, None], None, 1)[:, -1]
        p_all = torch.stack(probs, 1)  # [B, k, V]
        n_all = torch.stack(drafts, 1)  # [B, k]
        if self.record_trace:
            _sync(dev)
        t1 = time.perf_counter()
        # Verify: one forward over [last token, d_1 .. d_k] gives q at k + 1 positions; J of
        # them get a head (all k + 1, or up to the first rejection when lazy).
        last = torch.tensor([[r.tokens[-1]] for r in rows], device=dev)
        v_ids = torch.cat([last, n_all], 1)  # [B, k+1]
        uniforms, sample_uniforms = coins[:, k : 2 * k], coins[:, 2 * k]
        if self._lazy_head(len(rows), verifier):
            hidden = verifier.step_hidden(v_ids)  # [B, k+1, H]
            head_rows: list[torch.Tensor] = []

            def q_row(j: int) -> torch.Tensor:
                head_rows.append(verifier.logits(hidden[:, j : j + 1]))  # [B, 1, V]
                return self._probs(head_rows[-1])[:, 0]

            res, q_all = verify_sequential(
                self.judge, p_all, n_all, q_row, uniforms, sample_uniforms
            )  # q_all [B, J, V]
            v_logits = torch.cat(head_rows, 1)  # [B, J, V]
        else:
            v_logits = verifier.step(v_ids, None, k + 1)  # [B, k+1, V]
            q_all = self._probs(v_logits)
            res = verify(
                self.judge,
                p_all,
                n_all,
                q_all,
                uniforms=uniforms,
                sample_uniforms=sample_uniforms,
                validate=False,  # the rows come straight from logits_to_probs
            )
        j = q_all.shape[1]
        q_n = q_all[:, :k].gather(-1, n_all[:, : min(j, k), None])[..., 0]  # [B, min(J, k)]
        logp = _logprobs(v_logits, res.output_token_ids[:, :j].clamp_min(0))  # [B, J]
        host = torch.cat(
            [
                res.num_accepted[:, None].to(torch.float64),
                res.output_token_ids.to(torch.float64),
                n_all.to(torch.float64),
                res.accept_probs.to(torch.float64),
                coins.to(torch.float64),
                _pad(q_n.to(torch.float64), k),
                _pad(logp, k + 1),
            ],
            1,
        ).tolist()  # one host sync for everything the bookkeeping needs
        t2 = time.perf_counter()
        # KL(pi ‖ q) only where a decision was made (positions 0..min(m, k-1)): drafts dropped
        # after a rejection were never verified, and skipping them saves an O(V log V) pass each.
        decided = [min(int(h[0]) + 1, k) for h in host]
        kl_pi = self._emitted_kl(p_all, q_all[:, :k], decided)
        if self.probe is not None:
            for b, (row, d) in enumerate(zip(rows, decided, strict=True)):
                self.probe(row.index, row.stats.rounds, p_all[b, :d], q_all[b, :d])
        positions = (
            self._positions(p_all, q_all, n_all, kl_pi) if self.record_trace else [[] for _ in rows]
        )
        t3 = time.perf_counter()
        clock["draft"] += t1 - t0
        clock["verify"] += t2 - t1
        clock["record"] += t3 - t2
        out = []
        for b, row in enumerate(rows):
            h = host[b]
            m = int(h[0])
            out_ids = [int(x) for x in h[1 : k + 2]]
            d_ids = [int(x) for x in h[k + 2 : 2 * k + 2]]
            a = h[2 * k + 2 : 3 * k + 2]
            u = h[3 * k + 2 : 5 * k + 3]
            q_n = h[5 * k + 3 : 6 * k + 3]
            logp = h[6 * k + 3 : 7 * k + 4]
            fates = ["accepted"] * m + (["rejected"] if m < k else []) + ["dropped"] * (k - m - 1)
            st = row.stats
            st.draft_calls += k
            st.drafted_tokens += k
            st.decided_tokens += min(m + 1, k)
            st.accepted_tokens += m
            st.rejected_q_zero += int(m < k and q_n[m] == 0.0)
            emitted = out_ids[: m + 1]
            rnd = RoundTrace(
                index=st.rounds,
                k=k,
                draft_ids=d_ids,
                draft_text=[self._text(t) for t in d_ids],
                draft_fates=fates,
                accept_probs=a,
                accept_coins=u[k : 2 * k],
                num_accepted=m,
                next_id=out_ids[m],
                sample_coin=u[2 * k],
                emitted_ids=emitted,
                emitted_text=[],
                emitted_fates=["accepted"] * m + ["recovered" if m < k else "bonus"],
                draft_s=t1 - t0,
                verify_s=t2 - t1,
                positions=positions[b],
                emitted_logprobs=logp[: m + 1],
            )
            out.append((rnd, kl_pi[b]))
        return out

    def _plain_round(
        self, rows: list[_Row], verifier: SequenceCache, clock: dict[str, float]
    ) -> list[tuple[RoundTrace, list[float]]]:
        """One verifier-only step (generate_autoregressive, or when the context leaves no
        room for drafting)."""
        dev = self.device
        t0 = time.perf_counter()
        coins = torch.stack([torch.rand(1, generator=r.generator, device=dev) for r in rows])
        last = torch.tensor([[r.tokens[-1]] for r in rows], device=dev)
        v_logits = verifier.step(last, None, 1)  # [B, 1, V]
        q = self._probs(v_logits)
        tok = sample_from_probs(q[:, 0], coins[:, 0])
        host = torch.stack(
            [
                tok.to(torch.float64),
                coins[:, 0].to(torch.float64),
                _logprobs(v_logits, tok[:, None])[:, 0],
            ],
            1,
        ).tolist()  # one host sync
        t1 = time.perf_counter()
        positions: list[list[PositionTrace]] = [[] for _ in rows]
        if self.record_trace:
            top_q = self._top(q, self.trace_top_n)
            positions = [[PositionTrace(q_ids=t[0][0], q_probs=t[0][1])] for t in top_q]
        t2 = time.perf_counter()
        clock["verify"] += t1 - t0
        clock["record"] += t2 - t1
        out = []
        for b, row in enumerate(rows):
            rnd = RoundTrace(
                index=row.stats.rounds,
                k=0,
                draft_ids=[],
                draft_text=[],
                draft_fates=[],
                accept_probs=[],
                accept_coins=[],
                num_accepted=0,
                next_id=int(host[b][0]),
                sample_coin=host[b][1],
                emitted_ids=[int(host[b][0])],
                emitted_text=[],
                emitted_fates=["sampled"],
                draft_s=0.0,
                verify_s=t1 - t0,
                positions=positions[b],
                emitted_logprobs=[host[b][2]],
            )
            out.append((rnd, [0.0]))
        return out

    def _commit(
        self,
        row: _Row,
        rnd: RoundTrace,
        kl_pi: list[float | None],
        max_new_tokens: int,
        ctx: int,
    ) -> str | None:
        """Append the round's tokens to the row (cut at EOS / the budget / the context) and
        return why the row stops, if it does."""
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
        # Positions j < k emit with distribution pi; the bonus position emits from q (KL 0).
        st.kl_sum += sum(kl_pi[: min(len(emitted), rnd.k)])
        row.tokens.extend(emitted)
        if rnd.k == 0:
            row.pending.extend(emitted)
        elif rnd.num_accepted == rnd.k:
            row.pending = [rnd.draft_ids[-1], emitted[-1]] if stop is None else []
        else:
            row.pending = [emitted[-1]] if stop is None else []
        row.trace.rounds.append(rnd)
        return stop

    def _lazy_head(self, batch: int, verifier: SequenceCache) -> bool:
        """Whether this round computes the verifier's head rows only up to the first rejection
        (`verify_sequential`): by default for one sequence on CPU without a full trace (the
        trace shows q at every position). Otherwise the k + 1 rows come from one head call."""
        if not verifier.lean or self.record_trace:
            return False
        if self.lazy_head is not None:
            return self.lazy_head
        return batch == 1 and self.device.type == "cpu"

    # -- maths helpers ----------------------------------------------------------------------
    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)

    def _emitted_kl(
        self, p: torch.Tensor, q: torch.Tensor, decided: list[int]
    ) -> list[list[float | None]]:
        """KL(pi ‖ q) at the first decided[b] drafted positions of row b, exact from the full
        rows, None after them; 0 where pi = q (T = 0, sps) or when not measured."""
        b, k = p.shape[:2]
        if self.temperature == 0 or self.judge.name == "sps" or not self.measure_kl:
            return [[0.0] * d + [None] * (k - d) for d in decided]
        rows = torch.tensor([i for i in range(b) for _ in range(decided[i])], device=p.device)
        cols = torch.tensor([j for i in range(b) for j in range(decided[i])], device=p.device)
        p_d, q_d = p[rows, cols], q[rows, cols]  # [N, V], N = sum(decided)
        values, out = kl(emitted_distribution(self.judge, p_d, q_d), q_d).tolist(), []
        for d in decided:
            out.append(values[:d] + [None] * (k - d))
            values = values[d:]
        return out

    def _positions(
        self, p: torch.Tensor, q: torch.Tensor, n: torch.Tensor, kl_pi: list[list[float | None]]
    ) -> list[list[PositionTrace]]:
        """Top-N of p, q, h, the divergences and the replay rows, per row and position."""
        k = p.shape[1]
        qk = q[:, :k]
        h = self.judge.adjusted_target(qk, p, n, validate=False)  # [B, k, V]
        kl_h = kl(h, qk).tolist()
        g = n[..., None]
        pn, qn, hn = (x.gather(-1, g)[..., 0].tolist() for x in (p, qk, h))
        top_n, top_m = self.trace_top_n, self.replay_top_m
        tp, tq, th = self._top(p, top_n), self._top(q, top_n), self._top(h, top_n)
        rp, rq = self._top(p, top_m), self._top(q, top_m)
        ids = n.tolist()
        out = []
        for b in range(p.shape[0]):
            row = []
            for j in range(k + 1):
                pos = PositionTrace(q_ids=tq[b][j][0], q_probs=tq[b][j][1])
                pos.replay_q_ids, pos.replay_q_probs = rq[b][j]
                if j < k:
                    d = ids[b][j]
                    pos.p_ids, pos.p_probs = tp[b][j]
                    pos.h_ids, pos.h_probs = th[b][j]
                    pos.draft_id, pos.p_n, pos.q_n, pos.h_n = d, pn[b][j], qn[b][j], hn[b][j]
                    pos.kl_h_q, pos.kl_pi_q = kl_h[b][j], kl_pi[b][j]
                    pos.replay_p_ids, pos.replay_p_probs = rp[b][j]
                    _ensure(pos.replay_p_ids, pos.replay_p_probs, d, pn[b][j])
                    _ensure(pos.replay_q_ids, pos.replay_q_probs, d, qn[b][j])
                row.append(pos)
            out.append(row)
        return out

    @staticmethod
    def _top(x: torch.Tensor, n: int) -> list[list[tuple[list[int], list[float]]]]:
        """[B, J, V] -> per row and position (ids, probs) of the n largest, zeros left out."""
        vals, ids = x.topk(min(n, x.shape[-1]), dim=-1)
        out = []
        for vb, ib in zip(vals.tolist(), ids.tolist(), strict=True):
            row = []
            for v, i in zip(vb, ib, strict=True):
                cut = sum(1 for x in v if x > 0)  # topk sorts, so the zeros are at the end
                row.append((i[:cut], v[:cut]))
            out.append(row)
        return out

    # -- text -------------------------------------------------------------------------------
    def _text(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self.pair.tokenizer.decode([token_id])
            self._texts[token_id] = text
        return text

    def _fill_texts(self, trace: Trace) -> None:
        ids = set()
        for rnd in trace.rounds:
            ids.update(rnd.draft_ids)
            ids.update(rnd.emitted_ids)
            for pos in rnd.positions:
                ids.update(pos.q_ids)
                ids.update(pos.p_ids)
                ids.update(pos.h_ids)
        trace.token_text.update({t: self._text(t) for t in sorted(ids)})

    def _output(self, row: _Row) -> GenerationOutput:
        gen = row.generated
        text = self.pair.tokenizer.decode(gen, skip_special_tokens=True)
        return GenerationOutput(row.prompt, row.prompt_ids, gen, text, row.stats, row.trace)


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """[B, w] -> [B, width], NaN after column w (positions that got no verifier row)."""
    return torch.cat([x, x.new_full((x.shape[0], width - x.shape[1]), float("nan"))], 1)


def _logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids] at T = 1: logits [B, J, V], ids [B, J] -> [B, J] float64."""
    picked = logits.gather(-1, ids[..., None])[..., 0]
    return (picked - torch.logsumexp(logits, -1)).to(torch.float64)


def _ensure(ids: list[int], probs: list[float], token: int, prob: float) -> None:
    """Make sure the drafted token is among a replay row's kept entries (with its exact prob)."""
    if token not in ids:
        ids.append(token)
        probs.append(prob)


def _vocab_size(model: torch.nn.Module) -> int:
    head = model.get_output_embeddings()
    return int(head.out_features if head is not None else model.config.vocab_size)


def _eos_ids(pair: ModelPair) -> set[int]:
    ids: set[int] = set()
    for src in (pair.tokenizer, pair.verifier.generation_config, pair.verifier.config):
        eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(int(e) for e in eos)
    return ids
