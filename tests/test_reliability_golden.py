"""Format compatibility: golden stores of every released format load; newer formats are refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_report

from ipy_resume.store import FORMAT_VERSION, FormatTooNew, Store
from ipy_resume.store import manifest as mf
from ipy_resume.store.store import STORE_FORMAT_VERSION

GOLDEN = Path(__file__).parent / "golden"
sys.path.insert(0, str(GOLDEN))
from make_golden import golden_values  # noqa: E402

FORMATS = sorted(int(p.name[len("format") :]) for p in GOLDEN.glob("format*") if p.is_dir())


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.flags.f_contiguous == b.flags.f_contiguous
            and a.flags.c_contiguous == b.flags.c_contiguous
            and a.tobytes("A") == b.tobytes("A")
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float):
        return isinstance(b, float) and repr(a) == repr(b)  # -0.0 stays -0.0
    return type(a) is type(b) and bool(a == b)


def _copy(fmt: int, tmp_path: Path) -> tuple[Store, bytes]:
    # a copy: loading would quarantine a damaged file, and committed test data must not change
    root = tmp_path / f"format{fmt}"
    shutil.copytree(GOLDEN / f"format{fmt}", root)
    key = bytes.fromhex((GOLDEN / f"format{fmt}.key").read_text().strip())
    return Store(root, key=key), key


def test_the_current_format_has_a_golden_store() -> None:
    assert FORMAT_VERSION in FORMATS, (
        f"format {FORMAT_VERSION} has no golden store: run tests/golden/make_golden.py and "
        "commit tests/golden/ (keep the older formats' stores)"
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_golden_store_loads_exactly(fmt: int, tmp_path: Path) -> None:
    store, _ = _copy(fmt, tmp_path)
    assert store.verify() == []
    expected = golden_values(fmt)
    manifests = store.manifests()
    assert {(m.cell_id, m.key) for m in manifests} == set(expected)
    for m in manifests:
        assert m.format == fmt
        found = store.find(m.cell_id, m.key)
        assert found is not None and found.id == m.id
        values = store.load_values(found)
        want = expected[(m.cell_id, m.key)]
        assert values.keys() == want.keys()
        for name, value in want.items():
            assert _same(value, values[name]), f"{m.cell_id}.{name} differs"
        assert store.load_extras(found) == {"note": f"golden {m.cell_id}"}
    assert store.seed_base == json.loads((store.root / "store.json").read_text())["seed_base"]
    reliability_report.record(
        f"golden store format {fmt}", f"{len(manifests)} checkpoints loaded exactly, verify clean"
    )


def test_newer_manifest_is_refused_naming_both_versions(tmp_path: Path) -> None:
    store, key = _copy(FORMAT_VERSION, tmp_path)
    m = next(m for m in store.manifests() if m.cell_id == "arrays")
    assert m.path is not None
    doc = json.loads(m.path.read_text())
    doc.pop("signature")
    doc["format"] = FORMAT_VERSION + 1
    doc["signature"] = mf.signing.sign(key, mf.canonical_json(doc))  # authentic, only newer
    m.path.write_bytes(mf._file_bytes(doc))
    with pytest.raises(FormatTooNew) as info:
        store.find("arrays", m.key)
    message = str(info.value)
    assert f"format {FORMAT_VERSION + 1}" in message and f"format {FORMAT_VERSION}" in message
    assert "Upgrade ipy_resume" in message
    assert info.value.found == FORMAT_VERSION + 1 and info.value.supported == FORMAT_VERSION
    rel = m.path.relative_to(store.root).as_posix()
    problems = store.verify()
    assert (
        len(problems) == 1 and rel in problems[0] and f"format {FORMAT_VERSION + 1}" in problems[0]
    )

    # gc leaves the newer checkpoint's blobs alone: it cannot know which they are
    report = store.gc()
    assert report.removed_blobs == 0
    assert all(store.blob_path(r.blob).exists() for r in m.blob_refs())

    # and the command line exits non-zero naming it
    data = tmp_path / "jupyter-data" / "ipy_resume"
    data.mkdir(parents=True)
    (data / "signing.key").write_text(key.hex() + "\n")
    (data / "signing.key").chmod(0o600)
    proc = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "verify", "--store", str(store.root)],
        capture_output=True,
        text=True,
        env=dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data")),
        timeout=120,
    )
    assert proc.returncode == 1 and rel in proc.stdout, proc


def test_newer_store_json_is_refused_naming_both_versions(tmp_path: Path) -> None:
    store, key = _copy(FORMAT_VERSION, tmp_path)
    from ipy_resume.store import info as store_info

    info = json.loads((store.root / "store.json").read_text())
    info["format"] = STORE_FORMAT_VERSION + 7
    if "check" in info:  # (a store of today: both copies, each with its check, as written)
        info.pop("check")
        for name in ("store.json", "store.backup.json"):
            (store.root / name).write_bytes(store_info.encode(info))
    else:
        (store.root / "store.json").write_text(json.dumps(info))
    with pytest.raises(FormatTooNew) as raised:
        _ = Store(store.root, key=key).seed_base
    assert f"format {STORE_FORMAT_VERSION + 7}" in str(raised.value)
    assert f"format {STORE_FORMAT_VERSION} at most" in str(raised.value)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f >= 2])
def test_golden_store_keeps_shared_objects_shared(fmt: int, tmp_path: Path) -> None:
    store, _ = _copy(fmt, tmp_path)
    shared_m = store.find("shared", "k-shared")
    linked_m = store.find("linked", "k-linked")
    assert shared_m is not None and linked_m is not None
    cache: dict[Any, Any] = {}  # one restore: both checkpoints' objects are shared
    shared = store.load_values(shared_m, cache=cache)
    linked = store.load_values(linked_m, cache=cache)
    assert shared["items"] is shared["same_items"]
    assert linked["holder"]["items"] is shared["items"]
    base, window = shared["base"], shared["window"]
    assert isinstance(base, np.ndarray) and isinstance(window, np.ndarray)
    window[0] = -1.0
    assert base[100] == -1.0
    small, tail = shared["small"], shared["tail"]
    assert isinstance(small, np.ndarray) and isinstance(tail, np.ndarray)
    tail[:] = 7.0
    assert small[6:].tolist() == [7.0] * 6
    # alone, the linked checkpoint loads its link from the blobs the link names
    alone = store.load_values(linked_m)
    assert alone["holder"]["items"] == ["shared", 1]
