"""What the sidebar holds, and the rules as the widgets offer them (all from the metadata)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.embedded_drafts import (
    DEFAULT_EMBEDDED_DRAFT,
    REFERENCE_EMBEDDED_DRAFT,
    embedded_draft,
)
from cactus_core.engine.loading.load_args import resolve_device
from cactus_core.maths.rules import RULES, Param, rule_class
from cactus_core.maths.sampling import SamplingSettings

# The prompt Decode and Step through open with: one of typical acceptance for the embedded pair
# (about 2 tokens per verifier call at the defaults, like the built-in prompts' median) whose
# answer ends well inside the default length.
DEFAULT_PROMPT = "How do cacti survive in the desert? Answer in three sentences."

DEVICES = ("auto", "cpu", "cuda")
EMBEDDED_DRAFT_LABEL = "the embedded draft"


@dataclass(frozen=True)
class AppSettings:
    """The sidebar: which pair, on which device, sampled how. verifier None: the embedded pair;
    draft None: the embedded draft (it needs a verifier with SmolLM2's tokenizer). Sampling is
    validated by SamplingSettings itself, so the app cannot accept what the decoder refuses."""

    verifier: str | None = None
    draft: str | None = None
    device: str = "auto"
    # With the embedded pair (verifier None): which shipped draft, an EMBEDDED_DRAFTS label.
    embedded_draft: str = DEFAULT_EMBEDDED_DRAFT
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    # What the pages call the models instead of their sources: a public server names them by
    # the operator's labels, so a folder's server path is never shown. None: the sources.
    verifier_label: str | None = None
    draft_label: str | None = None
    # Draft a tree each round instead of a chain (needs a feature draft); None: a chain.
    tree: TreeSettings | None = None

    def __post_init__(self) -> None:
        if self.verifier is None and self.draft is not None:
            raise ValueError("a draft needs a verifier; leave both empty for the embedded pair")
        embedded_draft(self.embedded_draft)  # ValueError for an unknown label
        if self.device not in DEVICES:
            raise ValueError(f"device must be {', '.join(DEVICES)}, got {self.device!r}")
        if not isinstance(self.sampling, SamplingSettings):
            raise ValueError("sampling must be a SamplingSettings")
        feature = self.verifier is None and embedded_draft(self.embedded_draft).feature_draft
        if self.tree is not None and not feature:
            raise ValueError(
                "a draft tree needs a feature draft: pick an embedded feature draft, or chain"
            )

    @property
    def k(self) -> int:
        return self.sampling.k

    @property
    def seed(self) -> int:
        return self.sampling.seed

    def decoder_kwargs(self) -> dict[str, Any]:
        """SpeculativeDecoder's sampling keywords (the seed goes to generate instead)."""
        s = self.sampling
        kwargs = {"k": s.k, "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p}
        return kwargs | ({"tree": self.tree} if self.tree is not None else {})

    @property
    def pair_key(self) -> tuple[str | None, str | None, str, str | None]:
        """What identifies a loaded pair: the cache key for the process-wide model cache (the
        embedded draft's label only with the embedded verifier)."""
        embedded = self.embedded_draft if self.verifier is None else None
        return (self.verifier, self.draft, self.device, embedded)

    @property
    def on_reference_pair(self) -> bool:
        """Whether this is the pair the shipped reference sweep was measured on: the embedded
        verifier with the reference's draft and dtype (REFERENCE_EMBEDDED_DRAFT), on a CPU."""
        if self.verifier is not None or self.embedded_draft != REFERENCE_EMBEDDED_DRAFT:
            return False
        try:
            return resolve_device(self.device).type == "cpu"
        except ValueError:  # "cuda" asked for on a machine without one: no pair loads
            return False

    @property
    def pair_label(self) -> str:
        verifier = self.verifier_label or self.verifier
        if verifier is None:
            return f"embedded pair ({self.embedded_draft})"
        draft = self.draft_label or self.draft
        return f"{verifier} + {draft or EMBEDDED_DRAFT_LABEL}"


@dataclass(frozen=True)
class PublicPair:
    """A pair picked from a public server's offer: the sources to load and what to call them."""

    verifier: str | None
    draft: str | None
    verifier_label: str
    draft_label: str | None  # None with the embedded pair (it comes whole)


def public_draft_choices(choices: dict[str, str | None]) -> list[str]:
    """The drafts a visitor may pair with an offered verifier: the embedded draft first, then
    every offered model (the embedded pair itself is not a draft)."""
    return [EMBEDDED_DRAFT_LABEL, *(label for label, spec in choices.items() if spec is not None)]


def public_pair(
    choices: dict[str, str | None], verifier_label: str, draft_label: str | None
) -> PublicPair:
    """The sources behind the labels a visitor picked. `choices` is the deployment policy's
    offer (label -> spec, None for the embedded pair). A label that is not on offer (a forged
    widget value) is refused with a ValueError that names no source."""
    if verifier_label not in choices:
        raise ValueError("choose a verifier from the list")
    verifier = choices[verifier_label]
    if verifier is None:
        return PublicPair(None, None, verifier_label, None)
    draft_label = draft_label or EMBEDDED_DRAFT_LABEL
    if draft_label == EMBEDDED_DRAFT_LABEL:
        return PublicPair(verifier, None, verifier_label, draft_label)
    if draft_label not in choices or choices[draft_label] is None:
        raise ValueError("choose a draft from the list")
    return PublicPair(verifier, choices[draft_label], verifier_label, draft_label)


def available_devices() -> list[str]:
    """The devices the sidebar offers: cuda only where there is one."""
    import torch

    return [d for d in DEVICES if d != "cuda" or torch.cuda.is_available()]


# ---------------------------------------------------------------------------------------------
# Rules as widgets see them


def rules_markdown() -> str:
    """A bullet list of every rule and what it verifies against."""
    return "\n".join(f"- **{name}**: {cls.card.description}" for name, cls in RULES.items())


def param_value(param: Param, value: float) -> float | int:
    """A widget's value as make_rule wants it (widgets hand back floats for integers)."""
    return param.coerce(value)


def default_params(name: str) -> dict[str, float | int]:
    """The parameters a rule starts from: one default per parameter, the rule's own."""
    return {p.name: param_value(p, p.default) for p in rule_class(name).params_spec}


def swept_rules() -> list[str]:
    """Every rule a sweep can run, in the registry's order."""
    return list(RULES)


def replayable_rules() -> list[str]:
    """The rules a trace can be replayed under: all but those that read the verifier's hidden
    states, which a trace does not keep."""
    return [name for name, cls in RULES.items() if not cls.caps.reads_hidden]


def tunable_rules() -> list[str]:
    """The rules whose first parameter trades KL for acceptance monotonically (the tuner's)."""
    return [name for name, cls in RULES.items() if cls.caps.tunable]


def grid_text(name: str) -> str | None:
    """The default sweep grid of a rule as the grid box shows it; None for a rule without a
    parameter (one setting)."""
    param = rule_class(name).swept()
    return None if param is None else ", ".join(f"{v:g}" for v in param.grid)
