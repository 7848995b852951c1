"""Record what a cell prints and displays while it still reaches the user live.

The recording is a list of events in the order they happened, so a replay
interleaves stdout, stderr and rich output exactly as the first run did. This
module knows nothing of IPython: the display side is a pair of callables the
adapter supplies.

Output that bypasses ``sys.stdout`` — C extensions writing to file descriptor 1,
subprocesses, ``os.write`` — is recorded too in a Jupyter kernel (where those
descriptors are pipes the kernel drains and the Python streams are not the
descriptors themselves): for the cell's duration each descriptor points into a
pipe of ours whose reader both forwards every byte to where it pointed before
(so the user still sees it live) and records it.  In a terminal, where
``sys.stdout`` *is* descriptor 1, it goes to the terminal unrecorded.
"""

from __future__ import annotations

import codecs
import functools
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TextIO

# One event: ("stdout"|"stderr", text) | ("display", payload dict) | ("clear", {"wait": bool})
Event = tuple[str, Any]

# The real (stdout, stderr) of each active tee, innermost last.
_live: list[tuple[TextIO, TextIO]] = []

# Appends to a record come from the cell's thread and from the descriptor readers.
_record_lock = threading.RLock()

# How long the end of a cell waits for a descriptor's reader to drain what was written; only
# a child process still holding the pipe (a worker pool, a background job) makes it wait.
_DRAIN_S = 0.2
_PIPE_BYTES = 1 << 20


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe *fd* (-1 where that cannot be asked)."""
    try:
        import fcntl
        import termios

        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except (ImportError, OSError, AttributeError):
        return -1


def _set_pipe_size(fd: int, size: int) -> None:
    """Ask for a pipe buffer of *size* bytes (Linux; elsewhere the default stays)."""
    import fcntl

    fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)


@dataclass
class OutputRecord:
    """Everything a cell emitted, in order.

    >>> r = OutputRecord(); r.add_stream("stdout", "a"); r.add_stream("stdout", "b"); r.events
    [('stdout', 'ab')]
    """

    events: list[Event] = field(default_factory=list)

    # Descriptor readers append from their own threads (see _FdTee): every change holds
    # the module's lock, so a merge never lands on an event appended in between.

    def add_stream(self, name: str, text: str) -> None:
        """Append stream text, merging with the previous event of the same stream."""
        if not text:
            return
        with _record_lock:
            if self.events and self.events[-1][0] == name:
                self.events[-1] = (name, self.events[-1][1] + text)
            else:
                self.events.append((name, text))

    def add_display(self, payload: dict[str, Any]) -> None:
        """Append one rich display message (data, metadata, transient, update)."""
        with _record_lock:
            self.events.append(("display", payload))

    def add_clear(self, wait: bool) -> None:
        """Append a ``clear_output`` request."""
        with _record_lock:
            self.events.append(("clear", {"wait": wait}))

    def text(self, name: str = "stdout") -> str:
        """All text written to one stream.

        >>> r = OutputRecord([("stdout", "x"), ("stderr", "e"), ("stdout", "y")]); r.text()
        'xy'
        """
        return "".join(value for kind, value in self.events if kind == name)


class StreamTee:
    """A text stream that forwards every write to *target* and records it."""

    def __init__(self, target: TextIO, name: str, record: OutputRecord) -> None:
        self._target = target
        self._name = name
        self._record = record
        self.wrote = False  # (a kernel's flush waits for its I/O thread: skipped when unused)

    def write(self, text: str) -> int:
        self.wrote = True
        self._record.add_stream(self._name, text)
        return self._target.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> Any:
        # encoding, isatty, fileno and friends belong to the real stream.
        return getattr(self._target, name)


@contextmanager
def tee_streams(record: OutputRecord, descriptors: bool | None = None) -> Iterator[OutputRecord]:
    """Tee ``sys.stdout`` and ``sys.stderr`` into *record* for the duration.

    The outermost tee also records descriptors 1 and 2 (see the module's docstring):
    with *descriptors* None, where the descriptor is a pipe some reader already drains
    and the Python stream is not the descriptor itself — a Jupyter kernel that shows
    what C code prints.

    >>> rec = OutputRecord()
    >>> with tee_streams(rec):
    ...     print("hi")
    hi
    >>> rec.text()
    'hi\\n'
    """
    saved = sys.stdout, sys.stderr
    outermost = not _live
    _live.append(saved)
    fd_tees: list[_FdPipe] = []
    if outermost:
        for fd, name, stream in ((1, "stdout", saved[0]), (2, "stderr", saved[1])):
            info = _kernel_pipe(stream, fd) if descriptors is None else None
            if info is not None or descriptors:
                tee = _FdPipe.attach(fd, name, record, info)
                if tee is not None:
                    fd_tees.append(tee)
    sys.stdout = StreamTee(saved[0], "stdout", record)
    sys.stderr = StreamTee(saved[1], "stderr", record)
    try:
        yield record
    finally:
        for stream in (sys.stdout, sys.stderr):
            # A closed user stream must not mask the cell's own error.
            with suppress(Exception):
                if getattr(stream, "wrote", True):  # (one the cell swapped in: flushed)
                    stream.flush()
        sys.stdout, sys.stderr = saved
        _live.pop()
        if fd_tees:
            _flush_c_stdio()
            for tee in fd_tees:  # both descriptors back first: the reader drains both at once
                tee.release()
            for tee in fd_tees:
                tee.close_record()


def _kernel_pipe(stream: Any, fd: int) -> os.stat_result | None:
    """The status of descriptor *fd* when it is a pipe and *stream* is not that descriptor
    (else None).

    That is how a Jupyter kernel shows what C code prints: it points the descriptor into
    a pipe and a thread of its own reads it.  Anywhere else (a terminal, a file, a test's
    capture) the descriptor is left alone, so a C extension that prints while holding the
    GIL can never fill a pipe that only a Python thread drains.
    """
    try:
        if stream.fileno() == fd:
            return None
    except Exception:  # a kernel's stream has no descriptor of its own
        pass
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info if stat.S_ISFIFO(info.st_mode) else None


@functools.cache
def _c_fflush() -> Any:
    """C's ``fflush``, or None where no C library can be asked (an unusual platform)."""
    try:
        import ctypes

        return ctypes.CDLL(None).fflush
    except Exception:
        return None


def _flush_c_stdio() -> None:
    """Flush C's ``stdout`` buffers, so what C code printed reaches the pipe before it closes."""
    fflush = _c_fflush()
    if fflush is not None:
        fflush(None)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Reader:
    """The one thread that drains every descriptor pipe, started once per process.

    It waits in ``poll`` for the pipes it is given; a pipe stays with it until every
    writer has closed it (see :class:`_FdPipe`).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.added: list[_FdPipe] = []  # pipes the thread has not taken over yet
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="ipy_resume-fd", daemon=True)
        self.thread.start()

    def add(self, pipe: _FdPipe) -> None:
        with self.lock:
            self.added.append(pipe)
        os.write(self.wake_write, b"+")

    def _run(self) -> None:
        import select

        poller = select.poll()
        poller.register(self.wake_read, select.POLLIN)
        active: dict[int, _FdPipe] = {}
        while True:
            for fd, _events in poller.poll():
                if fd == self.wake_read:
                    with suppress(BlockingIOError):
                        os.read(self.wake_read, 4096)
                    with self.lock:
                        added, self.added = self.added, []
                    for pipe in added:
                        active[pipe.read_end] = pipe
                        poller.register(pipe.read_end, select.POLLIN)
                    continue
                pipe = active[fd]
                with pipe.lock:  # (read and recorded as one step: see close_record)
                    try:
                        data = os.read(fd, 65536)
                    except OSError:
                        data = b""
                    if data:
                        pipe.feed(data)
                    pipe.read.notify_all()
                if data:
                    continue
                poller.unregister(fd)
                del active[fd]
                pipe.finish()


_reader: _Reader | None = None


def _shared_reader() -> _Reader:
    global _reader, _pipes
    if _reader is None or _reader.pid != os.getpid():  # a forked child starts its own
        _reader = _Reader()
        _pipes = {}  # (a parent's pipes are the parent's reader's)
    return _reader


class _FdPipe:
    """A pipe that descriptor *fd* points into while a cell runs; the shared reader
    forwards what comes out of it to where *fd* pointed before, and records it for the
    cell that is running.

    One pipe per descriptor serves cell after cell while the descriptor keeps pointing
    at the same place between cells (the kernel's own pipe): a cell then costs two
    ``dup2`` calls per descriptor, where a pipe of its own cost a dozen system calls and
    two wake-ups of the reader thread, a tenth of a small cell's miss.  What a process
    the cell started writes after the cell has ended still reaches the user; it is
    recorded only as the output of a later cell it writes during, as Jupyter shows it
    there.
    """

    def __init__(self, fd: int, name: str, target: tuple[int, int]) -> None:
        self.fd, self.name = fd, name
        self.target = target  # (device, inode) of where fd points between cells
        self.record: OutputRecord | None = None  # the cell recording now
        self.forwarding = True
        self.lock = threading.Lock()  # held by the reader from a read to its recording
        self.read = threading.Condition(self.lock)  # notified after each read
        self.closed = False  # the reader read the end of the pipe and closed it
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        reader = _shared_reader()
        opened: list[int] = []
        try:
            self.forward_to = os.dup(fd)  # the reader's copy, and what fd is put back to
            opened.append(self.forward_to)
            self.read_end, self.write_end = os.pipe()
            opened += [self.read_end, self.write_end]
            with suppress(OSError, ImportError):
                # Room for 1 MB before a writer waits for the reader (the kernel's own
                # pipe holds 64 KB): C code that prints holding the GIL blocks later.
                _set_pipe_size(self.write_end, _PIPE_BYTES)
            info = os.fstat(self.write_end)
            self.pipe = (info.st_dev, info.st_ino)
        except BaseException:
            for each in opened:
                os.close(each)
            raise
        reader.add(self)

    @classmethod
    def attach(
        cls, fd: int, name: str, record: OutputRecord, info: os.stat_result | None = None
    ) -> _FdPipe | None:
        """Point *fd* into its pipe (made now, or the one of earlier cells) for *record*;
        *info*, the status of *fd* when the caller has just asked for it."""
        try:
            _shared_reader()  # (first: a forked child must not use its parent's pipes)
            info = os.fstat(fd) if info is None else info
            here = (info.st_dev, info.st_ino)
            pipe = _pipes.get(fd)
            if pipe is not None and pipe.target != here:
                pipe.retire()  # fd points elsewhere now: a pipe for the new place
                pipe = None
            if pipe is None:
                pipe = _pipes[fd] = cls(fd, name, here)
            with pipe.lock:
                pipe.record = record
                pipe.decoder.reset()
            os.dup2(pipe.write_end, fd)
            return pipe
        except (OSError, RuntimeError):  # no such descriptor, out of descriptors or threads
            return None

    def feed(self, data: bytes) -> None:
        """On the reader's thread: forward *data* where the descriptor pointed, record it."""
        if self.forwarding:
            try:
                _write_all(self.forward_to, data)
            except OSError:  # where it went is gone: keep recording
                self.forwarding = False
        with _record_lock:  # so nothing is appended once close_record() has run
            record = self.record
            if record is not None:
                try:
                    record.add_stream(self.name, self.decoder.decode(data))
                except Exception:  # keep forwarding: a full pipe would block the writer
                    self.record = None

    def finish(self) -> None:
        """On the reader's thread: every writer closed the pipe and all of it was read."""
        with self.lock:
            for each in (self.read_end, self.forward_to):
                with suppress(OSError):
                    os.close(each)
            self.closed = True

    def retire(self) -> None:
        """Give the pipe up: the reader closes it once every other writer has."""
        if _pipes.get(self.fd) is self:
            del _pipes[self.fd]
        end, self.write_end = self.write_end, -1
        if end >= 0:
            with suppress(OSError):
                os.close(end)

    def release(self) -> None:
        """Put the descriptor back (the reader drains the rest of the pipe meanwhile)."""
        try:
            info = os.fstat(self.fd)
            # a cell that pointed the descriptor elsewhere itself keeps its choice
            if (info.st_dev, info.st_ino) == self.pipe:
                os.dup2(self.forward_to, self.fd)
        except OSError:
            self.retire()

    def close_record(self) -> None:
        """Wait for the reader to have read everything written so far; close the record."""
        # Nothing left in the pipe, and the reader not between a read and its recording,
        # is everything the cell wrote.  Only a process the cell started that keeps
        # writing can keep the pipe from emptying: then the record closes after a while.
        deadline = None
        with self.read:
            while not self.closed and _unread(self.read_end) > 0:
                now = time.monotonic()
                deadline = now + _DRAIN_S if deadline is None else deadline
                if now >= deadline:
                    break
                self.read.wait(deadline - now)
        with _record_lock:
            self.record = None


_pipes: dict[int, _FdPipe] = {}


def live_stderr() -> TextIO:
    """The stderr the user sees, bypassing any recording: for progress lines.

    Progress is about *this* run; replaying it on a restore would be noise.

    >>> live_stderr() is sys.stderr
    True
    """
    return _live[-1][1] if _live else sys.stderr


def replay(
    record: OutputRecord,
    publish: Callable[[dict[str, Any]], None] | None = None,
    clear: Callable[[bool], None] | None = None,
) -> None:
    """Emit a recorded cell's output again, in its original order.

    Display events go to *publish* (skipped when it is None, e.g. outside IPython).

    >>> replay(OutputRecord([("stdout", "again\\n")]))
    again
    """
    # A stream is flushed when the replay turns to the other one or to a display, and
    # at the end, so the order holds; one nothing was written to is not.  (In a kernel a
    # flush waits for its I/O thread: two of them were most of a small cell's hit.)
    written: TextIO | None = None
    for kind, value in record.events:
        if kind in ("stdout", "stderr"):
            stream = sys.stdout if kind == "stdout" else sys.stderr
            if written is not None and written is not stream:
                written.flush()
            stream.write(value)
            written = stream
            continue
        if written is not None:
            written.flush()
            written = None
        if kind == "display" and publish is not None:
            publish(value)
        elif kind == "clear" and clear is not None:
            clear(bool(value.get("wait", False)))
    if written is not None:
        written.flush()
