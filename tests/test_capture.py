"""Recording output below Python: descriptors 1 and 2, with real pipes and child processes.

``kernel`` points descriptors 1 and 2 into pipes that a thread drains, and makes the Python
streams plain buffers: what ipykernel does to show what C code prints in a notebook.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from deadlines import wait_until

from ipy_resume.runtime.capture import OutputRecord, tee_streams


def _inode(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class FakeKernel:
    """Descriptors 1 and 2 drained into ``shown`` by a thread, as a kernel's watcher does.

    As ipykernel's, the watcher is stopped by a marker written to the pipe, not by the
    pipe's end: ipy_resume keeps a copy of the kernel's descriptor between cells.
    """

    STOP = b"\0stop-watching\0"

    def __init__(self) -> None:
        self.shown = {1: bytearray(), 2: bytearray()}
        self.saved: dict[int, int] = {}
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> FakeKernel:
        for fd in (1, 2):
            self.saved[fd] = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            thread = threading.Thread(target=self._drain, args=(fd, read_end), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _drain(self, fd: int, read_end: int) -> None:
        shown = self.shown[fd]
        while data := os.read(read_end, 65536):
            shown += data
            if shown.endswith(self.STOP):
                del shown[-len(self.STOP) :]
                break
        os.close(read_end)

    def __exit__(self, *exc: object) -> None:
        for fd, saved in self.saved.items():
            os.write(fd, self.STOP)
            os.dup2(saved, fd)
            os.close(saved)
        for thread in self.threads:
            thread.join(5)
            assert not thread.is_alive(), "the fake kernel's watcher did not stop"

    def text(self, fd: int) -> str:
        return self.shown[fd].decode()


@contextmanager
def kernel_streams() -> Iterator[FakeKernel]:
    """Inside a test body: pytest puts its own capture back between set-up and the test."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        with FakeKernel() as fake:
            yield fake
    finally:
        sys.stdout, sys.stderr = saved


def test_descriptor_output_is_recorded_and_still_shown() -> None:
    with kernel_streams() as kernel:
        before = (_inode(1), _inode(2))
        record = OutputRecord()
        with tee_streams(record):
            print("python")
            os.write(1, b"native\n")
            code = "print('child'); import sys; sys.stderr.write('oops\\n')"
            subprocess.run([sys.executable, "-c", code], check=True)
            os.write(1, "caf\u00e9 \u2713\n".encode())
        assert (_inode(1), _inode(2)) == before  # both descriptors are the kernel's again
    assert record.text("stdout") == "python\nnative\nchild\ncaf\u00e9 \u2713\n"
    assert record.text("stderr") == "oops\n"
    assert kernel.text(1) == "native\nchild\ncaf\u00e9 \u2713\n"  # forwarded live
    assert kernel.text(2) == "oops\n"


def test_descriptors_are_left_alone_outside_a_kernel(capfd: pytest.CaptureFixture[str]) -> None:
    saved = sys.stdout
    try:
        # A terminal: sys.stdout writes to descriptor 1 itself; the Python level sees it all.
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        before = _inode(1)
        record = OutputRecord()
        with tee_streams(record):
            print("once")
            assert _inode(1) == before
        assert record.text("stdout") == "once\n"
        # Python streams that are not descriptors, but descriptor 1 a file (a test's
        # capture): left alone too, so nothing can block on a pipe a Python thread drains.
        sys.stdout = io.StringIO()
        record = OutputRecord()
        with tee_streams(record):
            os.write(1, b"to the file\n")
            assert _inode(1) == before
        assert record.text("stdout") == ""
    finally:
        sys.stdout = saved
    assert capfd.readouterr().out == "once\nto the file\n"


def _child(*steps: str) -> subprocess.Popen[bytes]:
    """A shell that runs *steps*; ``await NAME`` waits until the file NAME exists."""
    script = 'await() { while [ ! -e "$1" ]; do sleep 0.01; done; }; ' + "; ".join(steps)
    return subprocess.Popen(["sh", "-c", script])


def test_a_child_that_keeps_the_descriptor_does_not_hold_up_the_cell(tmp_path: Path) -> None:
    go = tmp_path / "go"
    # (should the cell wait for the child after all, the child is let go later, so the
    # test fails on the assertion below instead of hanging)
    release = threading.Timer(30, go.touch)
    release.start()
    try:
        with kernel_streams() as kernel:
            record = OutputRecord()
            with tee_streams(record):
                child = _child("echo early", f"await {shlex.quote(str(go))}", "echo late")
                wait_until(lambda: record.text("stdout"), what="the child's first line")
            assert child.poll() is None, "the cell's end waited for the child"
            go.touch()
            child.wait(timeout=30)
            wait_until(lambda: "late" in kernel.text(1), what="the child's late line shown")
    finally:
        release.cancel()
    assert record.text("stdout") == "early\n"  # the record closed with the cell
    assert kernel.text(1) == "early\nlate\n"  # but the child's later output still showed


def test_a_cell_that_redirects_a_descriptor_keeps_its_redirect() -> None:
    with kernel_streams(), tempfile.TemporaryFile() as target:
        saved = os.dup(1)
        try:
            with tee_streams(OutputRecord()):
                os.dup2(target.fileno(), 1)
            assert _inode(1) == _inode(target.fileno())
            os.write(1, b"into the file")
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        target.seek(0)
        assert target.read() == b"into the file"


def test_nested_tees_record_descriptors_once() -> None:
    outer, inner = OutputRecord(), OutputRecord()
    with kernel_streams(), tee_streams(outer), tee_streams(inner):
        os.write(1, b"native\n")
    assert outer.text("stdout") == "native\n"
    assert inner.text("stdout") == ""  # only the outermost tee owns the descriptors


def test_more_than_a_pipe_of_output_in_one_write_does_not_block() -> None:
    # 256 KB in one os.write: more than a default pipe holds, so the reader must keep up.
    blob = b"y" * (256 * 1024 - 1) + b"\n"
    record = OutputRecord()
    with kernel_streams() as kernel, tee_streams(record):
        os.write(1, blob)
    assert record.text("stdout") == blob.decode()
    assert kernel.text(1) == blob.decode()


def test_displays_and_descriptor_output_interleave_without_losing_either() -> None:
    # The reader thread merges stream text into the last event while the cell's thread
    # appends display events: every event must survive whole and in order. Threads switch
    # as often as the interpreter allows, to give the two every chance to collide.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    record = OutputRecord()
    try:
        with kernel_streams(), tee_streams(record):
            for i in range(2000):
                os.write(1, b"x\n")
                record.add_display({"data": {"text/plain": str(i)}})
    finally:
        sys.setswitchinterval(previous)
    displays = [value for kind, value in record.events if kind == "display"]
    assert [d["data"]["text/plain"] for d in displays] == [str(i) for i in range(2000)]
    assert record.text("stdout") == "x\n" * 2000


def test_what_a_short_cell_writes_last_is_never_lost() -> None:
    # A cell's end looks at the pipe instead of waiting for the reader thread: a byte
    # written just before the end is either still in the pipe (then it waits) or read and
    # recorded already (the reader holds the tee's lock from its read to its recording).
    with kernel_streams() as kernel:
        records = []
        for i in range(300):
            record = OutputRecord()
            with tee_streams(record):
                if i % 2:
                    os.write(1, f"n{i}\n".encode())
            records.append(record)
    for i, record in enumerate(records):
        assert record.text("stdout") == (f"n{i}\n" if i % 2 else ""), i
    assert kernel.text(1) == "".join(f"n{i}\n" for i in range(1, 300, 2))


def test_cells_share_one_pipe_per_descriptor_while_the_kernel_keeps_its_own() -> None:
    # One pipe serves cell after cell (two dup2 calls a cell instead of a new pipe);
    # a new kernel pipe, as after a restart of the streams, gets a pipe of its own.
    seen = []
    with kernel_streams() as kernel:
        for i in range(3):
            record = OutputRecord()
            with tee_streams(record):
                seen.append(_inode(1))
                os.write(1, f"cell {i}\n".encode())
            assert record.text("stdout") == f"cell {i}\n"
    assert seen[0] == seen[1] == seen[2]
    assert kernel.text(1) == "cell 0\ncell 1\ncell 2\n"
    with kernel_streams() as other:
        record = OutputRecord()
        with tee_streams(record):
            assert _inode(1) != seen[0]
            os.write(1, b"after\n")
    assert record.text("stdout") == "after\n"
    assert other.text(1) == "after\n"


def test_a_child_writing_after_its_cell_is_recorded_by_the_cell_it_writes_during(
    tmp_path: Path,
) -> None:
    between, during = tmp_path / "between", tmp_path / "during"
    with kernel_streams() as kernel:
        first, second = OutputRecord(), OutputRecord()
        with tee_streams(first):
            child = _child(
                "echo early",
                f"await {shlex.quote(str(between))}",
                "echo between",
                f"await {shlex.quote(str(during))}",
                "echo during",
            )
            wait_until(lambda: first.text("stdout"), what="the child's first line")
        between.touch()  # "between" comes while no cell runs: shown, not recorded
        wait_until(lambda: "between" in kernel.text(1), what="the line between cells shown")
        with tee_streams(second):
            during.touch()
            child.wait(timeout=30)
        wait_until(lambda: "during" in kernel.text(1), what="the last line shown")
    assert first.text("stdout") == "early\n"
    assert second.text("stdout") == "during\n"
    assert kernel.text(1) == "early\nbetween\nduring\n"
