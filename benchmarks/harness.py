"""Shared machinery: sizes, samples, a real IPython shell, I/O counters and probes.

Everything here is measurement plumbing; no workload logic.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30
"""A "1 GB" array in the workloads is 1 GiB (2**30 bytes) at scale 1."""


class BenchError(RuntimeError):
    """A benchmark cell failed; the message names the system and the cell."""


@dataclass(frozen=True)
class Sizes:
    """Every size of every workload, derived from one ``--scale`` factor (1.0 = the issue's)."""

    scale: float

    def elems(self, gib: float = 1.0) -> int:
        """Float64 element count of a *gib* GiB array (a multiple of 4096, at least 4096)."""
        n = int(self.scale * gib * GIB) // 8
        return max(4096, n - n % 4096)

    @property
    def frame_rows(self) -> int:
        return max(10_000, int(10_000_000 * self.scale))

    @property
    def small_cells(self) -> int:
        return 200 if self.scale >= 0.05 else 20

    @property
    def state_arrays(self) -> int:
        return 50

    @property
    def state_array_elems(self) -> int:
        # 50 arrays making 500 MB of live state at scale 1
        return max(1024, int(self.scale * 500e6) // 8 // self.state_arrays)

    @property
    def steps(self) -> int:
        return 20 if self.scale >= 0.05 else 6


@dataclass
class Recorder:
    """Samples per system and metric, plus notes (why a peer could not run, what was checked)."""

    workload: str
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)

    def add(self, system: str, metric: str, value: float) -> None:
        self.samples.setdefault(system, {}).setdefault(metric, []).append(float(value))

    def note(self, system: str, text: str) -> None:
        self.notes.setdefault(system, []).append(text)

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "samples": self.samples, "notes": self.notes}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ---- I/O accounting -----------------------------------------------------------------------


def io_written() -> int:
    """Bytes this process has sent toward the storage layer (``/proc/self/io``), net of
    writes cancelled by deleting a file before write-back; -1 when unavailable."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return -1
    fields = dict(line.split(": ") for line in text.splitlines() if ": " in line)
    return int(fields["write_bytes"]) - int(fields.get("cancelled_write_bytes", 0))


def tree_bytes(path: str | os.PathLike[str]) -> int:
    """Apparent size of every file under *path* (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def rmtree(path: str | os.PathLike[str]) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def fsync_file(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- a real IPython shell --------------------------------------------------------------------


def new_shell() -> Any:
    """A fresh ``InteractiveShell`` (the process's instance), as a notebook kernel has one."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=config)
    return shell


def close_shell(shell: Any) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    with contextlib.suppress(Exception):
        shell.history_manager.end_session()
    shell.user_ns.clear()
    InteractiveShell.clear_instance()
    gc.collect()


@contextlib.contextmanager
def quiet() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Swallow what cells print (status lines, peers' chatter) so the table stays readable."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


_last_cpu = [0.0]


def last_cpu() -> float:
    """CPU seconds the calling thread spent in the latest :func:`run` (the kernel's own
    work, without the time other threads and processes took the CPU from it)."""
    return _last_cpu[0]


def run(shell: Any, code: str, label: str = "") -> float:
    """Run one cell through the shell exactly as a notebook does; seconds taken.

    Raises :class:`BenchError` when the cell failed, with its error and output.
    """
    with quiet() as (out, err):
        started = time.perf_counter()
        cpu = time.thread_time()
        result = shell.run_cell(code, store_history=True)
        _last_cpu[0] = time.thread_time() - cpu
        elapsed = time.perf_counter() - started
    if not result.success:
        error = result.error_in_exec or result.error_before_exec
        raise BenchError(
            f"{label or 'cell'} failed: {error!r}\n--- cell ---\n{code}\n--- stdout ---\n"
            f"{out.getvalue()[-2000:]}\n--- stderr ---\n{err.getvalue()[-2000:]}"
        )
    return elapsed


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


# ---- probes inside ipy_resume (observation only: wrappers, no behaviour change) ------------


@dataclass
class Probe:
    """Times ipy_resume's phases: key (``Engine.plan``), the save (``Store.save``, or a
    snapshot plus its commit by the background writer), loads, the timeline's
    ``Journal.append`` and the store's fsyncs (``fsio._fsync``; SQLite's own are not seen)."""

    plan_s: float = 0.0
    save_s: float = 0.0
    load_s: float = 0.0
    fsync_s: float = 0.0
    fsync_n: int = 0
    journal_s: float = 0.0
    saved_bytes: int = 0
    _installed: bool = False

    def reset(self) -> None:
        self.plan_s = self.save_s = self.load_s = self.fsync_s = self.journal_s = 0.0
        self.fsync_n = self.saved_bytes = 0

    def install(self) -> Probe:
        if self._installed:
            return self
        from ipy_resume.engine import core as engine
        from ipy_resume.store import fsio, store
        from ipy_resume.store import journal as journals

        probe = self
        plan, save, load = engine.Engine.plan, store.Store.save, store.Store.load_values
        fsync = fsio._fsync
        journal = getattr(journals, "Journal", None)  # the timeline (SQLite), when there is one
        append = getattr(journal, "append", None)

        def timed_plan(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return plan(self, *args, **kwargs)
            finally:
                probe.plan_s += time.perf_counter() - started

        def timed_save(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = save(self, *args, **kwargs)
                probe.saved_bytes += int(result.bytes_written)
                return result
            finally:
                probe.save_s += time.perf_counter() - started

        def timed_load(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return load(self, *args, **kwargs)
            finally:
                probe.load_s += time.perf_counter() - started

        def timed_fsync(fd: int) -> None:
            started = time.perf_counter()
            try:
                fsync(fd)
            finally:
                probe.fsync_s += time.perf_counter() - started
                probe.fsync_n += 1

        def timed_append(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return append(self, *args, **kwargs)  # type: ignore[misc]
            finally:
                probe.journal_s += time.perf_counter() - started

        from ipy_resume.store import background, snapshot

        snap, commit_group = store.Store.snapshot, background.StoreWriter.commit

        def timed_snapshot(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return snap(self, *args, **kwargs)
            finally:
                probe.save_s += time.perf_counter() - started

        def timed_commit(self: Any, jobs: Any) -> None:
            # the background writer's share of a save (on its thread, after the cell)
            started = time.perf_counter()
            try:
                commit_group(self, jobs)
                probe.saved_bytes += sum(job.bytes_written for job in jobs)
            finally:
                probe.save_s += time.perf_counter() - started

        def timed_sync_commit(self: Any) -> Any:
            started = time.perf_counter()
            try:
                result = sync_commit(self)
                probe.saved_bytes += int(result.bytes_written)
                return result
            finally:
                probe.save_s += time.perf_counter() - started

        sync_commit = snapshot.Snapshot.commit
        store.Store.snapshot = timed_snapshot  # type: ignore[method-assign]
        background.StoreWriter.commit = timed_commit  # type: ignore[method-assign]
        snapshot.Snapshot.commit = timed_sync_commit  # type: ignore[method-assign]
        if journal is not None and append is not None:
            journal.append = timed_append
        engine.Engine.plan = timed_plan  # type: ignore[method-assign]
        store.Store.save = timed_save  # type: ignore[method-assign]
        store.Store.load_values = timed_load  # type: ignore[method-assign]
        fsio._fsync = timed_fsync
        self._installed = True
        return self


def settle(prefault: int = 0) -> None:
    """Flush every dirty page to disk (untimed) before the next measurement.

    Peers that do not fsync leave gigabytes of dirty pages behind, and deleting a file on
    this ``discard``-mounted ext4 queues a TRIM: without a sync the next system measured
    would pay for both. With *prefault*, also touch and free that many bytes of fresh
    memory, so whoever allocates next does not pay for the kernel reclaiming page cache.
    """
    from ipy_resume.store import background

    background.flush()  # saves still being written would disturb the next measurement
    os.sync()
    if prefault:
        import numpy as np

        block = np.empty(prefault, dtype=np.uint8)
        block[:: 1 << 12] = 1
        del block


def use_store(path: Path) -> None:
    """Point ``%%checkpoint`` at *path* (the magic reads ``$IPY_RESUME_DIR`` at every cell)."""
    os.environ["IPY_RESUME_DIR"] = str(path)


def log(text: str) -> None:
    print(text, file=sys.__stderr__, flush=True)


def child_json(module: str, args: list[str], env: dict[str, str], timeout: float = 600) -> Any:
    """Run ``python -m MODULE ARGS...`` in a fresh process; the last JSON line it printed.

    >>> child_json("benchmarks.crash", ["npload", "--path", "a.npy"], env)  # doctest: +SKIP
    {'seconds': 0.16, ...}
    """
    import json
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {proc.stderr[-1500:]}")
    return json.loads(lines[-1])
