"""Large arrays of a local store are restored as copy-on-write maps of their HDF5 blob.

A write in the kernel must never reach the store, a damaged blob must be caught before
any name is bound, and the restored value must behave (type, pickle, fingerprint,
views over it) exactly like the read one.  Object stores and small arrays are read.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from IPython.core.interactiveshell import InteractiveShell
from test_cross_process import run_process

from ipy_resume.fingerprint import Fingerprinter
from ipy_resume.frontends import cli
from ipy_resume.store import Store, blobs, open_store

BIG = 1_000_000  # float64s: 8 MB, above blobs.MAP_MIN


def _hdf5_blob(store_dir: Path, name: str) -> Path:
    store = Store(store_dir)
    (manifest,) = [m for m in store.manifests() if name in m.values]
    ref = manifest.values[name]
    assert ref.kind == "hdf5"
    return Path(store.blobs.path(ref.blob))


def _file_digest(path: Path) -> str:
    return xxhash.xxh3_128(path.read_bytes()).hexdigest()


def test_a_mapped_array_written_in_the_kernel_does_not_change_the_store(isolated: Path) -> None:
    tmp_path = isolated
    cell = f"%%checkpoint big\nimport numpy as np\na = np.arange({BIG}.0)"
    write = "a[:] = -1.0; a[-1] = 7.0"
    checks = {"type": "type(a) is np.ndarray", "first": "float(a[0])", "last": "float(a[-1])"}
    first = run_process(tmp_path, [cell], checks)
    assert first["eval"] == {"type": "True", "first": "0.0", "last": f"{BIG - 1}.0"}
    blob = _hdf5_blob(tmp_path / "store", "a")
    before = _file_digest(blob)

    second = run_process(tmp_path, [cell, write], checks)
    assert "restored" in second["cells"][0]["stderr"], second["cells"][0]
    assert second["eval"] == {"type": "True", "first": "-1.0", "last": "7.0"}

    assert _file_digest(blob) == before  # the write went to private pages
    assert Store(tmp_path / "store").verify() == []
    third = run_process(tmp_path, [cell], checks)  # and a fresh kernel sees the saved values
    assert third["eval"] == first["eval"]
    events = Store(tmp_path / "store").journal().events()
    restores = [e for e in events if e.outcome == "restored"]
    assert [e.detail for e in restores] == ["mapped: a; read: np"] * 2


def test_a_corrupt_mapped_blob_is_detected_before_any_name_is_bound(
    shell: InteractiveShell, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The cell records which of its outputs existed when its body started: when the
    # fallback executes it, none may have been bound by the failed restore.
    cell = (
        "%%checkpoint c\n"
        "open('runs.log', 'a').write(repr([n for n in ('a', 'b') if n in globals()]))\n"
        f"a = np.arange({BIG}.0)\n"
        "b = {'small': 1}"
    )
    runs = isolated / "runs.log"
    shell.run_cell("import numpy as np")
    shell.run_cell(cell)
    shell.run_cell("del a, b")
    blob = _hdf5_blob(isolated / "store", "a")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the array's bytes
    os.chmod(blob, 0o644)
    blob.write_bytes(bytes(data))
    capsys.readouterr()

    shell.run_cell(cell)
    err = capsys.readouterr().err
    assert "is corrupt" in err and "failed its checksum" in err, err
    assert runs.read_text() == "[][]"  # executed twice, nothing bound before either run
    assert float(shell.user_ns["a"][BIG // 2]) == BIG // 2
    assert list((isolated / "store" / "quarantine").iterdir())
    shell.run_cell("del a, b")
    shell.run_cell(cell)  # the re-execution healed it: mapped and restored
    assert "restored" in capsys.readouterr().err
    assert runs.read_text() == "[][]"
    assert float(shell.user_ns["a"][BIG // 2]) == BIG // 2
    assert Store(isolated / "store").verify() == []


ARRAYS: dict[str, Any] = {
    "c_order": np.arange(BIG, dtype=np.float64),
    "fortran": np.asfortranarray(np.arange(BIG, dtype=np.float32).reshape(1000, 1000)),
    "big_endian": np.arange(BIG, dtype=">i8"),
    "structured": np.zeros(BIG // 2, dtype=[("x", "<f8"), ("y", "<i4"), ("z", "u1")]),
    "dates": np.arange(BIG).astype("datetime64[s]"),
    "complex": (np.arange(BIG) * 1j).astype(np.complex64),
}
ARRAYS["structured"]["y"] = np.arange(BIG // 2)


def test_mapped_values_equal_the_saved_ones_as_plain_ndarrays(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", key=b"k" * 32)
    saved = store.save("arrays", "0" * 32, dict(ARRAYS), extras={}, info={})
    fresh = Store(tmp_path / "store", key=b"k" * 32)
    assert fresh.restore_paths(saved.manifest) == dict.fromkeys(ARRAYS, "mapped")
    cache: dict[Any, Any] = {}
    out = fresh.load_values(saved.manifest, cache=cache)
    assert fresh.paths_taken(saved.manifest, cache, out) == dict.fromkeys(ARRAYS, "mapped")
    fp = Fingerprinter()
    for name, value in ARRAYS.items():
        got = out[name]
        assert type(got) is np.ndarray, name
        assert got.dtype == value.dtype and got.shape == value.shape, name
        assert got.flags.f_contiguous == value.flags.f_contiguous, name
        assert got.flags.c_contiguous == value.flags.c_contiguous, name
        assert got.flags.aligned and got.flags.writeable, name
        assert np.array_equal(got, value), name
        assert pickle.dumps(got, protocol=5) == pickle.dumps(value, protocol=5), name
        assert fp.digest(got) == fp.digest(value), name


def test_small_arrays_object_stores_and_the_switch_take_the_read_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = np.arange((blobs.MAP_MIN - 3 * 4096) // 8, dtype=np.float64)  # file < MAP_MIN
    store = Store(tmp_path / "store", key=b"k" * 32)
    m = store.save("s", "0" * 32, {"small": small, "big": ARRAYS["c_order"]}, extras={}, info={})
    assert store.restore_paths(m.manifest) == {"small": "read", "big": "mapped"}
    monkeypatch.setenv("IPY_RESUME_MMAP", "0")
    assert store.restore_paths(m.manifest) == {"small": "read", "big": "read"}
    cache: dict[Any, Any] = {}
    out = store.load_values(m.manifest, cache=cache)
    assert store.paths_taken(m.manifest, cache, out) == {"small": "read", "big": "read"}
    assert np.array_equal(out["big"], ARRAYS["c_order"])  # type: ignore[arg-type]
    monkeypatch.delenv("IPY_RESUME_MMAP")
    # past the limit of live maps (file descriptors), blobs are read
    monkeypatch.setattr(blobs, "MAP_LIVE_MAX", 0)
    cache = {}
    out = store.load_values(m.manifest, cache=cache)
    assert store.paths_taken(m.manifest, cache, out)["big"] == "read"


def test_a_store_in_a_bucket_is_read_not_mapped(s3_url: str) -> None:
    store = open_store(s3_url)
    saved = store.save("big", "0" * 32, {"a": ARRAYS["c_order"]}, extras={}, info={})
    assert store.restore_paths(saved.manifest) == {"a": "read"}
    for _ in range(2):  # from the bucket, then from the local blob cache
        fresh = open_store(s3_url)
        cache: dict[Any, Any] = {}
        out = fresh.load_values(saved.manifest, cache=cache)
        assert fresh.paths_taken(saved.manifest, cache, out) == {"a": "read"}
        assert np.array_equal(out["a"], ARRAYS["c_order"])  # type: ignore[arg-type]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="statfs f_type is Linux's")
def test_a_store_on_a_network_filesystem_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert blobs.filesystem_type("/proc") == 0x9FA0  # PROC_SUPER_MAGIC: the call works
    store = Store(tmp_path / "store", key=b"k" * 32)
    saved = store.save("big", "0" * 32, {"a": ARRAYS["c_order"]}, extras={}, info={})
    assert store.restore_paths(saved.manifest) == {"a": "mapped"}
    # No NFS mount to test on: what statfs would answer on one (NFS_SUPER_MAGIC).
    real = blobs.filesystem_type
    monkeypatch.setattr(
        blobs, "filesystem_type", lambda p: 0x6969 if str(p).startswith(str(tmp_path)) else real(p)
    )
    blobs._remote_reason.cache_clear()
    try:
        assert blobs.mapping_disabled_reason(store.root) == "the store is on a nfs filesystem"
        cache: dict[Any, Any] = {}
        out = store.load_values(saved.manifest, cache=cache)
        assert store.paths_taken(saved.manifest, cache, out) == {"a": "read"}
    finally:
        blobs._remote_reason.cache_clear()


BASE = f"%%checkpoint base\nimport numpy as np\nbase = np.arange({BIG}.0)"
VIEW = "%%checkpoint view\nview = base[2:5]; rev = base[::-2]"
AFTER = "view[0] = 99.0; rev[0] = -5.0"
VIEW_CHECKS = {
    "shares": "bool(np.shares_memory(view, base) and np.shares_memory(rev, base))",
    "base2": "float(base[2])",
    "last": "float(base[-1])",
    "type": "type(base) is np.ndarray",
}


def test_views_of_a_mapped_base_stay_views_after_a_restore(isolated: Path) -> None:
    tmp_path = isolated
    expected = {"shares": "True", "base2": "99.0", "last": "-5.0", "type": "True"}
    first = run_process(tmp_path, [BASE, VIEW, AFTER], VIEW_CHECKS)
    assert first["eval"] == expected
    second = run_process(tmp_path, [BASE, VIEW, AFTER], VIEW_CHECKS)
    assert all("restored" in c["stderr"] for c in second["cells"][:2]), second["cells"]
    assert second["eval"] == expected
    third = run_process(tmp_path, ["%resume", AFTER], VIEW_CHECKS)
    assert third["cells"][0]["error"] is None, third["cells"][0]
    assert third["eval"] == expected
    assert Store(tmp_path / "store").verify() == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="unlink semantics of Linux")
def test_deleting_the_store_under_a_live_kernel_keeps_the_mapped_array(tmp_path: Path) -> None:
    cell = f"%%checkpoint big\nimport numpy as np\na = np.arange({BIG}.0)"
    run_process(tmp_path, [cell], {})
    delete = "import shutil; shutil.rmtree(os.environ['IPY_RESUME_DIR'])"
    report = run_process(
        tmp_path,
        [cell, "import os", delete, "a[0] = 5.0"],
        {"sum": "float(a.sum())", "gone": "os.path.exists(os.environ['IPY_RESUME_DIR'])"},
    )
    assert "restored" in report["cells"][0]["stderr"]
    assert all(c["error"] is None for c in report["cells"]), report["cells"]
    assert report["eval"] == {"sum": str(float(BIG * (BIG - 1) // 2) + 5.0), "gone": "False"}


def test_show_says_which_names_a_restore_maps(
    isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(isolated / "store")
    store.save("both", "0" * 32, {"big": ARRAYS["c_order"], "n": 3}, extras={}, info={})
    capsys.readouterr()
    assert cli.main(["show", "both", "--store", str(store.root)]) == 0
    shown = capsys.readouterr().out
    lines = {line.split()[0]: line for line in shown.splitlines() if line.startswith("  ")}
    assert lines["big"].endswith("(mapped)") and lines["n"].endswith("(read)"), shown
    assert cli.main(["show", "both", "--json", "--store", str(store.root)]) == 0
    details = json.loads(capsys.readouterr().out)
    assert details["names"]["big"]["restore"] == "mapped"
    monkeypatch.setenv("IPY_RESUME_MMAP", "0")
    assert cli.main(["show", "both", "--store", str(store.root)]) == 0
    off = capsys.readouterr().out
    assert "(mapped)" not in off and "big" in off and "(read)" in off


FRAME = (
    "%%checkpoint frame\nimport numpy as np, pandas as pd\n"
    f"df = pd.DataFrame({{'x': np.arange({BIG}.0), 'k': np.arange({BIG})}})\n"
    f"box = {{'arr': np.arange({BIG}.0)}}\nn = 3"
)
FRAME_CHECKS = {
    "x": "float(df['x'].sum())",
    "arr": "float(box['arr'][-1])",
    "type": "type(box['arr']) is np.ndarray",
}


def test_large_buffers_of_pickled_values_are_mapped_and_writes_stay_private(
    isolated: Path,
) -> None:
    tmp_path = isolated
    first = run_process(tmp_path, [FRAME], FRAME_CHECKS)
    store = Store(tmp_path / "store")
    (manifest,) = [m for m in store.manifests() if m.cell_id == "frame"]
    assert store.restore_paths(manifest) == {
        "df": "buffers mapped",
        "box": "buffers mapped",
        "n": "read",
        "np": "read",
        "pd": "read",
    }
    raw = {b.blob for ref in manifest.values.values() for b in ref.buffers}
    assert len(raw) == 2  # df's 'x' and box's 'arr' are equal: stored once
    before = {a: _file_digest(Path(store.blobs.path(a))) for a in raw}

    write = "box['arr'][:] = -1.0; df.loc[0, 'x'] = 1e9"
    second = run_process(tmp_path, [FRAME, write], FRAME_CHECKS)
    assert "restored" in second["cells"][0]["stderr"], second["cells"][0]
    assert second["eval"]["arr"] == "-1.0" and second["eval"]["type"] == "True"
    assert float(second["eval"]["x"]) == float(first["eval"]["x"]) + 1e9
    assert {a: _file_digest(Path(store.blobs.path(a))) for a in raw} == before
    assert Store(tmp_path / "store").verify() == []
    assert run_process(tmp_path, [FRAME], FRAME_CHECKS)["eval"] == first["eval"]
    restores = [e for e in store.journal().events() if e.outcome == "restored"]
    assert {e.detail for e in restores} == {"buffers mapped: box, df; read: n, np, pd"}


def test_the_magic_show_says_mapped(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell(f"%%checkpoint m\nimport numpy as np\nbig = np.arange({BIG}.0)\nk = 1")
    capsys.readouterr()
    shell.run_line_magic("checkpoint", "show m")
    shown = capsys.readouterr().out
    lines = {line.split()[0]: line for line in shown.splitlines() if line.startswith("  ")}
    assert lines["big"].endswith("(mapped)") and lines["k"].endswith("(read)"), shown


@pytest.mark.parametrize("mmap", ["1", "0"])
def test_equal_arrays_of_distinct_objects_come_back_as_distinct_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mmap: str
) -> None:
    # Content addressing stores equal arrays once; the restored values must still be
    # distinct (a write to one must not show in the other), mapped or read.
    monkeypatch.setenv("IPY_RESUME_MMAP", mmap)
    a, b = np.arange(float(BIG)), np.arange(float(BIG))
    values = {"a": a, "b": b, "same": a, "box1": {"x": a.copy()}, "box2": {"y": a.copy()}}
    store = Store(tmp_path / "store", key=b"k" * 32)
    saved = store.save("eq", "0" * 32, values, extras={}, info={})
    refs = saved.manifest.values
    assert refs["a"].blob == refs["b"].blob  # stored once
    out: Any = Store(tmp_path / "store", key=b"k" * 32).load_values(saved.manifest)
    assert out["a"] is out["same"]  # one object stays one object
    out["a"][0] = -1.0
    out["box1"]["x"][0] = -2.0
    assert out["b"][0] == 0.0 and out["box2"]["y"][0] == 0.0
    assert not np.shares_memory(out["a"], out["b"])
    assert not np.shares_memory(out["box1"]["x"], out["box2"]["y"])
    assert np.array_equal(out["b"], b) and np.array_equal(out["box2"]["y"], a)
