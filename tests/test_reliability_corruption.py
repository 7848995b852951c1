"""Corruption sweep: every damaged byte, truncation, deletion and swap is detected.

For each damage the test checks both readers: loading the checkpoint (what a
``%%checkpoint`` hit does) must raise a :class:`StoreError` naming the damaged
file, and ``ipy-resume verify`` must exit non-zero and name it.  Throughout, the
unpickler is patched: every byte string it is handed must be one the store
wrote (compared by sha256 with the pristine streams and buffers), so the count
of unpickler calls on unverified bytes is measured, and must be zero.

Sizes: every byte of small blobs (the pack of small values) and of manifests
is flipped; ``IPY_RESUME_SWEEP_POSITIONS`` (default 2000) sampled positions of
each large blob.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_report

from ipy_resume.frontends import cli
from ipy_resume.store import Manifest, Store, StoreError, codecs, signing

KEY = bytes(range(32))
POSITIONS = int(os.environ.get("IPY_RESUME_SWEEP_POSITIONS", "2000"))
SMALL = 16 * 1024  # blobs up to this size get every byte flipped


@dataclass
class Sweep:
    root: Path
    store: Store
    manifests: list[Manifest]
    pristine: dict[Path, bytes]  # every file of the store as saved
    allowed: set[str]  # sha256 of every byte string the unpickler may see
    unverified_calls: int = 0
    unpickler_calls: int = 0
    trials: int = 0
    detected_load: int = 0
    detected_verify: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def restore(self, touched: list[Path] | None = None) -> None:
        """Put files back as saved (the *touched* ones, or all) and empty the quarantine."""
        for path in self.pristine if touched is None else touched:
            data = self.pristine.get(path)
            if data is None:
                path.unlink(missing_ok=True)
            elif not path.exists() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        quarantine = self.root / "quarantine"
        if quarantine.exists():  # empty it, but keep the folder: cheaper for the next trial
            for moved in quarantine.iterdir():
                moved.unlink()
        if touched is None:
            for path in self.root.rglob("*"):
                if path.is_file() and path not in self.pristine and path.name != "lock":
                    path.unlink()

    def check(self, kind: str, damaged: list[Path]) -> None:
        """Both readers must detect the damage and name every damaged file."""
        self.trials += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        rels = [p.relative_to(self.root).as_posix() for p in damaged]
        # `ipy-resume verify` is Store.verify plus an exit code; building its argument
        # parser costs more than the check, so the command itself runs every 25th trial.
        if self.trials % 25 == 1:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = cli.main(["verify", "--store", str(self.root)])
            text = out.getvalue()
            assert code != 0, f"verify missed {kind} of {rels}"
        else:
            text = "\n".join(Store(self.root, key=KEY).verify())
        missing = [r for r in rels if r not in text]
        assert not missing, f"verify did not name {missing} after {kind}:\n{text}"
        self.detected_verify += 1
        # a fresh store object: nothing cached from before the damage
        store = Store(self.root, key=KEY)
        errors: list[str] = []
        for m in self.manifests:
            try:
                found = store.find(m.cell_id, m.key)
                if found is None:
                    errors.append("(checkpoint gone)")
                    continue
                store.load_values(found)
                store.load_extras(found)
            except StoreError as exc:
                errors.append(str(exc))
        joined = "\n".join(errors)
        # Loading stops at the first bad file of a checkpoint, so it names at least one
        # of the damaged files (a manifest moved away makes its checkpoint vanish).
        assert any(rel in joined for rel in rels) or "(checkpoint gone)" in joined, (
            f"loading did not detect {kind} of {rels}: {joined!r}"
        )
        self.detected_load += 1


def _stream_digests(store: Store, manifests: list[Manifest]) -> set[str]:
    allowed: set[str] = set()
    for m in manifests:
        for ref in [*m.values.values(), *m.extras.values()]:
            for r in ref.walk():
                data = store.blob_path(r.blob).read_bytes()
                if r.kind == "pickle":
                    assert r.length is not None
                    allowed.add(hashlib.sha256(data[r.offset : r.offset + r.length]).hexdigest())
                elif r.kind == "raw":
                    allowed.add(hashlib.sha256(data).hexdigest())
    return allowed


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sweep]:
    data_dir = tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data_dir))
    key_path = signing.default_key_path()
    key_path.parent.mkdir(parents=True)
    key_path.write_text(KEY.hex() + "\n")
    key_path.chmod(0o600)
    root = tmp_path / "store"
    store = Store(root, key=KEY)
    first = store.save(
        "train",
        "k1",
        {
            "big": np.arange(10_000, dtype=np.float64),  # HDF5 blob, ~84 KB
            "meta": {"inner": np.ones(9_000)},  # raw out-of-band buffer blob + pack
            "small": [1, "text", {"a": (1, 2)}],
            "n": 42,
        },
        extras={"outputs": "printed text"},
        info={"duration": 1.5},
    ).manifest
    second = store.save("other cell", "k2", {"x": "a string", "y": 2.5}).manifest
    manifests = [first, second]
    pristine = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}
    s = Sweep(root, store, manifests, pristine, _stream_digests(store, manifests))

    real_loads = pickle.loads
    real_unpickler = pickle.Unpickler

    def guard(data: Any, buffers: Any) -> None:
        s.unpickler_calls += 1
        ok = hashlib.sha256(bytes(data)).hexdigest() in s.allowed
        for buf in buffers or ():
            ok = ok and hashlib.sha256(bytes(memoryview(buf))).hexdigest() in s.allowed
        if not ok:
            s.unverified_calls += 1
            raise AssertionError("the unpickler was handed bytes the store did not write")

    def guarded_loads(data: Any, /, *args: Any, **kwargs: Any) -> Any:
        guard(data, kwargs.get("buffers"))
        return real_loads(data, *args, **kwargs)

    class GuardedUnpickler(real_unpickler):  # type: ignore[misc, valid-type]
        # Grouped values are read through an Unpickler (for their links), not loads().
        def __init__(self, file: Any, *args: Any, **kwargs: Any) -> None:
            guard(file.getvalue(), kwargs.get("buffers"))
            super().__init__(file, *args, **kwargs)

    real_unpickle = codecs._unpickle

    def guarded_unpickle(stream: Any, buffers: Any, *args: Any) -> Any:
        # the codec's one entry to the unpickler (a group's own Unpickler subclass is made
        # when the codec is imported, so patching pickle.Unpickler does not reach it)
        guard(stream, buffers)
        return real_unpickle(stream, buffers, *args)

    monkeypatch.setattr(pickle, "loads", guarded_loads)
    monkeypatch.setattr(pickle, "Unpickler", GuardedUnpickler)
    monkeypatch.setattr(codecs, "_unpickle", guarded_unpickle)
    yield s
    assert s.unverified_calls == 0


def _blobs(s: Sweep) -> list[Path]:
    return sorted(p for p in s.pristine if p.relative_to(s.root).parts[0] == "objects")


def _manifest_files(s: Sweep) -> list[Path]:
    return sorted(p for p in s.pristine if p.relative_to(s.root).parts[0] == "manifests")


def test_pristine_store_loads_and_verifies(sweep: Sweep) -> None:
    for m in sweep.manifests:
        found = sweep.store.find(m.cell_id, m.key)
        assert found is not None
        sweep.store.load_values(found)
    assert sweep.store.verify() == []
    assert sweep.unpickler_calls > 0  # the guard is really in the unpickling path
    kinds = {ref.kind for m in sweep.manifests for ref in m.blob_refs()}
    assert kinds == {"hdf5", "pickle", "raw"}


def test_every_flipped_byte_is_detected(sweep: Sweep) -> None:
    rng = random.Random(20261129)
    files = _blobs(sweep) + _manifest_files(sweep)
    positions = 0
    for path in files:
        original = sweep.pristine[path]
        size = len(original)
        if size <= SMALL:
            where = range(size)
        else:
            where = sorted(rng.sample(range(size), min(POSITIONS, size)))  # type: ignore[assignment]
            assert len(where) >= min(POSITIONS, size)
        for pos in where:
            damaged = bytearray(original)
            damaged[pos] ^= rng.randrange(1, 256)  # any change, not just one pattern
            path.write_bytes(bytes(damaged))
            sweep.check("flip", [path])
            sweep.restore([path])
            positions += 1
    large = [p for p in files if len(sweep.pristine[p]) > SMALL]
    assert len(large) >= 2 and positions >= 2 * POSITIONS
    reliability_report.record(
        "corruption sweep (byte flips)",
        f"{positions} positions in {len(files)} files ({len(large)} large, "
        f"{POSITIONS} sampled each), detected on load {sweep.detected_load}, "
        f"by verify {sweep.detected_verify}, undetected 0, "
        f"unpickler calls on unverified bytes {sweep.unverified_calls}",
    )


def test_truncation_deletion_swap_and_rename_are_detected(sweep: Sweep) -> None:
    blobs = _blobs(sweep)
    manifests = _manifest_files(sweep)
    assert len(blobs) >= 3
    for path in blobs + manifests:
        size = len(sweep.pristine[path])
        for keep in sorted({0, 1, size // 2, size - 1}):
            path.write_bytes(sweep.pristine[path][:keep])
            sweep.check("truncate", [path])
            sweep.restore()
        path.write_bytes(sweep.pristine[path] + b"\0")
        sweep.check("grow", [path])
        sweep.restore()
    for path in blobs:
        path.unlink()
        sweep.check("delete", [path])
        sweep.restore()
    for i, a in enumerate(blobs):
        for b in blobs[i + 1 :]:
            a.write_bytes(sweep.pristine[b])
            b.write_bytes(sweep.pristine[a])
            sweep.check("swap", [a, b])
            sweep.restore()
            os.replace(a, b)  # a blob renamed to another's name: a is gone, b is wrong
            sweep.check("rename", [a, b])
            sweep.restore()
    # a manifest filed under another cell's folder is never used there
    a, b = manifests
    moved = b.parent / a.name
    shutil.move(a, moved)
    sweep.check("misfiled manifest", [moved])
    sweep.restore()
    assert sweep.detected_load == sweep.detected_verify == sweep.trials
    reliability_report.record(
        "corruption sweep (truncate/grow/delete/swap/rename)",
        ", ".join(f"{k} {n}" for k, n in sorted(sweep.by_kind.items()))
        + f"; detected on load {sweep.detected_load}/{sweep.trials}, by verify "
        f"{sweep.detected_verify}/{sweep.trials}, unpickler calls on unverified bytes "
        f"{sweep.unverified_calls}",
    )


def test_real_cli_verify_exits_nonzero_and_names_each_bad_object(
    sweep: Sweep, tmp_path: Path
) -> None:
    train, other = sweep.manifests
    blobs = [sweep.store.blob_path(r.blob) for r in train.blob_refs()]
    assert other.path is not None
    manifest = other.path
    flipped = bytearray(sweep.pristine[blobs[0]])
    flipped[len(flipped) // 2] ^= 0x01
    blobs[0].write_bytes(bytes(flipped))
    blobs[1].unlink()
    # whitespace only: the content verifies, the layout does not
    manifest.write_bytes(sweep.pristine[manifest].replace(b"{", b"{ ", 1))
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"))
    proc = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "verify", "--store", str(sweep.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc
    for path in (blobs[0], blobs[1], manifest):
        assert path.relative_to(sweep.root).as_posix() in proc.stdout, proc.stdout
    assert "problem(s)" in proc.stderr
    sweep.restore()
    proc = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "verify", "--store", str(sweep.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0 and "is sound" in proc.stdout, proc


def test_quarantine_spares_a_blob_rewritten_since_it_was_read(
    sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that found a bad copy must not move away the sound copy a writer just put there."""
    from ipy_resume.store import blobs as blobs_module

    train = sweep.manifests[0]
    ref = train.values["big"]
    path = sweep.store.blob_path(ref.blob)
    good = sweep.pristine[path]
    bad = bytearray(good)
    bad[100] ^= 0x10
    path.write_bytes(bytes(bad))
    real = blobs_module._read_hashed

    def read_then_a_writer_repairs(f: Any, buf: Any, h: Any) -> None:
        real(f, buf, h)
        temp = path.with_name(".tmp-repair")
        temp.write_bytes(good)
        os.replace(temp, path)  # what a concurrent save of the same content does

    with monkeypatch.context() as patched:
        patched.setattr(blobs_module, "_read_hashed", read_then_a_writer_repairs)
        with pytest.raises(StoreError, match="failed its checksum"):
            Store(sweep.root, key=KEY).load_values(train, ["big"])
    assert path.read_bytes() == good  # still in place
    assert not (sweep.root / "quarantine").exists() or not list(
        (sweep.root / "quarantine").iterdir()
    )
    np.testing.assert_array_equal(
        Store(sweep.root, key=KEY).load_values(train, ["big"])["big"], np.arange(10_000.0)
    )
