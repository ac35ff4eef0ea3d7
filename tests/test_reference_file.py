"""A damaged reference sweep file is one clear error, never a traceback in a page, and the
writer can't leave one behind: every way of reading it that fails is a ValueError naming the
file, a gzip bomb is refused in well under a second, and an interrupted write keeps the old
file whole."""

from __future__ import annotations

import gzip
import json
import resource
import signal
import zlib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.experiments.sweeps import reference as ref

APP = Path(__file__).resolve().parent.parent / "app.py"


def _shipped() -> dict:
    return json.loads(gzip.decompress(ref.REFERENCE_FILE.read_bytes()))


def _gz(obj: object) -> bytes:
    return gzip.compress(json.dumps(obj).encode())


def _string_rows() -> bytes:
    data = _shipped()
    data["sweeps"][0]["rows"] = "not rows"
    return _gz(data)


def _row_without_kl() -> bytes:
    data = _shipped()
    del data["sweeps"][1]["rows"][3]["emitted_kl"]
    return _gz(data)


def _short_curve() -> bytes:
    data = _shipped()
    data["sweeps"][0]["own_curves"][2]["curve"]["kl_token"] = [0.1]
    return _gz(data)


DAMAGED = {
    "truncated gzip": lambda: ref.REFERENCE_FILE.read_bytes()[:5000],
    "not gzip": lambda: b"plain text",
    "a JSON list": lambda: _gz([1, 2, 3]),
    "format only": lambda: _gz({"format": 2}),
    "rows a string": _string_rows,
    "a row without its KL": _row_without_kl,
    "a curve of unequal lists": _short_curve,
    "not UTF-8": lambda: gzip.compress(b"\xff\xfe{"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_file_is_one_value_error_naming_it(case, tmp_path):
    path = tmp_path / "reference_sweep.json.gz"
    path.write_bytes(DAMAGED[case]())
    with pytest.raises(ValueError, match="cannot read the reference sweep") as err:
        ref.load_reference(path)
    assert str(path) in str(err.value)


def test_a_gzip_bomb_is_refused_at_the_cap(tmp_path, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: gzip framing
    zeros = b"0" * (1 << 20)
    with path.open("wb") as f:
        for _ in range(48):  # 48 MB unpacked, past the cap, in 200 KB packed
            f.write(packer.compress(zeros))
        f.write(packer.flush())
    unpacked = []
    read = gzip.GzipFile.read

    def counted(self, size=-1):
        piece = read(self, size)
        unpacked.append(len(piece))
        return piece

    monkeypatch.setattr(gzip.GzipFile, "read", counted)
    with pytest.raises(ValueError, match="unpacks to more than"):
        ref.load_reference(path)
    # It stops reading one piece past the cap, never unpacking the rest.
    assert ref.MAX_REFERENCE_JSON_BYTES < sum(unpacked) <= ref.MAX_REFERENCE_JSON_BYTES + (1 << 20)


def test_an_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "reference_sweep.json.gz"
    old = _gz({"format": ref.FORMAT, "old": True})
    path.write_bytes(old)
    # Incompressible: the new file is ~400 KB, and the process may write only 64 KB.
    data = {"blob": [f"{i * 2654435761 % 2**32:08x}" for i in range(60_000)]}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, hard))
    try:
        with pytest.raises(OSError):
            ref.write_reference(data, path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_a_write_then_read_round_trips(tmp_path):
    path = tmp_path / "reference_sweep.json.gz"
    ref.write_reference(_shipped(), path)
    assert ref.load_reference(path).provenance == _shipped()["provenance"]


def test_the_frontier_page_works_with_a_damaged_reference(tmp_path, monkeypatch, tiny_pair_dirs):
    damaged = tmp_path / "reference_sweep.json.gz"
    damaged.write_bytes(_string_rows())
    monkeypatch.setattr(ref, "REFERENCE_FILE", damaged)
    verifier, draft = tiny_pair_dirs
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(verifier))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(draft))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page("pages/frontier.py").run()
    assert not at.exception
    shown = " ".join(m.value for m in [*at.info, *at.caption, *at.warning])
    assert "cannot read the reference sweep" in shown
