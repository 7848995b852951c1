"""The Store façade: layout, save/find/load, dedup, failures, corruption, SaveError."""

from __future__ import annotations

import errno
import importlib.metadata
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd
import pytest

from ipy_resume.store import (
    CorruptBlob,
    DecodeError,
    Manifest,
    ManifestError,
    MissingBlob,
    SaveError,
    Store,
    Untrusted,
    codecs,
    fsio,
)
from ipy_resume.store import loader as loader_module
from ipy_resume.store import writing as writing_module
from ipy_resume.store.store import PACK_VALUE_MAX

KEY = bytes(range(100, 132))


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "st", key=KEY)


@pytest.fixture
def unpickle_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Record every stream that reaches the unpickler."""
    calls: list[bytes] = []
    real = codecs._unpickle

    def spy(stream: Any, buffers: list[Any], *rest: Any) -> object:
        calls.append(bytes(stream))
        return real(stream, buffers, *rest)

    monkeypatch.setattr(codecs, "_unpickle", spy)
    return calls


def _objects(store: Store) -> list[Path]:
    return sorted(p for p in (store.root / "objects").rglob("*") if p.is_file())


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if fsio.is_temp_name(p.name)]


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


class Unrestorable:
    def __reduce__(self) -> tuple[Any, ...]:
        return (_explode, ())


def _explode() -> None:
    raise RuntimeError("cannot rebuild this")


# ---------------------------------------------------------------------------
# layout


def test_layout_and_store_json(store: Store) -> None:
    assert not store.root.exists()  # lazily created
    seed = store.seed_base
    doc = json.loads((store.root / "store.json").read_text())
    assert doc["format"] == 1 and doc["seed_base"] == seed and 0 <= seed < 2**63
    assert doc["created"].endswith("Z")
    assert Store(store.root, key=KEY).seed_base == seed  # stable across instances
    result = store.save("train", "abc123", {"x": 1})
    m = result.manifest
    assert m.path is not None and m.path.name == f"{m.id}.json"
    rel = m.path.relative_to(store.root).parts
    assert rel[0] == "manifests" and rel[1].startswith("train-") and rel[2] == "abc123"
    assert len(m.id) == 16 and int(m.id, 16) >= 0
    assert m.created.endswith("Z") and abs(m.created_at.timestamp() - time.time()) < 60
    assert m.versions["python"].count(".") == 2 and m.versions["numpy"] == np.__version__
    # the version recorded is the one the installed package publishes
    assert m.versions["ipy_resume"] == importlib.metadata.version("ipy_resume")
    assert _temp_files(store.root) == []


def test_store_json_race_has_one_winner(tmp_path: Path) -> None:
    seeds: list[int] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        s = Store(tmp_path / "race", key=KEY)
        barrier.wait()
        seeds.append(s.seed_base)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seeds) == 8 and len(set(seeds)) == 1


@pytest.mark.parametrize(
    "cell_id", ["train", "step 1", "a/b", "../..", "数据 ünïcode", ".hidden", "x" * 300]
)
def test_cell_ids_map_to_safe_distinct_folders(store: Store, cell_id: str) -> None:
    m = store.save(cell_id, "k1", {"v": cell_id}).manifest
    assert m.path is not None
    rel = m.path.relative_to(store.root / "manifests")
    assert len(rel.parts) == 3 and not rel.parts[0].startswith(".")
    assert m.path.resolve().is_relative_to((store.root / "manifests").resolve())
    other = store.save(cell_id + "!", "k1", {"v": 0}).manifest
    assert other.path is not None and other.path.parent.parent != m.path.parent.parent
    found = store.find(cell_id, "k1")
    assert found is not None and store.load_values(found) == {"v": cell_id}


@pytest.mark.parametrize("key", ["", "../x", "a/b", "a.b", "x" * 201])
def test_bad_keys_are_refused(store: Store, key: str) -> None:
    with pytest.raises(ValueError):
        store.save("c", key, {"x": 1})
    with pytest.raises(ValueError):
        store.find("c", key)


@pytest.mark.parametrize("bad", ["", "\ud800", 3])
def test_bad_cell_ids_and_names_are_refused(store: Store, bad: Any) -> None:
    with pytest.raises(ValueError):
        store.save(bad, "k", {"x": 1})
    with pytest.raises(ValueError):
        store.save("c", "k", {bad: 1})
    assert not store.root.exists()


def test_info_must_be_json(store: Store) -> None:
    with pytest.raises(TypeError):
        store.save("c", "k", {"x": 1}, info={"bad": object()})
    with pytest.raises(TypeError):
        store.save("c", "k", {"x": 1}, info={"nan": float("nan")})
    assert not store.root.exists()


# ---------------------------------------------------------------------------
# values


def test_big_array_goes_to_an_hdf5_blob(store: Store) -> None:
    a = np.random.default_rng(0).random((256, 64))  # 128 KiB
    m = store.save("c", "k", {"a": a}).manifest
    ref = m.values["a"]
    assert ref.kind == "hdf5" and ref.algo == "xxh3_128" and ref.blob == ref.checksum
    path = store.blob_path(ref.blob)
    assert path.stat().st_size == ref.size
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["data"][()], a)
    found = store.find("c", "k")
    assert found is not None
    got = store.load_values(found)["a"]
    assert isinstance(got, np.ndarray) and np.array_equal(got, a)
    assert got.flags.writeable
    got[0, 0] = -1.0  # a private buffer: the store is untouched
    again = store.load_values(found)["a"]
    assert isinstance(again, np.ndarray) and again[0, 0] == a[0, 0]


def test_small_values_share_one_pack(store: Store) -> None:
    values = {"i": 1, "s": "text", "l": [1, 2, 3], "small": np.arange(10), "f": 2.5, "n": None}
    m = store.save("c", "k", values, extras={"e1": "x", "e2": [2]}).manifest
    blobs = {ref.blob for ref in [*m.values.values(), *m.extras.values()]}
    assert len(blobs) == 1
    assert all(ref.kind == "pickle" and ref.algo == "sha256" for ref in m.values.values())
    assert len(_objects(store)) == 1
    # the values are one group (one stream, each a member of it); each extra a stream of its own
    assert {(ref.offset, ref.length) for ref in m.values.values()} == {(0, m.values["i"].length)}
    assert all(ref.member == name for name, ref in m.values.items())
    spans = sorted((ref.offset, ref.length or 0) for ref in [m.values["i"], *m.extras.values()])
    assert spans[0][0] == 0
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(spans))
    loaded = store.load_values(m)
    assert np.array_equal(np.asarray(loaded.pop("small")), np.arange(10))
    assert loaded == {k: v for k, v in values.items() if k != "small"}


def test_packs_are_split_past_the_target_size(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writing_module, "PACK_TARGET", 2000)
    extras = {f"v{i}": str(i) * 700 for i in range(6)}
    m = store.save("c", "k", {}, extras=extras).manifest
    packs = {ref.blob for ref in m.extras.values()}
    assert len(packs) == 3 and len(_objects(store)) == 3
    assert all(ref.size <= 2000 for ref in m.extras.values())
    assert list(m.extras) == list(extras)  # the caller's order is kept
    assert store.load_extras(m) == extras


def test_large_pickle_stream_gets_its_own_blob(store: Store) -> None:
    big_list = list(range(PACK_VALUE_MAX // 4))
    m = store.save("c", "k", {"big": big_list, "small": 1}, extras={"e": 1}).manifest
    # the group holding the big list is a blob of its own; the small extra goes to a pack
    assert m.values["big"].blob == m.values["small"].blob != m.extras["e"].blob
    assert m.values["big"].offset == 0 and m.values["big"].length == m.values["big"].size
    assert store.load_values(m) == {"big": big_list, "small": 1}


def test_dict_with_large_arrays_uses_raw_blobs(store: Store) -> None:
    w = np.random.default_rng(1).random(20_000)
    d = {"w": w, "b": np.arange(5), "name": "layer"}
    m = store.save("c", "k", {"d": d}).manifest
    ref = m.values["d"]
    assert ref.kind == "pickle" and len(ref.buffers) == 1
    raw = ref.buffers[0]
    assert raw.kind == "raw" and raw.algo == "xxh3_128" and raw.size == w.nbytes
    assert store.blob_path(raw.blob).read_bytes() == w.tobytes()
    got = store.load_values(m)["d"]
    assert isinstance(got, dict)
    assert np.array_equal(got["w"], w) and np.array_equal(got["b"], np.arange(5))
    assert got["name"] == "layer" and got["w"].flags.writeable


def test_dataframe_with_mixed_dtypes(store: Store) -> None:
    n = 20_000
    df = pd.DataFrame(
        {
            "i": np.arange(n),
            "f": np.random.default_rng(2).random(n),
            "s": [f"row{i}" for i in range(n)],
            "t": pd.date_range("2024-01-01", periods=n, freq="min"),
            "c": pd.Categorical(["a", "b"] * (n // 2)),
            "b": np.arange(n) % 2 == 0,
        }
    )
    m = store.save("c", "k", {"df": df}).manifest
    assert len(m.values["df"].buffers) >= 2  # numeric blocks out of band
    got = store.load_values(m)["df"]
    assert isinstance(got, pd.DataFrame)
    pd.testing.assert_frame_equal(got, df)


def test_blobs_of_a_large_checkpoint_are_read_together_and_verified(
    store: Store, unpickle_calls: list[bytes]
) -> None:
    # Past the prefetch threshold the blobs are read two at a time; every one is still
    # verified, and the error raised is the one reading them in order would raise.
    n = 1_500_000
    df = pd.DataFrame({"a": np.arange(n, dtype=np.float64), "s": [f"r{i % 7}" for i in range(n)]})
    big = np.arange(3_000_000, dtype=np.int64)
    m = store.save("c", "k", {"df": df, "big": big}).manifest
    assert sum(r.size for r in m.blob_refs()) > loader_module.PREFETCH_MIN
    got = store.load_values(m)
    pd.testing.assert_frame_equal(got["df"], df)
    np.testing.assert_array_equal(got["big"], big)
    unpickle_calls.clear()

    column = m.values["df"].buffers[0]
    with open(store.blob_path(column.blob), "r+b") as f:
        f.seek(column.size // 2)
        f.write(b"\xff" * 8)
    with pytest.raises(CorruptBlob, match="failed its checksum") as info:
        store.load_values(m)
    assert info.value.path == store.blobs.relpath(column.blob)
    assert unpickle_calls == []  # nothing was unpickled: the stream's buffer was bad
    assert not store.blob_path(column.blob).exists()  # quarantined
    np.testing.assert_array_equal(store.load_values(m, ["big"])["big"], big)


def test_nested_containers_and_custom_classes(store: Store) -> None:
    class Local:  # pickled by value by cloudpickle
        def __init__(self, v: int) -> None:
            self.v = v

    nested = {"a": [1, (2, 3), {4, 5}], "b": {"c": {"d": [np.zeros(3), b"bytes"]}}}
    values = {"nested": nested, "point": Point(1, 2), "local": Local(7), "fn": lambda x: x + 1}
    m = store.save("c", "k", values).manifest
    got = store.load_values(m)
    assert got["point"] == Point(1, 2)
    assert got["local"].v == 7  # type: ignore[attr-defined]
    assert got["fn"](1) == 2  # type: ignore[operator]
    g = got["nested"]
    assert isinstance(g, dict) and g["a"] == [1, (2, 3), {4, 5}]
    assert np.array_equal(g["b"]["c"]["d"][0], np.zeros(3)) and g["b"]["c"]["d"][1] == b"bytes"


def test_extras_and_info(store: Store) -> None:
    extras = {"stdout": "hello\n", "rng": np.random.default_rng(3).bit_generator.state}
    m = store.save("c", "k", {"x": 1}, extras=extras, info={"parts": {"src": "ab"}}).manifest
    found = store.find("c", "k")
    assert found is not None and found.info == {"parts": {"src": "ab"}}
    assert store.load_extras(found) == extras
    assert store.load_values(found) == {"x": 1}
    assert m.values["x"].blob == m.extras["stdout"].blob  # one pack for both


def test_load_a_subset_of_names(store: Store) -> None:
    m = store.save("c", "k", {"a": 1, "b": 2, "c": 3}).manifest
    assert store.load_values(m, ["c", "a"]) == {"c": 3, "a": 1}
    with pytest.raises(KeyError):
        store.load_values(m, ["nope"])


def test_identical_arrays_are_stored_once(store: Store) -> None:
    a = np.random.default_rng(4).random(50_000)
    d = {"w": np.random.default_rng(5).random(30_000)}
    first = store.save("c", "k1", {"a": a, "d": d})
    files = _objects(store)
    assert len(files) == 3  # hdf5 + raw + pack
    second = store.save("other", "k2", {"a": a.copy(), "d": {"w": d["w"].copy()}})
    assert _objects(store) == files  # nothing new
    assert second.manifest.bytes_written == 0
    assert second.manifest.path is not None
    assert second.bytes_written == second.manifest.path.stat().st_size  # the manifest only
    assert first.bytes_written > a.nbytes + d["w"].nbytes
    assert second.manifest.bytes == first.manifest.bytes == sum(p.stat().st_size for p in files)


def test_existing_blob_with_wrong_size_is_rewritten(store: Store) -> None:
    a = np.arange(20_000, dtype=np.float64)
    m = store.save("c", "k", {"a": a}).manifest
    path = store.blob_path(m.values["a"].blob)
    with open(path, "r+b") as f:
        f.truncate(100)
    assert store.save("c", "k", {"a": a}).bytes_written > a.nbytes
    assert path.stat().st_size == m.values["a"].size
    assert store.verify() == []


def test_find_history_and_manifests(store: Store) -> None:
    assert store.find("c", "k") is None and store.history("c") == [] and store.manifests() == []
    m1 = store.save("c", "k", {"x": 1}).manifest
    m2 = store.save("c", "k2", {"x": 2}).manifest
    m3 = store.save("c", "k", {"x": 3}).manifest
    m4 = store.save("d", "k", {"x": 4}).manifest
    found = store.find("c", "k")
    assert found is not None and found.id == m3.id and store.load_values(found) == {"x": 3}
    assert [m.id for m in store.history("c")] == [m1.id, m2.id, m3.id]
    assert [m.id for m in store.manifests()] == [m1.id, m2.id, m3.id, m4.id]
    assert isinstance(found, Manifest) and found == m3


def test_ids_differ_from_the_first_character_and_created_keeps_the_order(store: Store) -> None:
    made = [store.save("c", "k", {"x": i}).manifest for i in range(20)]
    ids = [m.id for m in made]
    assert len(set(ids)) == 20
    # made within milliseconds, yet no two share their first 8 characters (random ids)
    assert len({i[:8] for i in ids}) == 20
    created = [m.created for m in made]
    assert created == sorted(created) and len(set(created)) == 20
    assert [m.id for m in store.history("c")] == ids
    found = store.find("c", "k")
    assert found is not None and found.id == ids[-1]  # the newest, whatever its id


def test_cross_process_restore(store: Store, tmp_path: Path) -> None:
    script = f"""
import numpy as np
from ipy_resume.store import Store
s = Store({str(store.root)!r}, key=bytes.fromhex({KEY.hex()!r}))
s.save("proc", "k", {{"a": np.arange(100_000) * 2, "t": ("x", 1)}})
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path, timeout=120)
    m = store.find("proc", "k")
    assert m is not None
    got = store.load_values(m)
    assert np.array_equal(got["a"], np.arange(100_000) * 2)  # type: ignore[arg-type]
    assert got["t"] == ("x", 1)


# ---------------------------------------------------------------------------
# unpicklable values


def _gen() -> Iterator[int]:
    yield 1


def test_unpicklable_values_are_reported_and_the_rest_stored(store: Store) -> None:
    result = store.save(
        "c", "k", {"ok": 1, "gen": _gen(), "lock": threading.Lock(), "arr": np.zeros(9000)}
    )
    assert set(result.failed) == {"gen", "lock"}
    assert all("\n" not in r and "cannot be pickled" in r for r in result.failed.values())
    m = result.manifest
    assert m.complete is False and m.failed == result.failed
    assert set(m.values) == {"ok", "arr"}
    assert store.find("c", "k") is None  # incomplete checkpoints are not hits
    [hist] = store.history("c")
    got = store.load_values(hist)
    assert got["ok"] == 1 and np.array_equal(got["arr"], np.zeros(9000))  # type: ignore[arg-type]


def test_unpicklable_extra_is_named_as_extra(store: Store) -> None:
    result = store.save("c", "k", {"ok": 1}, extras={"display": threading.Lock()})
    assert list(result.failed) == ["extra:display"] and not result.manifest.complete


def test_complete_false_is_not_found(store: Store) -> None:
    store.save("c", "k", {"x": 1}, complete=False)
    assert store.find("c", "k") is None
    older_complete = store.save("c", "k2", {"x": 2}).manifest
    store.save("c", "k2", {"x": 3}, complete=False)
    found = store.find("c", "k2")
    assert found is not None and found.id == older_complete.id


def test_value_that_cannot_be_rebuilt(store: Store) -> None:
    m = store.save("c", "k", {"u": Unrestorable(), "ok": 1}).manifest
    with pytest.raises(DecodeError) as info:
        store.load_values(m)
    assert "'u'" in str(info.value) and "cannot rebuild this" in str(info.value)
    # the pickled values of a checkpoint are one group: they are restored together or not at all
    with pytest.raises(DecodeError, match="cannot rebuild this"):
        store.load_values(m, ["ok"])


# ---------------------------------------------------------------------------
# corruption


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x20
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def _corruption_case(store: Store, target: str) -> tuple[dict[str, object], Manifest, str]:
    values: dict[str, object] = {
        "arr": np.random.default_rng(6).random(40_000),
        "d": {"w": np.random.default_rng(7).random(30_000), "tag": "t"},
        "small": [1, 2, 3],
    }
    m = store.save("train", "k", values).manifest
    blob = {
        "hdf5": m.values["arr"].blob,
        "pack": m.values["small"].blob,
        "raw": m.values["d"].buffers[0].blob,
    }[target]
    return values, m, blob


def _check_restored(store: Store, values: dict[str, object]) -> None:
    found = store.find("train", "k")
    assert found is not None
    got = store.load_values(found)
    assert np.array_equal(got["arr"], values["arr"])  # type: ignore[arg-type]
    assert np.array_equal(got["d"]["w"], values["d"]["w"])  # type: ignore[index]
    assert got["small"] == values["small"]


@pytest.mark.parametrize(
    ("target", "where"),
    [
        ("hdf5", 0),
        ("hdf5", 700),
        ("hdf5", "data"),
        ("hdf5", -1),
        ("pack", 0),
        ("pack", -1),
        ("raw", 0),
        ("raw", "mid"),
    ],
)
def test_flipped_byte_is_detected_quarantined_and_rewritten(
    store: Store, unpickle_calls: list[bytes], target: str, where: int | str
) -> None:
    values, m, blob = _corruption_case(store, target)
    path = store.blob_path(blob)
    size = path.stat().st_size
    named = {"data": m.values["arr"].offset + 1234, "mid": size // 2}
    pos = named[where] if isinstance(where, str) else where
    _flip(path, pos % size)
    unpickle_calls.clear()
    with pytest.raises(CorruptBlob) as info:
        store.load_values(m)
    err = info.value
    rel = f"objects/{blob[:2]}/{blob[2:]}"
    assert err.path == rel and rel in str(err) and "failed its checksum" in str(err)
    assert "'train'" in str(err) and "ipy-resume verify" in str(err) and "\n" not in str(err)
    assert not isinstance(err, MissingBlob)
    if target != "hdf5":
        assert unpickle_calls == []  # no unverified byte reached the unpickler
    assert not path.exists()
    assert [p.name.split(".")[0] for p in (store.root / "quarantine").iterdir()] == [blob]
    # the next save of the same values writes the blob again
    store.save("train", "k", values)
    assert path.stat().st_size == size and store.verify() == []
    _check_restored(store, values)


@pytest.mark.parametrize("target", ["hdf5", "pack", "raw"])
def test_truncated_blob(store: Store, unpickle_calls: list[bytes], target: str) -> None:
    values, m, blob = _corruption_case(store, target)
    path = store.blob_path(blob)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    unpickle_calls.clear()
    with pytest.raises(CorruptBlob, match="is truncated") as info:
        store.load_values(m)
    assert info.value.path == f"objects/{blob[:2]}/{blob[2:]}"
    assert unpickle_calls == [] and not path.exists()
    [problem] = store.verify()  # quarantined: now missing until the next save
    assert "is missing" in problem
    assert store.save("train", "k", values).bytes_written > 0
    assert store.verify() == []
    _check_restored(store, values)


@pytest.mark.parametrize("target", ["hdf5", "pack", "raw"])
def test_missing_blob(store: Store, unpickle_calls: list[bytes], target: str) -> None:
    values, m, blob = _corruption_case(store, target)
    store.blob_path(blob).unlink()
    problems = store.verify()
    assert len(problems) == 1 and "is missing" in problems[0] and blob[2:] in problems[0]
    unpickle_calls.clear()
    with pytest.raises(MissingBlob) as info:
        store.load_values(m)
    assert info.value.path == f"objects/{blob[:2]}/{blob[2:]}" and "missing" in str(info.value)
    assert unpickle_calls == []
    store.save("train", "k", values)
    _check_restored(store, values)


@pytest.mark.parametrize("pos", [0, 1, 25, 100, "mid", -60, -3, -2])
def test_flipped_manifest_byte_is_detected(
    store: Store, unpickle_calls: list[bytes], pos: int | str
) -> None:
    _, m, _ = _corruption_case(store, "pack")
    assert m.path is not None
    size = m.path.stat().st_size
    _flip(m.path, size // 2 if pos == "mid" else int(pos) % size)
    with pytest.raises((Untrusted, ManifestError)) as info:
        store.find("train", "k")
    rel = m.path.relative_to(store.root).as_posix()
    assert info.value.path == rel and rel in str(info.value)
    assert unpickle_calls == []
    assert store.history("train") == []
    store.save("train", "k", {"again": 1})
    found = store.find("train", "k")
    assert found is not None and store.load_values(found) == {"again": 1}


def test_grown_blob_is_detected(store: Store) -> None:
    _, m, blob = _corruption_case(store, "pack")
    with open(store.blob_path(blob), "ab") as f:
        f.write(b"extra")
    with pytest.raises(CorruptBlob, match="wrong size"):
        store.load_values(m)


def test_verify_lists_every_problem(store: Store) -> None:
    _, m, blob = _corruption_case(store, "hdf5")
    store.save("other", "k", {"x": 1})
    assert store.verify() == []
    _flip(store.blob_path(blob), 5000)
    assert m.path is not None
    _flip(m.path, 40)  # inside the JSON text: invalid JSON or a broken signature
    other = store.find("other", "k")
    assert other is not None
    store.blob_path(other.values["x"].blob).unlink()
    problems = store.verify()
    # the flipped blob is named too, though no readable manifest refers to it any more
    assert len(problems) == 3
    assert any("manifests/train-" in p for p in problems)
    assert any("is missing" in p for p in problems)
    assert any(store.blobs.relpath(blob) in p and "gc" in p for p in problems)


def test_quarantine_never_touches_other_blobs(store: Store) -> None:
    _, m, blob = _corruption_case(store, "raw")
    _flip(store.blob_path(blob), 10)
    with pytest.raises(CorruptBlob):
        store.load_values(m)
    assert len(_objects(store)) == 2  # hdf5 + pack still there
    # The pickled values of one checkpoint load together (they may share objects), so
    # only the array, in a blob of its own, is still readable.
    np.testing.assert_array_equal(store.load_values(m, ["arr"])["arr"], _["arr"])  # type: ignore[call-overload]
    with pytest.raises(CorruptBlob):
        store.load_values(m, ["small"])


# ---------------------------------------------------------------------------
# SaveError


def _fail_on(
    monkeypatch: pytest.MonkeyPatch, name: str, error: int, after: int = 0
) -> dict[str, int]:
    real = getattr(fsio, name)
    state = {"calls": 0}

    def failing(*args: Any) -> Any:
        state["calls"] += 1
        if state["calls"] > after:
            raise OSError(error, os.strerror(error))
        return real(*args)

    monkeypatch.setattr(fsio, name, failing)
    return state


@pytest.mark.parametrize("after", [0, 1, 3])
def test_enospc_raises_save_error_and_commits_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    previous = store.save("train", "k", {"x": 1}).manifest
    manifests_before = sorted((store.root / "manifests").rglob("*.json"))
    big = {"a": np.random.default_rng(8).random(40_000), "d": {"w": np.ones(20_000)}, "s": 2}
    state = _fail_on(monkeypatch, "_write", errno.ENOSPC, after)
    with pytest.raises(SaveError) as info:
        store.save("train", "k", big)
    assert state["calls"] > after
    msg = str(info.value)
    assert "\n" not in msg and "No space left on device" in msg and "ENOSPC" in msg
    assert "nothing was committed" in msg and "'train'" in msg
    assert "objects/" in msg and str(store.root) not in msg.split("while writing ")[1]
    monkeypatch.undo()
    assert _temp_files(store.root) == []
    assert sorted((store.root / "manifests").rglob("*.json")) == manifests_before
    found = store.find("train", "k")
    assert found is not None and found.id == previous.id
    assert store.load_values(found) == {"x": 1}


def test_failure_writing_the_manifest(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    real_link = fsio._link

    def no_link(src: Any, dst: Any) -> None:
        if str(dst).endswith(".json") and "manifests" in str(dst):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_link(src, dst)

    monkeypatch.setattr(fsio, "_link", no_link)
    with pytest.raises(SaveError, match="manifests/") as info:
        store.save("c", "k", {"x": 1})
    assert "Check the disk" in str(info.value)
    monkeypatch.undo()
    assert store.find("c", "k") is None and _temp_files(store.root) == []


def test_permission_error_on_mkdir(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_on(monkeypatch, "_mkdir", errno.EACCES)
    with pytest.raises(SaveError, match="writable") as info:
        store.save("c", "k", {"x": 1})
    assert "Permission denied" in str(info.value)


def test_failed_fsync_commits_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.seed_base  # noqa: B018 - create the layout first
    _fail_on(monkeypatch, "_fsync", errno.EIO, after=2)
    with pytest.raises(SaveError):
        store.save("c", "k", {"a": np.zeros(20_000)})
    monkeypatch.undo()
    assert store.find("c", "k") is None and _temp_files(store.root) == []


# ---------------------------------------------------------------------------
# timing (printed, never asserted)


def test_timing_is_printed(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    a = np.random.default_rng(9).random(4 * 1024 * 1024)  # 32 MiB
    t0 = time.perf_counter()
    m = store.save("t", "k", {"a": a}).manifest
    t1 = time.perf_counter()
    store.load_values(m)
    t2 = time.perf_counter()
    with capsys.disabled():
        print(
            f"\n[store timing] 32 MiB save {1000 * (t1 - t0):.0f} ms, load {1000 * (t2 - t1):.0f} ms"
        )
    assert m.values["a"].size > a.nbytes


def test_a_snapshot_whose_info_is_not_json_fails_with_that_reason_and_commits_nothing(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "st", key=b"k" * 32)
    snap = store.snapshot("c", "k", {"x": [1, 2]}, info={"bad": object()})
    with pytest.raises(TypeError, match="info must be JSON-serialisable"):
        snap.stage()
    snap.release()
    assert store.find("c", "k") is None and store.manifests() == []
    assert not list((tmp_path / "st").rglob("pending/*.json"))
