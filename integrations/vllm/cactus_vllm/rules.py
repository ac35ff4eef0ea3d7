"""Which rule a request runs under, and how vLLM's sampler can run it.

A rule is written as JSON, the names and parameters exactly as `cactus_core.make_rule` takes
them: `{"rule": "cactus", "delta": 0.1}`. It comes from, in order of precedence:

1. the request: `SamplingParams(extra_args={"cactus_rule": {...}})`, or over vLLM's HTTP
   API `"vllm_xargs": {"cactus_rule": "<the same as a JSON string>"}` (its values are flat);
2. the deployment: `speculative_config={..., "cactus_rule": {...}}` (taken out of the
   speculative config before vLLM checks it, see `request_rules.py`) or the environment variable
   `CACTUS_VLLM_RULE`;
3. none: vLLM's own lossless sampler.

Each rule gets one of four paths (`plan`):

- "stock": h = q on every probe row, within 1e-7 (`sps`; δ = 0 of `cactus`, `cactus-exact`
  and `cactus-adaptive`; `interp` α = 0; `optimal` budget 0, …): vLLM's own function runs,
  untouched. (1e-7 covers the root finders' tolerance and is far below any measurable
  change of a decision.)
- "log_h": a(n) = min(1, h_n / p_n) and residual normalise((h − p)+), checked on probe rows
  through the rule's public methods; vLLM's sampler runs on log h in place of the target
  logits, which gives exactly that rule.
- "pointwise": any other per-token rule (`topk`, `relaxed-topk`): the lab's own `verify`
  decides those rows in torch.
- refused: a rule that decides on the whole draft (`block`), with a message that says why.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from cactus_core.maths.rules import RULE_NAMES, Rule, make_rule

ENV_VAR = "CACTUS_VLLM_RULE"
EXTRA_ARGS_KEY = "cactus_rule"
STOCK_LABEL = "sps"  # what the metrics call rows that ran vLLM's own sampler

STOCK, LOG_H, POINTWISE = "stock", "log_h", "pointwise"
# A spec is a rule name and a few numbers: longer text is refused before it is parsed or
# cached, so that padded or deeply nested specs cost neither memory nor a server error.
MAX_SPEC_CHARS = 2048


class RuleSpecError(ValueError):
    """A rule spec that names no rule, an unknown rule, a bad parameter or a refused rule."""


@dataclass(frozen=True)
class PlannedRule:
    """A rule with the path vLLM's sampler runs it on."""

    rule: Rule
    path: str  # STOCK, LOG_H or POINTWISE

    @property
    def label(self) -> str:
        """The setting, parameters included (`cactus δ=0.1`): what the metrics tally apart."""
        return STOCK_LABEL if self.stock_lossless else self.rule.label

    @property
    def name(self) -> str:
        """The rule's name alone: the Prometheus label, one series per rule however many
        parameter values requests ask for."""
        return STOCK_LABEL if self.stock_lossless else self.rule.name

    @property
    def stock_lossless(self) -> bool:
        return self.path == STOCK and self.rule.caps.lossless


def parse_spec(spec: object, where: str) -> PlannedRule:
    """A rule spec (a mapping, or its JSON text) -> the planned rule; RuleSpecError naming
    `where` the spec came from and the allowed values otherwise."""
    return _parse_canonical(canonical_spec(spec, where), where)


def canonical_spec(spec: object, where: str) -> str:
    """The spec as one canonical JSON text (keys sorted, no padding), the key rules are cached
    under: two spellings of one rule share an entry, and no entry is longer than
    MAX_SPEC_CHARS. RuleSpecError for text over the cap, JSON that is not a spec, and nesting
    (a parameter is a number), all before anything is cached."""
    if isinstance(spec, str):
        if len(spec) > MAX_SPEC_CHARS:
            raise RuleSpecError(
                f"{where}: a rule spec is at most {MAX_SPEC_CHARS} characters, got {len(spec)}"
            )
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise RuleSpecError(f"{where}: not valid JSON ({e.msg}): {spec!r}") from None
        except RecursionError:
            raise RuleSpecError(f"{where}: not a rule spec (nested too deeply)") from None
    if not isinstance(spec, Mapping) or "rule" not in spec:
        raise RuleSpecError(
            f'{where} must be an object like {{"rule": "cactus", "delta": 0.1}} '
            f'with "rule" one of: {", ".join(RULE_NAMES)}; got {_short(spec)}'
        )
    nested = [k for k, v in spec.items() if k != "rule" and not isinstance(v, int | float)]
    if not isinstance(spec["rule"], str) or nested:
        what = "the rule name must be a string" if not nested else f"{nested[0]!r} is no number"
        raise RuleSpecError(f"{where}: a parameter is a number and {what}: {_short(spec)}")
    try:
        text = json.dumps(dict(spec), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity: never a parameter value
        raise RuleSpecError(f"{where}: parameters are finite numbers: {_short(spec)}") from None
    if len(text) > MAX_SPEC_CHARS:
        raise RuleSpecError(f"{where}: a rule spec is at most {MAX_SPEC_CHARS} characters")
    return text


def _short(spec: object) -> str:
    try:
        text = repr(spec)
    except RecursionError:
        text = f"a nested {type(spec).__name__}"
    return text if len(text) <= 200 else text[:200] + "…"


def _parse_canonical(text: str, where: str) -> PlannedRule:
    params = json.loads(text)
    name = params.pop("rule")
    try:
        return plan(make_rule(name, **params))
    except (TypeError, ValueError) as e:  # RuleSpecError (a refused rule) included
        raise RuleSpecError(f"{where}: {e}") from None


@functools.lru_cache(maxsize=256)
def plan(rule: Rule) -> PlannedRule:
    """The path a rule runs on in vLLM (module docstring); RuleSpecError for a refused one."""
    if rule.caps.reads_hidden:
        raise RuleSpecError(
            f"rule {rule.name!r} reads the verifier's hidden states, which vLLM's rejection "
            "sampler is not handed; decode it with cactus_core's SpeculativeDecoder"
        )
    if rule.caps.round_level:
        raise RuleSpecError(
            f"rule {rule.name!r} decides on the whole draft, which vLLM's per-token rejection "
            "sampler cannot express; vLLM has block verification of its own: "
            "speculative_config={'rejection_sample_method': 'block'}"
        )
    if rule.caps.lossless or _h_is_q(rule):
        return PlannedRule(rule, STOCK)
    return PlannedRule(rule, LOG_H if _ratio_rule(rule) else POINTWISE)


def deployment_rule() -> PlannedRule | None:
    """The rule of requests that name none: CACTUS_VLLM_RULE, or None (vLLM's own sampler)."""
    text = os.environ.get(ENV_VAR, "").strip()
    return _parse_env(text) if text else None


@functools.lru_cache(maxsize=8)
def _parse_env(text: str) -> PlannedRule:
    return parse_spec(text, ENV_VAR)


def request_rule(extra_args: Mapping[str, Any] | None) -> PlannedRule | None:
    """A request's own rule from SamplingParams.extra_args, or None when it names none.
    A key that looks like the plugin's but is not (`cactus-rule`, `cactusRule`, any key
    starting with "cactus") is refused: run silently as the deployment's rule, a typo would
    look like a working setting."""
    if not extra_args:
        return None
    lookalike = [k for k in extra_args if _looks_ours(k) and k != EXTRA_ARGS_KEY]
    if lookalike:
        raise RuleSpecError(
            f"SamplingParams.extra_args has {lookalike[0]!r}, which the Cactus plugin does not "
            f'read: the request\'s rule goes under "{EXTRA_ARGS_KEY}"'
        )
    if EXTRA_ARGS_KEY not in extra_args:
        return None
    where = f'SamplingParams.extra_args["{EXTRA_ARGS_KEY}"]'
    # vLLM's HTTP API takes only flat values in `vllm_xargs`: there the spec is a JSON string.
    return _parse_request(canonical_spec(extra_args[EXTRA_ARGS_KEY], where))


def _looks_ours(key: object) -> bool:
    return isinstance(key, str) and key.strip().lower().startswith("cactus")


@functools.lru_cache(maxsize=256)
def _parse_request(text: str) -> PlannedRule:
    return _parse_canonical(text, f'SamplingParams.extra_args["{EXTRA_ARGS_KEY}"]')


# -- probes: what a rule does, read from its public whole-row methods ---------------------------


@functools.lru_cache(maxsize=1)
def _probe_rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, p, n) [R, V], [R, V], [R] in float64: random verifier rows of several peakiness,
    drafts from far (random rows) to near (q perturbed by 1e-2 .. 1e-8), one-hot drafts
    (ngram's), and drafted tokens of high, low and zero draft probability."""
    g = torch.Generator().manual_seed(0)
    v, per = 12, 8
    logits = torch.randn(per, v, generator=g, dtype=torch.float64)
    qs, ps = [], []
    for scale in (0.5, 2.0, 6.0):
        q = torch.softmax(logits * scale, -1)
        far = torch.softmax(torch.randn(per, v, generator=g, dtype=torch.float64) * scale, -1)
        qs += [q, q]
        ps += [far, torch.nn.functional.one_hot(q.argmax(-1).roll(1), v).double()]
        for eps in (1e-2, 1e-5, 1e-8):
            near = q * (1 + eps * torch.randn(per, v, generator=g, dtype=torch.float64)).abs()
            qs.append(q)
            ps.append(near / near.sum(-1, keepdim=True))
    q, p = torch.cat(qs), torch.cat(ps)
    n = torch.multinomial(p, 1, generator=g).squeeze(-1)
    # some drafts on q's mode (which the threshold rules treat apart), where p could draft it
    mode = q.argmax(-1)
    on_mode = (torch.arange(len(n)) % 5 == 0) & (p.gather(-1, mode[:, None])[:, 0] > 0)
    return q, p, torch.where(on_mode, mode, n)


def _h_is_q(rule: Rule) -> bool:
    q, p, n = _probe_rows()
    h = rule.adjusted_target(q, p, n)
    return bool(torch.allclose(h, q, rtol=0.0, atol=1e-7))


def _ratio_rule(rule: Rule) -> bool:
    """a(n) = min(1, h_n / p_n) and the residual is normalise((h − p)+) on every probe row."""
    q, p, n = _probe_rows()
    h = rule.adjusted_target(q, p, n)
    hn, pn = h.gather(-1, n[:, None])[:, 0], p.gather(-1, n[:, None])[:, 0]
    ratio = torch.where(pn > 0, (hn / pn.clamp_min(1e-300)).clamp_max(1.0), torch.ones_like(hn))
    a = rule.accept_probs(q, p, n)
    if not torch.allclose(a, ratio, rtol=0.0, atol=1e-9):
        return False
    # A residual is only drawn where a(n) < 1; where it is within rounding of 1 the residual
    # is a difference of nearly equal numbers, so only rows with real rejections are compared.
    rejectable = a < 1 - 1e-6
    w = (h - p).clamp_min(0.0)
    r_ratio = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
    r = rule.residual(q, p, n)
    return bool(torch.allclose(r[rejectable], r_ratio[rejectable], rtol=0.0, atol=1e-7))
