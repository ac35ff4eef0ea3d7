"""Links that reopen a view: which widget settings each page keeps in the URL's query string,
under which short names, and how a query string turns back into widget values.

A `LinkField` ties a URL name to a session-state key (a widget's key) with its type and the
range or choices the widget accepts, so that a hand-edited or stale link can never hand a
widget a value it would refuse: such values are dropped, and the widget keeps its own. The
sidebar's fields are on every page; each page adds its own (`page_fields`). Rule parameters
follow the rule picked, from the rules' metadata.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from cactus_core.app.shared.limits import MAX_PROMPT_CHARS
from cactus_core.app.shared.param_groups import playground_params
from cactus_core.app.shared.positions import PRESETS
from cactus_core.app.shared.settings import DEVICES, EMBEDDED_DRAFT_LABEL
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS
from cactus_core.maths.rules import RULES, Param

Value = str | int | float | bool


@dataclass(frozen=True)
class LinkField:
    name: str  # in the URL
    key: str  # in st.session_state
    kind: type  # str, int, float or bool
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    max_len: int | None = None
    step: float | None = None  # a slider's step: a float is rounded onto it, as the widget would
    # a one-line name (a model's hub id or folder): control characters are refused, since a
    # name ends up in shell commands and Markdown, where a newline starts another line
    one_line: bool = False
    # a rule parameter's widget: a log parameter's float is kept (Param.keep), a linear one's
    # goes to its nearest step
    param: Param | None = None

    def parse(self, raw: str) -> Value | None:
        """The widget value the URL's text stands for; None when the text is not one."""
        try:
            if self.kind is bool:
                if raw not in ("0", "1", "true", "false"):
                    return None
                return raw in ("1", "true")
            value = self.kind(raw)
        except ValueError:
            return None
        if self.kind is float and not math.isfinite(value):
            return None
        # Checked before rounding too: the nearest log step of 1e9 is the top one, and 1e308 ÷
        # a step overflows to infinity, which round() refuses with an OverflowError.
        if not self._in_range(value):
            return None
        # T=1e-300 is T=0 on the slider; a value off its grid would reach the decoder as a
        # setting the widget can never make (and 1e-300 made every probability NaN).
        if self.kind is float and self.param is not None and self.param.log_steps:
            value = self.param.keep(value)  # the slider adds it to its steps
        elif self.kind is float and self.param is not None:
            value = self.param.snap(value)
        elif self.kind is float and self.step:
            base = self.low or 0.0
            value = round(base + round((value - base) / self.step) * self.step, 10)
        if not self._in_range(value):
            return None
        if self.choices is not None and value not in self.choices:
            return None
        if self.max_len is not None and len(value) > self.max_len:
            return None
        if self.one_line and any(unicodedata.category(ch) == "Cc" for ch in value):
            return None
        return value

    def _in_range(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def show(self, value: Value) -> str:
        if self.kind is bool:
            return "1" if value else "0"
        if self.kind is float:
            # ten digits: a slider's 1.0500000000000003 reads 1.05, and no widget steps finer
            return f"{float(value):.10g}"
        return str(value)


# The sidebar's widgets: their keys, defaults and ranges live here, and app.py draws them
# from these, so a link and the widget cannot disagree about what is allowed.
@dataclass(frozen=True)
class Slider:
    key: str
    label: str
    low: float
    high: float
    default: float
    step: float

    @property
    def range(self) -> tuple[float, float]:
        return self.low, self.high


TEMPERATURE = Slider("sb_temperature", "Temperature T", 0.0, 2.0, 0.7, 0.05)
TOP_K = Slider("sb_top_k", "top-k (0 = off)", 0, 1000, 0, 1)
TOP_P = Slider("sb_top_p", "top-p", 0.05, 1.0, 0.95, 0.01)
K = Slider("sb_k", "k (draft tokens per round)", 1, 12, 4, 1)
SEED = Slider("sb_seed", "Seed", 0, 2**31 - 1, 0, 1)
DRAFTING = ("chain", "tree")  # what a round drafts
DRAFTING_KEY = "sb_drafting"
TREE_NODES = Slider(
    "sb_tree_nodes", "Tree nodes", *TreeSettings.RANGES["nodes"], TreeSettings.nodes, 1
)
TREE_DEPTH = Slider(
    "sb_tree_depth", "Tree depth", *TreeSettings.RANGES["depth"], TreeSettings.depth, 1
)
SOURCES = ("Embedded pair (offline)", "Hub id or local folder")
EMBEDDED_DRAFT_KEY = "sb_embedded_draft"  # the embedded pair's draft (EMBEDDED_DRAFTS)
EMBEDDED_DRAFT_LABELS = tuple(d.label for d in EMBEDDED_DRAFTS)
MAX_NAME_URL = 300


def sidebar_fields(public: bool, offered: Sequence[str] = ()) -> list[LinkField]:
    """The sidebar's settings. A public server names models by the operator's labels only."""
    embedded = LinkField("embedded_draft", EMBEDDED_DRAFT_KEY, str, choices=EMBEDDED_DRAFT_LABELS)
    if public:
        labels = tuple(offered)
        pair = [
            LinkField("model", "sb_offer_verifier", str, choices=labels),
            LinkField("draft", "sb_offer_draft", str, choices=(EMBEDDED_DRAFT_LABEL, *labels)),
            embedded,
        ]
    else:
        pair = [
            LinkField("source", "sb_source", str, choices=SOURCES),
            LinkField("verifier", "sb_verifier", str, max_len=MAX_NAME_URL, one_line=True),
            LinkField("draft", "sb_draft", str, max_len=MAX_NAME_URL, one_line=True),
            embedded,
        ]
    numbers = [
        LinkField("T", TEMPERATURE.key, float, *TEMPERATURE.range, step=TEMPERATURE.step),
        LinkField("top_k", TOP_K.key, int, TOP_K.low, TOP_K.high),
        LinkField("top_p", TOP_P.key, float, *TOP_P.range, step=TOP_P.step),
        LinkField("k", K.key, int, K.low, K.high),
        LinkField("seed", SEED.key, int, SEED.low, SEED.high),
        LinkField("drafting", DRAFTING_KEY, str, choices=DRAFTING),
        LinkField("tree_nodes", TREE_NODES.key, int, TREE_NODES.low, TREE_NODES.high),
        LinkField("tree_depth", TREE_DEPTH.key, int, TREE_DEPTH.low, TREE_DEPTH.high),
    ]
    return [*pair, LinkField("device", "sb_device", str, choices=DEVICES), *numbers]


def param_field(name: str, key: str, param: Param) -> LinkField:
    """A rule parameter's widget (pages/shared/rule_picker.param_widget) as a link field: its
    range, and a float rounded to the widget's nearest value (a log step, or a multiple of its
    step; a log parameter's value is kept, `Param.keep`)."""
    if param.integer:
        return LinkField(name, key, int, *param.ui)
    return LinkField(name, key, float, *param.ui, param=param)


def rule_fields(prefix: str, rule: str | None, taken: set[str]) -> list[LinkField]:
    """A rule picker's fields (pages/shared/rule_picker.rule_picker: keys `{prefix}_rule` and
    `{prefix}_{rule}_{param}`); the parameters are the picked rule's, under their own names
    (delta=0.5) unless another field of the page has that name (a rule's T is not the
    sampling T): then under `{rule}.{name}`."""
    fields = [LinkField("rule", f"{prefix}_rule", str, choices=tuple(RULES))]
    if rule in RULES:
        for p in RULES[rule].params_spec:
            name = p.name if p.name not in taken else f"{rule}.{p.name}"
            fields.append(param_field(name, f"{prefix}_{rule}_{p.name}", p))
    return fields


# Page widgets a link restores, by the page's url_path. The Decode page's keys and ranges are
# those of pages/decode.py's widgets.
_PROMPT = {"decode": "dec", "step": "step"}
MAX_NEW = (8, 256)
# Long enough for the built-in prompts' answers (a few sentences) to end at the end token.
DECODE_MAX_NEW = 128
STEP_ROUND_KEY = "step_round"
STEP_INDEX_KEY = "step_index"
# One-shot: open at the first step of a kind (what each opens: step_view.JUMP_TESTS).
STEP_JUMP_KEY = "step_jump"
JUMPS = ("rejection", "bonus", "rescue")
MAX_ROUNDS = 512


def page_fields(page: str, state: Mapping[str, Any]) -> list[LinkField]:
    """The fields page `page` (its url_path) keeps in the URL, for the rule picked in `state`
    (the rule in the link being opened, or the widgets' current one)."""
    taken = {f.name for f in [*sidebar_fields(True), *sidebar_fields(False)]}
    if page in _PROMPT:
        prefix = _PROMPT[page]
        fields = [
            LinkField("prompt", f"{prefix}_prompt", str, max_len=MAX_PROMPT_CHARS),
            LinkField("chat", f"{prefix}_chat", bool),
            LinkField("max_new", f"{prefix}_max_new", int, *MAX_NEW),
        ]
        if page == "step":
            fields += [
                LinkField("round", STEP_ROUND_KEY, int, 0, MAX_ROUNDS),
                LinkField("step", STEP_INDEX_KEY, int, 0, 10_000),
                LinkField("jump", STEP_JUMP_KEY, str, choices=JUMPS),
            ]
        taken |= {f.name for f in fields}
        return [*fields, *rule_fields(prefix, state.get(f"{prefix}_rule"), taken)]
    if page == "playground":
        # a parameter named like a sidebar setting (a rule's T) goes by its first rule's name
        groups = [
            param_field(
                g.key if g.key not in taken else f"{g.rules[0]}.{g.key}", f"pg_{g.key}", g.param
            )
            for g in playground_params()
        ]
        preset = LinkField("preset", "pg_preset", str, choices=tuple(PRESETS))
        return [preset, *groups]
    if page == "frontier":
        # The tuner's rule is left out: its choices are the rules of the sweep on screen.
        return [
            LinkField("budget", "fr_budget", float, 0.0, 10.0),
            LinkField("max_new", "fr_max_new", int, *MAX_NEW),
        ]
    return []


def from_query(fields: Sequence[LinkField], query: Mapping[str, str]) -> dict[str, Value]:
    """session-state key -> value for every field the query names with a valid value."""
    out: dict[str, Value] = {}
    for f in fields:
        if f.name in query:
            value = f.parse(query[f.name])
            if value is not None:
                out[f.key] = value
    return out


def to_query(fields: Sequence[LinkField], state: Mapping[str, Any]) -> dict[str, str]:
    """URL name -> text for every field whose key holds a value in `state`."""
    out: dict[str, str] = {}
    for f in fields:
        value = state.get(f.key)
        if isinstance(value, bool | int | float | str):
            out[f.name] = f.show(value)
    return out


def decode_setting_query(rule: str, params: Mapping[str, float | int]) -> dict[str, str]:
    """The query that opens the Decode page on this rule and these parameter values (the
    tuner's "Use on Decode"); a log parameter's value is kept as given (`Param.keep`)."""
    prefix = _PROMPT["decode"]
    state = {f"{prefix}_rule": rule, **{f"{prefix}_{rule}_{k}": v for k, v in params.items()}}
    return to_query(page_fields("decode", state), state)


def query_fields(
    page: str, state: Mapping[str, Any], public: bool, offered: Sequence[str] = ()
) -> list[LinkField]:
    """Every field of a page: the sidebar's, then its own."""
    return [*sidebar_fields(public, offered), *page_fields(page, state)]


def restore(
    page: str,
    query: Mapping[str, str],
    state: Mapping[str, Any],
    public: bool,
    offered: Sequence[str] = (),
) -> dict[str, Value]:
    """The widget values a link stands for: the rule first, so that its parameters are read
    under the rule the link names."""
    rule = [f for f in page_fields(page, {}) if f.name == "rule"]
    merged = {**state, **from_query(rule, query)}
    return from_query(query_fields(page, merged, public, offered), query)


def link(url: str, page: str, query: Mapping[str, str]) -> str:
    """The address of page `page` ("" for the Overview) with the query. `url` is the address
    the browser shows (st.context.url, without its query): the app's root, or the root and
    this page's own path, depending on how the page was opened."""
    parts = urlsplit(url)
    root = parts.path.rstrip("/")
    if page and (root == page or root.endswith(f"/{page}")):
        root = root[: -len(page)].rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"{root}/{page}", urlencode(query), ""))


def kept_keys(public: bool, offered: Sequence[str] = ()) -> tuple[str, ...]:
    """The session-state keys of every widget a link can set, on every page and for every
    rule: the widgets whose values must outlive a visit to another page. (Streamlit forgets a
    widget's value on a run that does not draw it; app.py hands these back to it each run.)"""
    keys: dict[str, None] = {}
    for page in (*_PROMPT, "playground", "frontier"):
        states: list[dict[str, Any]] = [{}]
        if page in _PROMPT:
            states = [{f"{_PROMPT[page]}_rule": rule} for rule in RULES]
        for state in states:
            for f in query_fields(page, state, public, offered):
                if f.key not in (STEP_JUMP_KEY,):  # one-shot, not a widget
                    keys[f.key] = None
    return tuple(keys)
