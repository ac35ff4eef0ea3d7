"""What a deployment reports, in the lab's definitions (DESIGN.md, "Metrics" and
"Per-position acceptance"), counted where the sampler runs, per rule.

For each setting (a rule and its parameters, `cactus δ=0.1`; past MAX_SETTINGS distinct ones
in a process, later settings pool as "<rule> (other settings)") and draft position j = 1, 2, …:

- reached[j]: rounds whose drafts 1..j−1 were all accepted, so draft j got a decision;
- accepted[j]: those whose draft j was accepted. This is vLLM's own counter
  `num_accepted_tokens_per_pos[j − 1]`, and `rounds` its `num_drafts`;
- kl_sum[j]: the sum over those reached positions of KL(pi ‖ q), pi the rule's exact emitted
  distribution from the position's full p and q (0 for vLLM's own lossless sampler).

From them: the unconditional rate accepted[j] / rounds (vLLM's "per-position acceptance"),
the conditional rate accepted[j] / reached[j], mean acceptance length 1 + Σ accepted / rounds,
and the emitted KL per token: Σ kl_sum / emitted tokens (each round emits accepted + 1
tokens; the bonus token's KL is 0), the lab's "emitted KL per token".

Where they go: `snapshot()` in the process that samples; a log line every
CACTUS_VLLM_LOG_INTERVAL seconds (default 10; 0 turns it off); the JSON file named by
CACTUS_VLLM_METRICS_FILE (rewritten at most once a second and at exit; `{pid}` in the name
is replaced by the process id); and Prometheus counters `cactus:spec_decode_*` with labels
`rule` (the rule's name, not its parameters: one series per rule whatever values requests
ask for) and `position`, which `vllm serve`'s /metrics shows.

CACTUS_VLLM_METRICS: "1" (the default) counts and measures the KL; "counts" counts only (the
KL is then reported as 0); "0" does neither. Counting costs one host sync per step. The KL
costs the exact pi of every decided position: O(V) per position for one-hot drafts under a
ratio rule (pi = h), one sort of the vocabulary per position for a draft model's rows under
the Cactus family (docs/benchmarks.md has the measured cost).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("cactus_vllm")

_FILE_EVERY_S = 1.0
# Settings tallied apart in a process; requests may name any parameter value, so the rounds
# of settings past these pool under their rule's name, and memory stays bounded.
MAX_SETTINGS = 32
OTHER_SETTINGS = "(other settings)"


def _mode() -> str:
    return os.environ.get("CACTUS_VLLM_METRICS", "1").strip().lower()


def counting() -> bool:
    return _mode() not in ("0", "false", "no", "off")


def measuring_kl() -> bool:
    return counting() and _mode() != "counts"


@dataclass
class RuleTally:
    """Counts for one rule label; lists are indexed by position − 1."""

    rounds: int = 0
    emitted_tokens: int = 0
    reached: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    kl_sum: list[float] = field(default_factory=list)

    def add_round(self, num_draft: int, num_accepted: int, kls: list[float]) -> None:
        """One request's round: num_draft drafts, num_accepted of them accepted, and the KL
        of each position that got a decision (min(num_accepted + 1, num_draft) of them)."""
        while len(self.reached) < num_draft:
            self.reached.append(0)
            self.accepted.append(0)
            self.kl_sum.append(0.0)
        self.rounds += 1
        self.emitted_tokens += num_accepted + 1
        for j, value in enumerate(kls):
            self.reached[j] += 1
            self.kl_sum[j] += value
        for j in range(num_accepted):
            self.accepted[j] += 1

    def summary(self) -> dict[str, Any]:
        rounds = self.rounds or 1
        return {
            "rounds": self.rounds,
            "emitted_tokens": self.emitted_tokens,
            "reached": list(self.reached),
            "accepted": list(self.accepted),
            "kl_sum": list(self.kl_sum),
            "unconditional": [a / rounds for a in self.accepted],
            "conditional": [
                a / r if r else None for a, r in zip(self.accepted, self.reached, strict=True)
            ],
            "mean_kl_per_position": [
                s / r if r else None for s, r in zip(self.kl_sum, self.reached, strict=True)
            ],
            "mean_acceptance_length": 1 + sum(self.accepted) / rounds,
            "acceptance_rate": (sum(self.accepted) / sum(self.reached))
            if any(self.reached)
            else None,
            "emitted_kl_per_token": (
                sum(self.kl_sum) / self.emitted_tokens if self.emitted_tokens else 0.0
            ),
        }


class Recorder:
    """Per-rule tallies of one process, with the log line, the file and Prometheus."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tallies: dict[str, RuleTally] = {}
        self.calls = 0  # rejection-sampling steps the plugin's sampler handled
        self._last_log = time.monotonic()
        self._last_file = 0.0
        self._prometheus: Any = None
        self._atexit = False

    def observe(
        self, label: str, rule: str, num_draft: int, num_accepted: int, kls: list[float]
    ) -> None:
        """One round of a request under the setting `label` (`cactus δ=0.1`) of rule `rule`."""
        with self._lock:
            if label not in self.tallies and len(self.tallies) >= MAX_SETTINGS:
                label = f"{rule} {OTHER_SETTINGS}"
            self.tallies.setdefault(label, RuleTally()).add_round(num_draft, num_accepted, kls)
        self._to_prometheus(rule, num_accepted, kls)

    def step_done(self) -> None:
        """After a sampling step: the periodic log line and file."""
        self.calls += 1
        now = time.monotonic()
        interval = float(os.environ.get("CACTUS_VLLM_LOG_INTERVAL", "10") or 0)
        if interval > 0 and now - self._last_log >= interval:
            self._last_log = now
            self.log()
        if os.environ.get("CACTUS_VLLM_METRICS_FILE") and now - self._last_file >= _FILE_EVERY_S:
            self._last_file = now
            self.write_file()
            if not self._atexit:
                self._atexit = True
                atexit.register(self.write_file)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            rules = {label: t.summary() for label, t in self.tallies.items()}
        return {"pid": os.getpid(), "calls": self.calls, "rules": rules}

    def reset(self) -> None:
        with self._lock:
            self.tallies.clear()
            self.calls = 0

    def log(self) -> None:
        for label, s in self.snapshot()["rules"].items():
            logger.info(
                "Cactus metrics [%s]: rounds %d, mean acceptance length %.2f, per-position "
                "acceptance %s (conditional %s), emitted KL %.4f nats/token",
                label,
                s["rounds"],
                s["mean_acceptance_length"],
                ", ".join(f"{x:.3f}" for x in s["unconditional"]),
                ", ".join("–" if x is None else f"{x:.3f}" for x in s["conditional"]),
                s["emitted_kl_per_token"],
            )

    def write_file(self) -> None:
        name = os.environ.get("CACTUS_VLLM_METRICS_FILE")
        if not name:
            return
        path = name.replace("{pid}", str(os.getpid()))
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cactus-metrics-")
        with os.fdopen(fd, "w") as f:
            json.dump(self.snapshot(), f, indent=1)
        os.replace(tmp, path)

    def _to_prometheus(self, rule: str, num_accepted: int, kls: list[float]) -> None:
        counters = self._counters()
        if counters is None:
            return
        drafts, reached, accepted, kl_sum, emitted = counters
        drafts.labels(rule=rule).inc()
        emitted.labels(rule=rule).inc(num_accepted + 1)
        for j, value in enumerate(kls):
            reached.labels(rule=rule, position=str(j)).inc()
            kl_sum.labels(rule=rule, position=str(j)).inc(value)
        for j in range(num_accepted):
            accepted.labels(rule=rule, position=str(j)).inc()

    def _counters(self) -> tuple[Any, ...] | None:
        if self._prometheus is None:
            try:
                from prometheus_client import Counter
            except ImportError:
                self._prometheus = ()
                return None
            prefix = "cactus:spec_decode_"
            by_rule, by_position = ["rule"], ["rule", "position"]
            self._prometheus = (
                Counter(prefix + "num_drafts", "Rounds with drafts (vLLM's num_drafts).", by_rule),
                Counter(
                    prefix + "num_reached_per_pos",
                    "Drafts that got a decision at each position (0-based).",
                    by_position,
                ),
                Counter(
                    prefix + "num_accepted_tokens_per_pos",
                    "Drafts accepted at each position (vLLM's counter, per rule).",
                    by_position,
                ),
                Counter(
                    prefix + "emitted_kl_nats_per_pos",
                    "Sum of the exact KL(pi ‖ q) over the decided drafts at each position.",
                    by_position,
                ),
                Counter(
                    prefix + "num_emitted_tokens",
                    "Tokens emitted by speculative rounds (accepted + 1 each).",
                    by_rule,
                ),
            )
        return self._prometheus or None


RECORDER = Recorder()


def snapshot() -> dict[str, Any]:
    """This process's per-rule metrics (see the module docstring)."""
    return RECORDER.snapshot()


def reset() -> None:
    RECORDER.reset()


def read_file(path: str) -> dict[str, Any]:
    """A metrics file written by another process (CACTUS_VLLM_METRICS_FILE)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)
