"""The Frontier page's sweep-file section: open a portable sweep file (made with `python -m
cactus_core sweep --export FILE`, e.g. on a GPU cluster) and read its frontier here, with the
tuner on it (all prompts and each task's); and the Ray backend the operator may turn on for the
app's own sweeps (CACTUS_LAB_RAY_ADDRESS). Widgets only: the file comes through
cactus_core.app.frontier.sweep_file, its tuner from pages/frontier/tuner_panel.py."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import streamlit as st

from cactus_core.app.frontier import figures as ff
from cactus_core.app.frontier.sweep_file import (
    SweepFile,
    SweepFileError,
    load_sweep_file,
    operator_ray_address,
    operator_ray_backend,
    sweep_file_in_words,
)
from cactus_core.app.frontier.tuner import file_source
from cactus_core.app.shared.settings import AppSettings
from pages.frontier import tuner_panel

if TYPE_CHECKING:
    from cactus_core.app.frontier.sweep_file import RayBackend

OPENED_KEY = "fr_file"  # ((name, SHA-256), SweepFile or its error) of the file last opened


def _opened(name: str, data: bytes) -> SweepFile | None:
    """The file opened, or None with its error shown. Remembered by the bytes' SHA-256 (a file
    changed at the same size is another file), failures too: a rerun reads nothing again."""
    key = (name, hashlib.sha256(data).hexdigest())
    memo = st.session_state.get(OPENED_KEY)
    if memo is None or memo[0] != key:
        try:
            memo = (key, load_sweep_file(data, name))
        except SweepFileError as err:
            memo = (key, str(err))
        st.session_state[OPENED_KEY] = memo
    if isinstance(memo[1], str):
        st.error(memo[1], icon=":material/error:")
        return None
    return memo[1]


def sweep_file_section() -> None:
    """ "Open a sweep file": its frontier, table and per-task tuner, as if it had run here."""
    st.subheader("Open a sweep file")
    upload = st.file_uploader(
        'A sweep file: the "Sweep file (.json)" download of a sweep run here, or '
        "`python -m cactus_core sweep --export FILE` (.json or .json.gz)",
        type=["json", "gz"],
        key="fr_file_upload",
    )
    if upload is None:
        st.caption("Sweep on a GPU cluster, tune here: docs/scale.md says how.")
        return
    opened = _opened(upload.name, upload.getvalue())
    if opened is None:
        return
    result = opened.result
    # Every word of it comes from the file: plain text, never Markdown.
    st.container(key="fr_file_provenance").text(sweep_file_in_words(opened))
    fig = ff.frontier_chart(result.rows(), "tokens_per_call",
                            title="sweep file: tokens per call vs emitted KL")  # fmt: skip
    st.plotly_chart(fig, key="fr_file_tpc")
    tuner_panel.tuner(file_source(result))


@st.cache_resource(show_spinner="Starting the Ray workers…")
def _ray_backend(pair_key: tuple, kwargs_items: tuple) -> RayBackend | None:
    return operator_ray_backend(dict(kwargs_items))


def ray_backend(s: AppSettings) -> RayBackend | None:
    """The operator's Ray backend for this pair (one per pair, kept across reruns), or None
    when CACTUS_LAB_RAY_ADDRESS is unset or a public deployment does not allow it."""
    if operator_ray_address() is None:
        return None
    from pages.shared.pair import pair_load_kwargs

    kwargs = pair_load_kwargs(s)
    return _ray_backend(s.pair_key, tuple(sorted(kwargs.items())))
