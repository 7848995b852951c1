"""Recording output below Python: descriptors 1 and 2, with real pipes and child processes."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import time

import pytest

from ipy_resume.capture import OutputRecord, tee_streams


def _inode(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


@pytest.fixture
def kernel_like_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python streams that are not descriptors 1 and 2, as in a Jupyter kernel."""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())


def test_descriptor_output_is_recorded_and_still_reaches_its_destination(
    kernel_like_streams: None, capfd: pytest.CaptureFixture[str]
) -> None:
    before = (_inode(1), _inode(2))
    record = OutputRecord()
    with tee_streams(record):
        print("python")
        os.write(1, b"native\n")
        subprocess.run(
            [sys.executable, "-c", "print('child'); import sys; sys.stderr.write('oops\\n')"]
        )
        os.write(1, "caf\u00e9 \u2713\n".encode())
    assert (_inode(1), _inode(2)) == before  # both descriptors are back
    assert record.text("stdout") == "python\nnative\nchild\ncaf\u00e9 \u2713\n"
    assert record.text("stderr") == "oops\n"
    seen = capfd.readouterr()  # forwarded live to where the descriptors pointed
    assert "native\nchild\n" in seen.out and "oops\n" in seen.err


def test_streams_that_are_the_descriptors_are_recorded_once(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A terminal: sys.stdout writes to descriptor 1 itself, so the Python level sees it all.
    terminal = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    monkeypatch.setattr(sys, "stdout", terminal)
    record = OutputRecord()
    with tee_streams(record):
        print("once")
    assert record.text("stdout") == "once\n"
    assert capfd.readouterr().out == "once\n"


def test_a_child_that_keeps_the_descriptor_does_not_hold_up_the_cell(
    kernel_like_streams: None, capfd: pytest.CaptureFixture[str]
) -> None:
    record = OutputRecord()
    started = time.perf_counter()
    with tee_streams(record):
        child = subprocess.Popen(["sh", "-c", "echo early; sleep 1; echo late"])
        time.sleep(0.2)
    assert time.perf_counter() - started < 0.9
    child.wait(timeout=10)
    time.sleep(0.2)
    assert record.text("stdout") == "early\n"  # the record closed with the cell
    assert "late" in capfd.readouterr().out  # but the child's later output was not lost


def test_a_cell_that_redirects_a_descriptor_keeps_its_redirect(kernel_like_streams: None) -> None:
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile() as target:
            with tee_streams(OutputRecord()):
                os.dup2(target.fileno(), 1)
            assert _inode(1) == _inode(target.fileno())
            os.write(1, b"into the file")
            target.seek(0)
            assert target.read() == b"into the file"
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def test_nested_tees_record_descriptors_once(kernel_like_streams: None) -> None:
    outer, inner = OutputRecord(), OutputRecord()
    with tee_streams(outer), tee_streams(inner):
        os.write(1, b"native\n")
    assert outer.text("stdout") == "native\n"
    assert inner.text("stdout") == ""  # only the outermost tee owns the descriptors


def test_displays_and_descriptor_output_interleave_without_losing_either(
    kernel_like_streams: None,
) -> None:
    # The reader thread merges stream text into the last event while the cell's thread
    # appends display events: every event must survive whole and in order. Threads switch
    # as often as the interpreter allows, to give the two every chance to collide.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    record = OutputRecord()
    try:
        with tee_streams(record):
            for i in range(2000):
                os.write(1, b"x\n")
                record.add_display({"data": {"text/plain": str(i)}})
    finally:
        sys.setswitchinterval(previous)
    displays = [value for kind, value in record.events if kind == "display"]
    assert [d["data"]["text/plain"] for d in displays] == [str(i) for i in range(2000)]
    assert record.text("stdout") == "x\n" * 2000
