"""The floors every result is divided by, measured on the same buffers in the same run."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import xxhash


def xxh3(arr: np.ndarray) -> float:
    """Seconds for xxh3_128 over the array's buffer, in place (the hashing floor)."""
    started = time.perf_counter()
    xxhash.xxh3_128(arr.data.cast("B")).digest()
    return time.perf_counter() - started


def write_fsync(path: Path, arr: np.ndarray) -> float:
    """Seconds to write the array's bytes to a new file and fsync it (the save floor)."""
    view = arr.data.cast("B")
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - started
    path.unlink()
    return elapsed


def np_save_fsync(path: Path, arr: np.ndarray) -> float:
    """Seconds for ``np.save`` to a file plus fsync; the file is kept for :func:`np_load`."""
    started = time.perf_counter()
    with open(path, "wb") as fh:
        np.save(fh, arr)
        fh.flush()
        os.fsync(fh.fileno())
    return time.perf_counter() - started


def np_load(path: Path) -> float:
    """Seconds for ``np.load`` of a file in the page cache (the restore floor)."""
    started = time.perf_counter()
    loaded = np.load(path)
    elapsed = time.perf_counter() - started
    del loaded
    return elapsed


def pickle_save_fsync(path: Path, value: Any) -> float:
    """Seconds for pickle protocol 5 of *value* to a file plus fsync (a save floor for objects)."""
    started = time.perf_counter()
    with open(path, "wb") as fh:
        pickle.dump(value, fh, protocol=5)
        fh.flush()
        os.fsync(fh.fileno())
    return time.perf_counter() - started


def pickle_load(path: Path) -> float:
    started = time.perf_counter()
    with open(path, "rb") as fh:
        loaded = pickle.load(fh)
    elapsed = time.perf_counter() - started
    del loaded
    return elapsed


def durable_small_file(folder: Path, size: int = 1024) -> float:
    """Seconds for the smallest durable file: temp write + fsync + rename + folder fsync."""
    data = os.urandom(size)
    temp, final = folder / ".floor.tmp", folder / "floor.bin"
    started = time.perf_counter()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, final)
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    elapsed = time.perf_counter() - started
    final.unlink()
    return elapsed


def sqlite_commit(folder: Path) -> float:
    """Seconds for one durable SQLite insert on an open WAL connection (synchronous=FULL):
    the floor of appending one timeline event."""
    import sqlite3

    path = folder / "floor.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (x TEXT)")
        started = time.perf_counter()
        conn.execute("INSERT INTO t VALUES (?)", ("event",))
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return elapsed
