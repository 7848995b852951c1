"""An array restored as a copy-on-write map is hashed once; later fingerprints reuse that digest
only while none of its pages has been written.  Every way of writing to it must give a miss.

These run on Linux (``/proc/self/pagemap``); elsewhere the shortcut is off and every
fingerprint hashes, which the last test checks.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.fingerprint import fingerprint, numpy_rules
from ipy_resume.runtime import pages
from ipy_resume.store import Store

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not pages._check_usable(),
    reason="needs /proc/self/pagemap",
)

N = 1 << 20  # float64s: 8 MiB, mapped (blobs.MAP_MIN) and memoised (pages.MEMO_MIN)


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the times an array's bytes are hashed."""
    calls: list[int] = []
    real = numpy_rules._hash_chunks

    def counting(tag: bytes, chunks: Any) -> bytes:
        calls.append(1)
        return real(tag, chunks)

    monkeypatch.setattr(numpy_rules, "_hash_chunks", counting)
    return calls


def restored(tmp_path: Path, values: dict[str, Any]) -> dict[str, Any]:
    store = Store(tmp_path / "store", key=b"k" * 32)
    saved = store.save("cell", "0" * 32, values, extras={}, info={})
    fresh = Store(tmp_path / "store", key=b"k" * 32)
    cache: dict[Any, Any] = {}
    out = fresh.load_values(saved.manifest, cache=cache)
    assert set(fresh.paths_taken(saved.manifest, cache, out).values()) <= {
        "mapped",
        "buffers mapped",
    }
    return out


@pytest.fixture
def mapped(tmp_path: Path) -> Iterator[tuple[np.ndarray, bytes]]:
    """A restored mapped array (hashed once already) and the digest of what was saved."""
    original = np.random.default_rng(1).random(N)
    a = restored(tmp_path, {"a": original})["a"]
    assert pages.active()
    digest = fingerprint(a)
    assert digest == fingerprint(original)
    yield a, digest


def test_an_unchanged_mapped_array_is_hashed_once(
    mapped: tuple[np.ndarray, bytes], hashes: list[int]
) -> None:
    a, digest = mapped
    for _ in range(3):
        assert fingerprint(a) == digest
    assert hashes == []  # the pages were checked instead
    # reading does not count as a change
    float(a.sum()), a[::7].copy(), bytes(a.data.cast("B")[:64])
    assert fingerprint(a) == digest
    assert hashes == []


def _ctypes_write(a: np.ndarray) -> None:
    ctypes.memmove(a.ctypes.data + 8 * 1000, b"\xff" * 8, 8)


def _buffer_write(a: np.ndarray) -> None:
    a.data.cast("B")[8 * 5000] ^= 1


def _readinto(a: np.ndarray) -> None:
    # the kernel writes into the map (read(2)), not Python code
    r, w = os.pipe()
    os.write(w, b"\x01" * 64)
    os.close(w)
    with os.fdopen(r, "rb", buffering=0) as f:
        f.readinto(a.data.cast("B")[8 * 70_000 : 8 * 70_000 + 64])


def _from_a_thread(a: np.ndarray) -> None:
    t = threading.Thread(target=lambda: a.__setitem__(N - 1, -5.0))
    t.start()
    t.join()


def _through_another_array(a: np.ndarray) -> None:
    view = np.frombuffer(a.data, dtype=np.uint8)  # another array over the same memory
    view[12345] ^= 0xFF


WRITES: dict[str, Callable[[np.ndarray], Any]] = {
    "item": lambda a: a.__setitem__(0, 1.0),
    "in place add": lambda a: a.__iadd__(1.0),
    "view": lambda a: a[10:20].__setitem__(3, 5.0),
    "strided view": lambda a: a[::4096].__setitem__(17, 2.0),
    "copyto": lambda a: np.copyto(a[100:105], np.arange(5.0)),
    "out=": lambda a: np.multiply(a[:1000], 2.0, out=a[:1000]),
    "ctypes": _ctypes_write,
    "buffer protocol": _buffer_write,
    "read(2) into it": _readinto,
    "another thread": _from_a_thread,
    "another array object": _through_another_array,
    "reshape view": lambda a: a.reshape(1024, -1).__setitem__((1023, 0), 9.0),
}


@pytest.mark.parametrize("how", list(WRITES))
def test_every_kind_of_write_after_a_restore_gives_a_miss(
    mapped: tuple[np.ndarray, bytes], how: str
) -> None:
    a, digest = mapped
    assert fingerprint(a) == digest  # memoised
    WRITES[how](a)
    now = fingerprint(a)
    assert now != digest, how
    assert now == fingerprint(np.array(a, copy=True))  # as if it had never been mapped
    assert fingerprint(a) == now  # and stays so


def test_writing_the_same_value_back_hashes_again_and_agrees(
    mapped: tuple[np.ndarray, bytes], hashes: list[int]
) -> None:
    a, digest = mapped
    a[3] = a[3]  # a written page, same bytes
    assert fingerprint(a) == digest
    assert hashes == [1]


def test_a_write_to_another_part_of_the_map_leaves_a_clean_view_alone(
    tmp_path: Path, hashes: list[int]
) -> None:
    a = restored(tmp_path, {"a": np.arange(4.0 * N)})["a"]
    head, tail = a[:N], a[2 * N :]
    d_head, d_tail = fingerprint(head), fingerprint(tail)
    tail[5] = -1.0
    assert fingerprint(head) == d_head  # its pages are clean: not hashed again
    assert fingerprint(tail) != d_tail
    assert fingerprint(tail) == fingerprint(tail.copy())
    assert len(hashes) == 2 + 2 + 1  # the two first digests, tail twice, tail's copy


def test_a_change_of_the_blob_file_under_the_map_gives_a_miss(
    tmp_path: Path, mapped: tuple[np.ndarray, bytes]
) -> None:
    a, digest = mapped
    (blob,) = [p for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()]
    # Not something ipy_resume does (committed blobs are never rewritten): someone else
    # writes into the file in place, which the private map's clean pages show.
    entry = pages._find(a.ctypes.data, a.nbytes)
    assert entry is not None and entry.path == str(blob)
    with open(blob, "r+b") as f:
        f.seek(a.ctypes.data - entry.start + a.nbytes - 8)
        f.write(np.float64(123.0).tobytes())
        f.flush()
        os.fsync(f.fileno())
    assert float(a[-1]) == 123.0
    assert fingerprint(a) != digest
    assert fingerprint(a) == fingerprint(np.array(a, copy=True))


def test_a_closed_or_collected_map_is_forgotten(tmp_path: Path) -> None:
    a = restored(tmp_path, {"a": np.arange(float(N))})["a"]
    fingerprint(a)
    assert pages.active()
    where = (a.__array_interface__["data"][0], a.nbytes)
    assert pages._find(*where) is not None
    del a
    import gc

    gc.collect()
    # (other tests' maps may still be alive in this process: look for this one only)
    assert pages._find(*where) is None


def test_a_restored_frame_changed_in_place_misses(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.arange(float(N)), "y": np.arange(N) % 7})
    df = restored(tmp_path, {"df": frame})["df"]
    digest = fingerprint(df)
    assert digest == fingerprint(frame)
    assert fingerprint(df) == digest
    df.iloc[10, 0] = -1.0
    assert fingerprint(df) != digest
    assert fingerprint(df) == fingerprint(df.copy())
    column = df["y"].to_numpy()
    before = fingerprint(df)
    if np.shares_memory(column, df["y"].to_numpy()) and column.flags.writeable:
        column[0] = 99  # through a numpy view of the block
        assert fingerprint(df) != before


def test_the_check_itself_sees_single_written_pages(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"\0" * (8 * mmap.PAGESIZE))
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 8 * mmap.PAGESIZE, access=mmap.ACCESS_COPY)
    buf = np.frombuffer(mm, dtype=np.uint8)
    start = buf.ctypes.data
    assert pages.clean(start, buf.nbytes)
    buf[: 4 * mmap.PAGESIZE].sum()  # read
    assert pages.clean(start, buf.nbytes)
    buf[5 * mmap.PAGESIZE + 17] = 1
    assert not pages.clean(start, buf.nbytes)
    assert pages.clean(start, 5 * mmap.PAGESIZE)
    assert not pages.clean(start + 5 * mmap.PAGESIZE, 1)
    assert pages.clean(start + 6 * mmap.PAGESIZE, 2 * mmap.PAGESIZE)
    # an anonymous buffer's written pages are never clean: memory that is not a file map
    anon = np.ones(4 * mmap.PAGESIZE, dtype=np.uint8)
    assert not pages.clean(anon.ctypes.data, anon.nbytes)
    del buf
    mm.close()


def _saved_then_restored(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], make: str
) -> str:
    """Run *make* and a cell summing its ``a``, forget both, run *make* again (restored as
    a map); returns the summing cell."""
    use = "%%checkpoint use\ns = float(a.sum())"
    shell.run_cell("import numpy as np")
    shell.run_cell(make)
    shell.run_cell(use)
    shell.run_cell("del a, s")
    capsys.readouterr()
    shell.run_cell(make)
    return use


def test_in_a_shell_a_cell_downstream_of_a_restore_misses_after_an_in_place_change(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # restored: a is a map of the store's blob
    use = _saved_then_restored(shell, capsys, f"%%checkpoint make\na = np.arange({N}.0)")
    assert "restored" in capsys.readouterr().err
    shell.run_cell(use)
    assert "restored" in capsys.readouterr().err
    shell.run_cell(use)  # (the digest of a is reused now)
    assert "restored" in capsys.readouterr().err
    shell.run_cell("a[5] += 1000.0")
    shell.run_cell(use)
    assert "restored" not in capsys.readouterr().err
    assert shell.user_ns["s"] == float(np.arange(float(N)).sum()) + 1000.0
    shell.run_cell("a[5] -= 1000.0")  # back to the saved value: the first 'use' hits again
    shell.run_cell(use)
    assert "restored" in capsys.readouterr().err
    assert shell.user_ns["s"] == float(np.arange(float(N)).sum())


def test_without_pagemap_every_fingerprint_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[int]
) -> None:
    a = restored(tmp_path, {"a": np.arange(float(N))})["a"]
    monkeypatch.setattr(pages, "_pagemap_fd", lambda: None)
    d = fingerprint(a)
    assert fingerprint(a) == d
    assert len(hashes) == 2


def test_a_restored_input_is_not_hashed_for_the_next_key(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], hashes: list[int]
) -> None:
    """After a hit, the fingerprint its checkpoint recorded stands for the mapped array (its
    blob was verified against that checkpoint), until a page of it is written."""
    # restored as a map
    use = _saved_then_restored(shell, capsys, f"%%checkpoint make\na = np.arange({N}.0) * 3.0")
    assert "restored" in capsys.readouterr().err
    hashes.clear()
    shell.run_cell(use)
    assert "restored" in capsys.readouterr().err
    assert hashes == []  # the key took the recorded fingerprint: a was not read
    a = shell.user_ns["a"]
    assert fingerprint(a) == fingerprint(np.array(a, copy=True))  # and it is a's
    shell.run_cell("a[N - 1] = -1.0".replace("N", str(N)))
    shell.run_cell(use)
    assert "restored" not in capsys.readouterr().err
    assert hashes  # hashed again once written
    assert shell.user_ns["s"] == float((np.arange(float(N)) * 3.0)[:-1].sum()) - 1.0


def test_a_recorded_fingerprint_is_not_taken_for_a_written_map(
    mapped: tuple[np.ndarray, bytes], hashes: list[int]
) -> None:
    a, digest = mapped
    fresh = np.array(a, copy=True)
    a[7] = 1e9
    assert not numpy_rules.remember(a, digest)  # a page is the process's own now
    assert fingerprint(a) != digest and fingerprint(a) == fingerprint(fresh + (a - fresh))
    assert not numpy_rules.remember(fresh, digest)  # not a map at all
    assert fingerprint(fresh) == digest
