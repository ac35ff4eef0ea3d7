"""The Frontier page's sweep files, without Streamlit: the page's own sweep as a sweep file (its
download, in the one format `sweep --export` writes and "Open a sweep file" reads), an opened
file (`open_sweep_file`) and its provenance in words, and the Ray backend an operator may turn
on for the page's own sweeps.

Every word of the provenance comes from the file, which anyone may have written: the page shows
it as plain text (`st.text`), never as Markdown, so a field cannot load a remote image or draw
a link, and each field is cut short so a file cannot fill the page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cactus_core.app.shared.reference import pair_in_words
from cactus_core.experiments.sweeps.file import SweepFile, export_sweep, provenance

# What the page reads of sweep files: through this view, never from experiments directly.
from cactus_core.experiments.sweeps.file import SweepFileError as SweepFileError
from cactus_core.experiments.sweeps.file import load_sweep_file as load_sweep_file
from cactus_core.experiments.sweeps.run import SweepResult

if TYPE_CHECKING:
    from cactus_core.experiments.sweeps.ray_backend import RayBackend

PAGE_COMMAND = "the Frontier page's Run sweep"  # what made a file the page's download wrote
FIELD_CHARS = 200  # the most of one provenance field shown


def page_sweep_file(
    result: SweepResult, device: str, backend: str = "local", workers: int = 1
) -> bytes:
    """The page's sweep as a sweep file (what `sweep --export` writes for the same sweep, with
    the page named as its command)."""
    return export_sweep(result, provenance(PAGE_COMMAND, device, backend, workers))


def _short(text: object) -> str:
    words = " ".join(str(text).split())
    return words if len(words) <= FIELD_CHARS else words[: FIELD_CHARS - 1] + "…"


def sweep_file_in_words(opened: SweepFile) -> str:
    """Where an opened sweep file came from, as plain sentences: its size, device and backend,
    date, machine, commit and command, and the pair by its models' names (the weights' hashes
    stay in the file)."""
    p, c = opened.provenance, opened.config
    workers = int(p["workers"])
    return (
        f"{len(c.settings)} settings × {len(c.prompts)} prompts on {_short(p['device'])} "
        f"({_short(p['backend'])}, {workers} worker{'s' if workers != 1 else ''}), made "
        f"{_short(p['date'][:10])} on {_short(p['machine'])} at commit "
        f"{_short(p['commit'][:10])} with: {_short(p['command'])}. "
        f"Pair: {_short(pair_in_words(opened.pair))}."
    )


def operator_ray_address() -> str | None:
    """The Ray cluster the operator named for the app's sweeps (CACTUS_LAB_RAY_ADDRESS), or
    None. Ray is imported only where it is asked for: the app does not need it."""
    from cactus_core.experiments.sweeps.ray_backend import ray_address

    return ray_address()


def operator_ray_backend(pair_kwargs: dict[str, Any]) -> RayBackend | None:
    """The operator's Ray backend for a pair (`sweep_ray.backend_from_env`)."""
    from cactus_core.experiments.sweeps.ray_backend import backend_from_env

    return backend_from_env(pair_kwargs)
