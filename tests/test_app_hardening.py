"""Issue 15's app items, as AppTests on the tiny random pair: a public server offers only its
allow-list and says one fixed sentence when a load fails; the sidebar never lists an evicted
pair and a damaged model folder is a message, not a traceback; the Frontier's upload and
sweep size end in messages; the Playground table refuses sums past the float range (fuzzed);
the Decode page caps the prompt length."""

from __future__ import annotations

import json
import random
import shutil
import threading
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from cactus_core.app.playground.comparison import (
    compare_rules,
    headlines,
    playground_figures,
    playground_rules,
    taylor_gap,
)
from cactus_core.app.shared import limits
from cactus_core.app.shared.pair_cache import PairCache
from cactus_core.app.shared.positions import Position, parse_table, with_drafted
from cactus_core.app.shared.request import DecodeRequest
from cactus_core.app.shared.settings import EMBEDDED_DRAFT_LABEL, AppSettings, public_pair
from cactus_core.engine.loading.deployment import (
    ALLOWED_ENV,
    EMBEDDED_LABEL,
    PUBLIC_ENV,
    PUBLIC_LOAD_ERROR,
    deployment_policy,
)
from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS
from cactus_core.maths.rules import make_rule
from pages.shared import pair as pair_page
from tests.overlap import CountedLock

APP = Path(__file__).resolve().parent.parent / "app.py"
SECRET = "SECRET-51c9"  # planted in damaged files; must never reach the page
CUSTOM = "Hub id or local folder"


def page_text(node) -> str:
    """Everything the app sent for the page: every element's protobuf, sidebar included."""
    parts = []
    proto = getattr(node, "proto", None)
    if proto is not None:
        parts.append(str(proto))
    for child in getattr(node, "children", {}).values():
        parts.append(page_text(child))
    return "\n".join(parts)


def _all_text(at: AppTest) -> str:
    return page_text(at._tree)


def _copy_pair(tiny_pair_dirs, folder: Path) -> tuple[str, str]:
    shutil.copytree(tiny_pair_dirs[0], folder / "verifier")
    shutil.copytree(tiny_pair_dirs[1], folder / "draft")
    return str(folder / "verifier"), str(folder / "draft")


def _overview(**state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in {"sb_device": "cpu", **state}.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception
    return at


def _decode_page(**state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in {"sb_device": "cpu", **state}.items():
        at.session_state[key] = value
    at.run()
    at.switch_page("pages/decode.py").run()
    assert not at.exception
    return at


# ------------------------------------------------------------------------ 1. public sidebar


@pytest.fixture
def public(tiny_pair_dirs, tmp_path, monkeypatch):
    """A public server offering the tiny pair, a folder that does not exist and one that
    exists but holds no model: the folders' paths must never reach a visitor."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": SECRET}))
    allowed = {
        "Tiny verifier": tiny_pair_dirs[0],
        "Tiny draft": tiny_pair_dirs[1],
        "Gone": tmp_path / "gone",
        "Broken": broken,
    }
    monkeypatch.setenv(PUBLIC_ENV, "1")
    monkeypatch.setenv(ALLOWED_ENV, ",".join(f"{k}={v}" for k, v in allowed.items()))
    monkeypatch.delenv("CACTUS_LAB_VERIFIER", raising=False)
    monkeypatch.delenv("CACTUS_LAB_DRAFT", raising=False)
    pair_page._PAIRS.clear()
    yield [str(p) for p in allowed.values()] + [str(Path.home()), str(tmp_path)]
    pair_page._PAIRS.clear()


def test_public_sidebar_offers_only_the_allow_list_and_no_text_box(public):
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert len(at.sidebar.text_input) == 0 and len(at.text_input) == 0
    assert not [r for r in at.sidebar.radio if r.key == "sb_source"]  # no "hub id or folder"
    offered = at.sidebar.selectbox(key="sb_offer_verifier")
    assert offered.options == list(deployment_policy().choices())
    assert offered.value == EMBEDDED_LABEL
    # The embedded verifier's shipped drafts are offered; a folder of one's own is not.
    shipped = [d.label for d in EMBEDDED_DRAFTS]
    assert at.sidebar.selectbox(key="sb_embedded_draft").options == shipped
    offered.set_value("Tiny verifier").run()
    assert not [b for b in at.sidebar.selectbox if b.key == "sb_embedded_draft"]
    drafts = at.sidebar.selectbox(key="sb_offer_draft")
    assert drafts.options == [EMBEDDED_DRAFT_LABEL, "Tiny verifier", "Tiny draft", "Gone", "Broken"]
    text = _all_text(at)
    assert not any(secret in text for secret in public)


def test_public_ignores_a_forced_path(public):
    # The free-text keys of a private server, forced into the session: a public sidebar never
    # reads them, so the pair stays the one picked from the offer.
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["sb_source"] = CUSTOM
    at.session_state["sb_verifier"] = str(Path.home() / ".ssh")
    at.session_state["sb_draft"] = "/etc"
    at.run()
    assert not at.exception
    s = at.session_state["settings"]
    assert s.verifier is None and s.draft is None
    with pytest.raises(ValueError) as err:
        public_pair(deployment_policy().choices(), str(Path.home() / ".ssh"), None)
    assert str(Path.home()) not in str(err.value)


@pytest.mark.parametrize("pick", ["Gone", "Broken"])
def test_public_load_errors_are_one_sentence_whatever_went_wrong(public, pick):
    at = _decode_page(sb_offer_verifier=pick, sb_offer_draft="Tiny draft")
    assert {e.value for e in at.error} == {PUBLIC_LOAD_ERROR}  # on the page and the sidebar
    assert [e.value for e in at.sidebar.error] == [PUBLIC_LOAD_ERROR]
    text = _all_text(at)
    assert SECRET not in text
    assert not any(secret in text for secret in public)


def test_public_pair_is_named_by_its_labels_not_its_paths(public):
    at = _decode_page(sb_offer_verifier="Tiny verifier", sb_offer_draft="Tiny draft", dec_max_new=8)
    assert not at.error
    at.button(key="dec_go").click().run()
    assert not at.exception and not at.error
    run = at.session_state["decode_run"]
    assert run.trace.meta["verifier"] == "Tiny verifier"
    assert run.trace.meta["draft"] == "Tiny draft"
    assert any("Tiny verifier verifying Tiny draft" in c.value for c in at.caption)
    text = _all_text(at)
    assert not any(secret in text for secret in public)
    # Another visitor's sidebar says what is loaded, by its labels. (AppTest shows app.py's
    # sidebar on the Overview only, so that is where it is read.)
    other = _overview(sb_offer_verifier="Tiny verifier", sb_offer_draft="Tiny draft")
    assert [c.value for c in other.sidebar.caption] == [
        "Loaded: Tiny verifier + Tiny draft (cpu, torch.float32)"
    ]
    assert not any(secret in _all_text(other) for secret in public)


def test_malformed_deployment_settings_run_no_page_and_echo_nothing(monkeypatch):
    monkeypatch.setenv(PUBLIC_ENV, "1")
    monkeypatch.setenv(ALLOWED_ENV, f"={SECRET}")  # an empty label: the operator's mistake
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "This server's model settings are invalid; its operator's log says why."
    ]
    assert not at.selectbox and not at.text_input  # nothing to pick, nothing loads
    assert SECRET not in _all_text(at)


# ------------------------------------------------------------------------ 4. pair cache


def test_pair_cache_is_an_lru_whose_labels_are_its_contents():
    cache: PairCache[str] = PairCache(max_entries=2)
    for key in "abc":
        assert cache.get(key, lambda key=key: key.upper(), label=lambda v: f"<{v}>") == key.upper()
    assert cache.keys() == ["b", "c"] and "a" not in cache
    assert cache.label("a") is None and cache.label("b") == "<B>"
    cache.get("b", lambda: pytest.fail("b is cached"))  # a hit makes b the most recent
    cache.get("d", lambda: "D")
    assert cache.keys() == ["b", "d"]

    def fail():
        raise OSError("gone")

    with pytest.raises(OSError):
        cache.get("e", fail)
    assert "e" not in cache and cache.keys() == ["b", "d"]  # a failure caches nothing


def test_pair_cache_loads_a_key_once_for_concurrent_callers():
    cache: PairCache[int] = PairCache(max_entries=2)
    key_lock, calls = CountedLock(), []

    class Loading(dict):  # every key's load lock is the counted one
        def setdefault(self, key, default=None):
            return super().setdefault(key, key_lock)

    cache._loading = Loading()

    def load():
        calls.append(1)
        assert key_lock.wait_for(4)  # the other three wait on this load, not before it
        return 7

    threads = [threading.Thread(target=cache.get, args=("k", load)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert calls == [1] and cache.label("k") == "7" and key_lock.arrived == 4


def test_an_evicted_pair_is_not_listed_and_its_reload_is_an_error(tiny_pair_dirs, tmp_path):
    pair_page._PAIRS.clear()
    pairs = [_copy_pair(tiny_pair_dirs, tmp_path / name) for name in ("a", "b", "c")]
    at = None
    for verifier, draft in pairs:
        state = {"sb_source": CUSTOM, "sb_verifier": verifier, "sb_draft": draft}
        at = _decode_page(**state)
        assert not at.error
    assert len(pair_page._PAIRS.keys()) == 2  # the first pair was evicted
    first = {"sb_source": CUSTOM, "sb_verifier": pairs[0][0], "sb_draft": pairs[0][1]}
    last = {"sb_source": CUSTOM, "sb_verifier": pairs[2][0], "sb_draft": pairs[2][1]}
    assert _overview(**last).sidebar.caption[0].value.startswith("Loaded:")
    assert _overview(**first).sidebar.caption[0].value == "Models load on the Decode page."
    shutil.rmtree(tmp_path / "a")
    at = _decode_page(**first)  # the reload runs inside the error handling
    assert any("Could not load" in e.value for e in at.sidebar.error)
    pair_page._PAIRS.clear()


def _unpicklable_bin(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04c" + SECRET.encode() + b"\nboom\n")


def _string_in_config(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = SECRET
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("damage", [_unpicklable_bin, _string_in_config])
def test_a_damaged_model_folder_is_a_sidebar_message(tiny_pair_dirs, tmp_path, damage):
    verifier, draft = _copy_pair(tiny_pair_dirs, tmp_path)
    damage(Path(verifier))
    at = _decode_page(sb_source=CUSTOM, sb_verifier=verifier, sb_draft=draft)
    assert any("Could not load" in e.value for e in at.sidebar.error)
    assert SECRET not in _all_text(at)


def test_load_error_message_never_echoes_an_unknown_error():
    s = AppSettings(verifier="/models/v", draft="/models/d", device="cpu")
    message = pair_page.load_error_message(s, TypeError(f"bad value {SECRET!r}"))
    assert SECRET not in message and "TypeError" in message


# ------------------------------------------------------------------------ 2. frontier upload


@pytest.fixture
def frontier_env(tiny_pair_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(tiny_pair_dirs[0]))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(tiny_pair_dirs[1]))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _upload(name: str, data: bytes) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page("pages/frontier.py").run()
    at.radio(key="fr_source").set_value("Upload a file").run()
    at.file_uploader(key="fr_upload").upload(name, data, "text/plain").run()
    assert not at.exception
    return at


def test_an_upload_of_one_prompt_needs_no_slider(frontier_env):
    at = _upload("one.txt", b"Why do cacti have spines?\n")
    assert not at.error
    assert any(c.value.startswith("1 prompt:") for c in at.caption)
    assert at.button(key="fr_run")  # the sweep is ready to run


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 100_000 + b"\n", "nested too deeply"),
        (b'{"prompt": "x\\ud800y"}\n', "lone surrogate"),
        (b"\xff\xfe\n", "not valid UTF-8"),
    ],
)
def test_a_bad_upload_is_a_message(frontier_env, data, message):
    at = _upload("bad.jsonl", data)
    assert any(message in e.value for e in at.error)


def test_a_prompt_longer_than_the_context_is_named_before_the_sweep(frontier_env):
    at = _upload("long.txt", b"short prompt\n" + b"y" * 400 + b"\n")
    at.slider(key="fr_n_2").set_value(2).run()
    shown = len(at.dataframe)  # the reference sweep's tables, there before any run
    at.button(key="fr_run").click().run()
    assert not at.exception
    assert any("prompt 2" in e.value and "context" in e.value for e in at.error)
    assert len(at.dataframe) == shown  # nothing ran: no sweep table joined them


def test_a_value_error_during_the_sweep_is_a_message_and_keeps_finished_chunks(
    frontier_env, monkeypatch
):
    # Without the check before the run, the library refuses the long prompt mid-sweep.
    monkeypatch.setattr(limits, "check_prompts_fit", lambda *a, **k: None)
    at = _upload("long.txt", b"short prompt\n" + b"y" * 400 + b"\n")
    at.slider(key="fr_n_2").set_value(2).run()
    at.slider(key="fr_max_new").set_value(8)
    at.slider(key="fr_chunk").set_value(1)
    at.multiselect(key="fr_rules").set_value(["sps"]).run()
    at.button(key="fr_run").click().run()
    assert not at.exception
    errors = [e.value for e in at.error if e.value.startswith("The sweep stopped")]
    assert errors and "chunks are cached" in errors[0]


def test_settings_times_prompts_is_capped_and_said(frontier_env, monkeypatch):
    lines = b"".join(b"prompt %d\n" % i for i in range(1000))
    at = _upload("many.txt", lines)
    at.slider(key="fr_n_1000").set_value(1000)
    at.multiselect(key="fr_rules").set_value(["cactus"]).run()
    grid = ", ".join(f"{i / 1000:g}" for i in range(1000))
    # Refused before anything is planned or looked up (a million runs made a rerun take 22 s)
    looked_up = []
    monkeypatch.setattr(
        "cactus_core.experiments.sweeps.run.cached_chunks", lambda *a: looked_up.append(a) or (0, 0)
    )
    at.text_input(key="fr_grid_cactus").set_value(grid).run()
    assert not looked_up
    assert not at.exception
    cap = f"{limits.MAX_SWEEP_RUNS:,}"
    assert any("1,000 settings × 1,000 prompts" in e.value and cap in e.value for e in at.error)
    assert not any(b.key == "fr_run" for b in at.button)


def test_the_sweep_cap_is_stated_next_to_run(frontier_env):
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page("pages/frontier.py").run()
    assert not at.exception
    assert any(f"at most {limits.MAX_SWEEP_RUNS:,}" in c.value for c in at.caption)


# ------------------------------------------------------------------------ 3. playground table


def test_a_table_summing_past_the_float_range_is_a_message():
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("pages/playground.py").run()
    at.radio(key="pg_source").set_value("Edit a table").run()
    at.session_state["pg_table"] = {
        "edited_rows": {0: {"p (draft)": 1e308}, 1: {"p (draft)": 1e308}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception
    assert any("sums past" in e.value for e in at.error)
    assert not any("normalised" in i.value for i in at.info)


SPECIALS = [
    float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 5e-324, 1e-45, 0.0, -0.0,
    10**400, -1, None, True, "0.5", "abc", "", "1e400", "nan", " 2 ", [], {}, 3 + 4j,
]  # fmt: skip


def _wild_value(rng: random.Random) -> object:
    kind = rng.random()
    if kind < 0.4:
        return rng.choice(SPECIALS)
    if kind < 0.7:
        return rng.uniform(-1, 1) * 10 ** rng.randint(-330, 308)
    if kind < 0.8:
        return rng.randint(-(10**6), 10**6)
    return "".join(rng.choice("0123456789.e-+xn ") for _ in range(rng.randint(0, 8)))


def _value(rng: random.Random, wild: float) -> object:
    """A weight of any size (tiny, huge, sums that overflow), or with chance `wild` anything."""
    if rng.random() < wild:
        return _wild_value(rng)
    return rng.random() * 10.0 ** rng.choice([0, 0, 0, -300, -40, 5, 300, 308])


def _label(rng: random.Random, i: int, wild: float) -> object:
    if rng.random() < wild:
        return rng.choice(["a", "t0", "", None, " ", 7, 1.5, "\u00e9", "\x00", "t1"])
    return f"t{i}"


def test_fuzz_parse_table_ends_in_a_position_or_a_value_error():
    rng = random.Random(15)
    outcomes = {"position": 0, "error": 0}
    for _ in range(10_000):
        n = rng.randint(0, 7)
        wild = rng.choice([0.0, 0.0, 0.05, 0.2, 0.6])
        lengths = [n + (rng.random() < wild) * rng.choice([-1, 1]) for _ in range(3)]
        labels = [_label(rng, i, wild) for i in range(max(0, lengths[0]))]
        p = [_value(rng, wild) for _ in range(max(0, lengths[1]))]
        q = [_value(rng, wild) for _ in range(max(0, lengths[2]))]
        try:
            pos = parse_table(labels, p, q)
        except ValueError:
            outcomes["error"] += 1
            continue
        outcomes["position"] += 1
        assert isinstance(pos, Position)
        for col in (pos.p, pos.q):
            assert torch.isfinite(col).all() and (col >= 0).all()
            assert abs(float(col.sum()) - 1) < 1e-3
    assert min(outcomes.values()) > 500, outcomes  # both outcomes are exercised


def test_extreme_tables_that_parse_are_drawn_without_error():
    # Weights at the edges of the float range, zeros and subnormals: whatever parse_table
    # accepts, the Playground computes (every rule, the headlines, the figures, the Taylor gap).
    rng = random.Random(7)
    drawn = 0
    while drawn < 15:
        n = rng.randint(2, 5)
        choices = [0.0, 1.0, 5e-324, 1e-300, 1e300, 0.3]
        p, q = ([rng.choice(choices) for _ in range(n)] for _ in range(2))
        try:
            pos = parse_table([f"t{i}" for i in range(n)], p, q)
        except ValueError:
            continue
        pos = with_drafted(pos, rng.randrange(n))
        rows = compare_rules(pos, playground_rules())
        headlines(pos, rows)
        playground_figures(pos, rows, rows[0])
        taylor_gap(pos, 0.5)
        drawn += 1


# ------------------------------------------------------------------------ 5. decode prompt cap


def test_a_prompt_over_the_token_cap_is_refused_naming_the_cap(tiny_pair_dirs, monkeypatch):
    monkeypatch.setattr(limits, "MAX_PROMPT_TOKENS", 50)
    verifier, draft = map(str, tiny_pair_dirs)
    at = _decode_page(sb_source=CUSTOM, sb_verifier=verifier, sb_draft=draft, dec_prompt="z" * 100)
    at.button(key="dec_go").click().run()
    assert not at.exception
    assert any("at most 50 tokens" in e.value for e in at.error)
    assert "decode_run" not in at.session_state


def test_a_prompt_over_the_character_cap_is_refused_before_tokenising(tiny_pair_dirs):
    # The text box stops at MAX_PROMPT_CHARS (Streamlit trims a longer value to it); what is
    # left is still over the token cap, and the message names the cap.
    verifier, draft = map(str, tiny_pair_dirs)
    at = _decode_page(
        sb_source=CUSTOM,
        sb_verifier=verifier,
        sb_draft=draft,
        dec_prompt="z" * (limits.MAX_PROMPT_CHARS + 1),
    )
    at.button(key="dec_go").click().run()
    assert not at.exception
    cap = f"at most {limits.MAX_PROMPT_TOKENS:,} tokens"
    assert any(cap in e.value for e in at.error), [e.value for e in at.error]
    assert "decode_run" not in at.session_state
    # A longer prompt that reaches the request anyway is refused before any tokenising.
    with pytest.raises(ValueError, match=f"{limits.MAX_PROMPT_CHARS:,} characters"):
        DecodeRequest("z" * (limits.MAX_PROMPT_CHARS + 1), AppSettings(), make_rule("sps"), 8, True)
