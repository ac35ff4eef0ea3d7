"""A reference file the pages cannot draw is one ValueError naming it, and the Decode and
Frontier pages stay up with a line saying so: a file nested 100,000 deep (RecursionError) and a
sweep of no rows (the figure builder's ValueError) once took both pages down."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.experiments.sweeps import reference as ref

APP = Path(__file__).resolve().parent.parent / "app.py"


def _shipped() -> dict:
    return json.loads(gzip.decompress(ref.REFERENCE_FILE.read_bytes()))


def _with_rows(rows_of) -> bytes:
    data = _shipped()
    for sweep in data["sweeps"]:
        sweep["rows"] = rows_of(sweep["rows"])
    return gzip.compress(json.dumps(data).encode())


DEPTH = 100_000
UNDRAWABLE = {
    "nested 100k deep": lambda: gzip.compress(b"[" * DEPTH + b"]" * DEPTH),
    "an object nested 100k deep": lambda: gzip.compress(b'{"a":' * DEPTH + b"1" + b"}" * DEPTH),
    "no rows": lambda: _with_rows(lambda rows: []),
    "only verifier-only": lambda: _with_rows(lambda rows: rows[:1]),
}


@pytest.mark.parametrize("case", list(UNDRAWABLE))
def test_an_undrawable_reference_is_one_value_error_naming_it(case, tmp_path):
    path = tmp_path / "reference_sweep.json.gz"
    path.write_bytes(UNDRAWABLE[case]())
    with pytest.raises(ValueError, match="cannot read the reference sweep") as err:
        ref.load_reference(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("case", ["nested 100k deep", "no rows"])
@pytest.mark.parametrize("page", ["pages/frontier.py", "pages/decode.py"])
def test_the_pages_stay_up_with_an_undrawable_reference(
    case, page, tmp_path, monkeypatch, tiny_pair_dirs
):
    damaged = tmp_path / "reference_sweep.json.gz"
    damaged.write_bytes(UNDRAWABLE[case]())
    monkeypatch.setattr(ref, "REFERENCE_FILE", damaged)
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(tiny_pair_dirs[0]))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(tiny_pair_dirs[1]))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page(page).run()
    assert not at.exception
    shown = " ".join(m.value for m in [*at.info, *at.caption, *at.warning])
    assert "cannot read the reference sweep" in shown
